"""Sequence and optional graph inputs and outputs, rewritten into tensors for one run-time structure.

The graph IR has tensors only, so a model that takes or returns a sequence or an optional is
imported per *structure* of those values (tk.compile specialises on it at run time,
runtime/specialize.py), and each structure is a plain ONNX model over tensors:

    flatten_inputs(model, {"seq": [a, b], "opt": None})
        # seq -> inputs seq.0, seq.1 and SequenceConstruct(seq.0, seq.1) -> seq
        # opt -> Optional(type=...) -> opt, an optional without a value
    expose_outputs(model, {"out": 3})
        # a sequence output of 3 elements -> outputs out.0, out.1, out.2 (SequenceAt with positions 0..2);
        # an empty optional output (None) is dropped

The importer then sees ordinary nodes (converters/sequence.py resolves them at import), and each
rewrite returns where the tensors went (`leaves`, `OutputLayout`) so the caller passes the value's
arrays in and rebuilds lists and Nones from the flat outputs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ...ir.errors import FrontendError

__all__ = ["flatten_inputs", "expose_outputs", "value_leaves", "is_structured_value", "OutputLayout",
           "declares_structured_outputs"]


def is_structured_value(value: Any) -> bool:
    """A sequence (a list or tuple of arrays) or an absent optional (None)."""
    return value is None or isinstance(value, (list, tuple))


def value_leaves(value: Any) -> list[np.ndarray]:
    """The tensors of a run-time value: none for None, the elements of a sequence, else the array."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [np.asarray(item) for item in value]
    return [np.asarray(value)]


def declares_structured_outputs(model) -> bool:
    """Whether a graph output is declared as a sequence or an optional."""
    return any(not output.type.HasField("tensor_type") and output.type.WhichOneof("value") is not None
               for output in model.graph.output)


def flatten_inputs(model, values: Mapping[str, Any]) -> tuple[Any, dict[str, tuple[str, ...]]]:
    """A copy of `model` whose sequence and optional graph inputs are tensor inputs for the structure
    of `values` (by input name), and, per graph input, the names of the inputs its tensors go to
    (a tensor input keeps its own name). `model` itself is returned when no input needs a rewrite."""
    from onnx import helper
    graph = model.graph
    structured = [value for value in graph.input if not value.type.HasField("tensor_type")]
    leaves = {value.name: (value.name,) for value in graph.input if value.type.HasField("tensor_type")}
    if not structured:
        return model, leaves
    copy = type(model)()
    copy.CopyFrom(model)
    taken = _names(copy.graph)
    inputs, nodes = [], []
    for value in copy.graph.input:
        if value.type.HasField("tensor_type"):
            inputs.append(value)
            continue
        if value.name not in values:
            raise FrontendError(f"graph input {value.name!r} was not given")
        given = values[value.name]
        names = tuple(_fresh(f"{value.name}.{index}", taken) for index in range(len(value_leaves(given))))
        leaves[value.name] = names
        element = _tensor_proto(value.type, value.name)
        for name, array in zip(names, value_leaves(given)):
            inputs.append(helper.make_tensor_value_info(name, element.elem_type, array.shape))
        nodes.extend(_construct(value, given, names, element.elem_type, taken))
    del copy.graph.input[:]
    copy.graph.input.extend(inputs)
    # the constructing nodes go first: they read only graph inputs, and every node may read their result
    original = list(copy.graph.node)
    del copy.graph.node[:]
    copy.graph.node.extend([*nodes, *original])
    return copy, leaves


def _construct(value, given: Any, names: tuple[str, ...], elem_type: int, taken: set[str]) -> list:
    """The nodes that rebuild graph input `value` (a sequence or an optional) from tensor inputs `names`."""
    from onnx import helper
    type_proto = value.type
    is_optional = type_proto.HasField("optional_type")
    inner = type_proto.optional_type.elem_type if is_optional else type_proto
    if is_optional and given is None:
        return [helper.make_node("Optional", [], [value.name], type=inner, name=f"{value.name}/absent")]
    target = _fresh(f"{value.name}.value", taken) if is_optional else value.name
    if inner.HasField("tensor_type"):
        if isinstance(given, (list, tuple)):
            raise FrontendError(f"graph input {value.name!r} is an optional tensor; pass an array or None, "
                                "not a list")
        nodes = [helper.make_node("Identity", [names[0]], [target], name=f"{value.name}/tensor")]
    elif names:
        nodes = [helper.make_node("SequenceConstruct", list(names), [target], name=f"{value.name}/construct")]
    else:
        nodes = [helper.make_node("SequenceEmpty", [], [target], dtype=elem_type, name=f"{value.name}/empty")]
    if is_optional:
        nodes.append(helper.make_node("Optional", [target], [value.name], name=f"{value.name}/present"))
    return nodes


def _tensor_proto(type_proto, name: str):
    """The TensorTypeProto of the elements of a sequence or optional input (signature.py has refused
    maps and nested sequences before this runs)."""
    while not type_proto.HasField("tensor_type"):
        kind = type_proto.WhichOneof("value")
        if kind == "sequence_type":
            type_proto = type_proto.sequence_type.elem_type
        elif kind == "optional_type":
            type_proto = type_proto.optional_type.elem_type
        else:
            raise FrontendError(f"graph input {name!r} has a {kind}, which tensorkiln does not support")
    return type_proto.tensor_type


@dataclass(frozen=True)
class OutputLayout:
    """Where each graph output's value lies in the flat outputs of the exposed model: per output
    None (an empty optional), -1 (a tensor, the next flat output) or n >= 0 (a sequence, the next n)."""

    entries: tuple[int | None, ...]

    @property
    def num_flat(self) -> int:
        return sum(1 if n == -1 else n for n in self.entries if n is not None)

    def rebuild(self, flat: list[Any]) -> list[Any]:
        """The graph outputs (arrays, lists of arrays, None) from the flat outputs."""
        outputs, position = [], 0
        for entry in self.entries:
            if entry is None:
                outputs.append(None)
            elif entry == -1:
                outputs.append(flat[position])
                position += 1
            else:
                outputs.append(list(flat[position:position + entry]))
                position += entry
        return outputs


def expose_outputs(model, structure: Mapping[str, int | None]) -> tuple[Any, OutputLayout]:
    """A copy of `model` whose sequence outputs (by name: their length as imported, see
    converters/sequence.py's SequenceOutputError) are one tensor output per element, and whose
    empty optional outputs (None) are dropped; and the layout to rebuild the outputs with."""
    from onnx import helper, numpy_helper
    copy = type(model)()
    copy.CopyFrom(model)
    graph = copy.graph
    taken = _names(graph)
    outputs, entries = [], []
    for output in graph.output:
        if output.name not in structure:
            outputs.append(output)
            entries.append(-1)
            continue
        length = structure[output.name]
        entries.append(length)
        if length is None:
            continue
        source = output.name
        if output.type.HasField("optional_type"):   # SequenceAt reads a sequence, not an optional of one
            source = _fresh(f"{output.name}.value", taken)
            graph.node.append(helper.make_node("OptionalGetElement", [output.name], [source],
                                               name=f"{output.name}/get"))
        elem_type = _tensor_proto(output.type, output.name).elem_type
        for index in range(length):
            position = _fresh(f"{output.name}.position{index}", taken)
            graph.initializer.append(numpy_helper.from_array(np.array(index, np.int64), position))
            item = _fresh(f"{output.name}.{index}", taken)
            graph.node.append(helper.make_node("SequenceAt", [source, position], [item],
                                               name=f"{output.name}/at{index}"))
            outputs.append(helper.make_tensor_value_info(item, elem_type, None))
    del graph.output[:]
    graph.output.extend(outputs)
    return copy, OutputLayout(tuple(entries))


def _names(graph) -> set[str]:
    """Every value name of `graph` and of its subgraphs (a new name must shadow none)."""
    names = {value.name for value in (*graph.input, *graph.output, *graph.value_info)}
    names.update(tensor.name for tensor in graph.initializer)
    for node in graph.node:
        names.update(node.input)
        names.update(node.output)
        for attribute in node.attribute:
            for subgraph in ([attribute.g] if attribute.HasField("g") else []) + list(attribute.graphs):
                names.update(_names(subgraph))
    return names


def _fresh(name: str, taken: set[str]) -> str:
    candidate, suffix = name, 0
    while candidate in taken:
        suffix += 1
        candidate = f"{name}_{suffix}"
    taken.add(candidate)
    return candidate
