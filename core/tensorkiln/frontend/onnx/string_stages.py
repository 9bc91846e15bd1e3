"""string_stages.py: split an ONNX model that uses strings into host nodes and a compilable core.

A node that takes or makes a string tensor runs on the host (runtime/string_ops.py). Those whose
inputs are all graph inputs, initializers or other host results form the prelude; those that read
what the core computes form the postlude; the rest is the core, an ONNX model of its own that
`tk.compile` compiles as usual. A core node that needs a postlude result (strings in the middle of
the numeric part) is refused with an error naming it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...ir.errors import UnsupportedOpError
from ...runtime.staged_model import HostNode

__all__ = ["has_string_values", "StringStages", "split_string_stages"]

_STRING = 8   # onnx.TensorProto.STRING


def _tensor_elem(type_proto) -> int | None:
    return type_proto.tensor_type.elem_type if type_proto.HasField("tensor_type") else None


def has_string_values(model: Any) -> bool:
    """True when a graph input, output, initializer or declared value, or a Cast target, is a string."""
    if type(model).__name__ != "ModelProto":
        return False
    graph = model.graph
    if any(_tensor_elem(v.type) == _STRING for v in (*graph.input, *graph.output, *graph.value_info)):
        return True
    if any(t.data_type == _STRING for t in graph.initializer):
        return True
    return any(a.name == "to" and a.i == _STRING for n in graph.node for a in n.attribute)


@dataclass
class StringStages:
    prelude: list[HostNode] = field(default_factory=list)
    postlude: list[HostNode] = field(default_factory=list)
    core: Any = None                 # an onnx.ModelProto, or None when every node runs on the host
    core_inputs: list[str] = field(default_factory=list)
    core_outputs: list[str] = field(default_factory=list)
    constants: dict[str, np.ndarray] = field(default_factory=dict)   # initializers host nodes read


def _attributes(node) -> dict[str, Any]:
    from onnx import helper

    def plain(value):
        if isinstance(value, bytes):
            return value.decode()
        if isinstance(value, list):
            return [plain(v) for v in value]
        return value
    return {a.name: plain(helper.get_attribute_value(a)) for a in node.attribute}


def split_string_stages(model: Any) -> StringStages:
    """The prelude, core and postlude of `model` (see the module docstring)."""
    import onnx
    from onnx import helper, numpy_helper

    graph = model.graph
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:
        inferred = graph
    infos = {v.name: v for v in (*inferred.input, *inferred.value_info, *inferred.output)}
    types = {name: _tensor_elem(v.type) for name, v in infos.items()}
    initializers = {t.name: t for t in graph.initializer}
    types.update({name: t.data_type for name, t in initializers.items()})

    def is_host(node) -> bool:
        return any(types.get(n) == _STRING for n in (*node.input, *node.output) if n)

    stages = StringStages()
    on_host = {v.name for v in graph.input} | set(initializers)
    from_postlude: set[str] = set()
    core_nodes = []
    for node in graph.node:
        host = HostNode(node.op_type, node.name, tuple(node.input), tuple(node.output), _attributes(node))
        needs_postlude = [n for n in node.input if n in from_postlude]
        if is_host(node) and all(n in on_host for n in node.input if n):
            stages.prelude.append(host)
            on_host.update(n for n in node.output if n)
        elif is_host(node):
            stages.postlude.append(host)
            from_postlude.update(n for n in node.output if n)
        elif needs_postlude:
            raise UnsupportedOpError(
                f"ONNX node {node.name!r} ({node.op_type}) reads {needs_postlude[0]!r}, which host string nodes "
                "compute from the compiled part of the model; tensorkiln runs string nodes only before or after it")
        else:
            core_nodes.append(node)
    host_reads = {n for h in (*stages.prelude, *stages.postlude) for n in h.inputs if n}
    stages.constants = {n: numpy_helper.to_array(initializers[n]) for n in host_reads if n in initializers}
    if not core_nodes:
        return stages
    produced = {n for node in core_nodes for n in node.output if n}
    read = [n for node in core_nodes for n in node.input if n]
    stages.core_inputs = list(dict.fromkeys(n for n in read if n in on_host and n not in initializers))
    wanted = [v.name for v in graph.output] + [n for h in stages.postlude for n in h.inputs]
    stages.core_outputs = list(dict.fromkeys(n for n in wanted if n in produced))
    missing = [n for n in (*stages.core_inputs, *stages.core_outputs) if n not in infos]
    if missing:
        raise UnsupportedOpError(f"the type of {missing[0]!r}, between host string nodes and the compiled part, is "
                                 "unknown (onnx shape inference could not tell); declare it in the graph's value_info")
    core_graph = helper.make_graph(core_nodes, f"{graph.name}_core", [infos[n] for n in stages.core_inputs],
                                   [infos[n] for n in stages.core_outputs],
                                   [initializers[n] for n in dict.fromkeys(read) if n in initializers])
    stages.core = helper.make_model(core_graph, opset_imports=list(model.opset_import), ir_version=model.ir_version,
                                    functions=list(model.functions))
    return stages
