"""Sequences and optionals: SequenceConstruct/Empty/At/Insert/Erase/Length, SplitToSequence,
ConcatFromSequence, Optional, OptionalHasElement, OptionalGetElement.

The graph IR's tensors have static shapes, and so do the sequences here: a sequence is
a list of tensor expressions known at import (`SequenceValue`), each element with its
own shape, and an empty optional is `NoneValue`. The ops on them are resolved while the
model is imported: positions must be known then (a position computed from graph inputs
raises ValueNotStaticError, on which a caller may specialise; SequenceAt of elements of one
type takes a run-time position), and the tensors that
leave a sequence (SequenceAt, ConcatFromSequence, ...) are ordinary graph values that
the compiled model computes at run time. A Loop that carries a sequence is unrolled
(control_flow.py), so a sequence built up by a loop with a static trip count works too.

A sequence or optional graph input reaches the importer already flattened: tk.compile specialises
on its run-time structure (frontend/onnx/structured.py rewrites the model so the value's tensors
are graph inputs, rebuilt into the sequence by SequenceConstruct). A sequence or optional graph
output makes from_onnx raise SequenceOutputError, naming each such output's length (None for an
empty optional); tk.compile then re-imports with the elements as tensor outputs.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import from_numpy
from ....ir.errors import FrontendError, ShapeError, UnsupportedOpError
from ..node import OnnxNode
from ._registry import converter

__all__ = ["SequenceValue", "NoneValue", "SequenceOutputError", "is_tensor"]


@dataclass(frozen=True)
class SequenceValue:
    """An ONNX sequence of tensors: its elements (graph expressions) and element dtype."""

    items: tuple[Expr, ...]
    dtype: str

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class NoneValue:
    """An ONNX optional without a value."""

    kind: str = "tensor"


class SequenceOutputError(UnsupportedOpError):
    """A graph output is a sequence or an optional, which a graph.Module cannot return.

    `structure` maps every such output's name to its length as imported (None for an optional
    without a value): a caller re-imports with those elements as tensor outputs and rebuilds the
    list (structured.py's expose_outputs; tk.compile does this)."""

    def __init__(self, structure: dict[str, int | None]) -> None:
        listing = ", ".join(f"{name!r} ({'an empty optional' if n is None else f'a sequence of {n}'})"
                            for name, n in structure.items())
        super().__init__(f"graph output(s) {listing}: each is a sequence or an optional, and from_onnx returns "
                         "tensors only; tk.compile and tensorkiln.onnx_backend return them as lists (None for an "
                         "empty optional)")
        self.structure = structure

    @staticmethod
    def of(outputs, values) -> "SequenceOutputError":
        """The error for graph `outputs` (ValueInfoProtos) given the imported `values` by name."""
        structure = {}
        for output in outputs:
            value = values.get(output.name)
            if isinstance(value, SequenceValue):
                structure[output.name] = len(value)
            elif isinstance(value, NoneValue):
                structure[output.name] = None
        return SequenceOutputError(structure)


def is_tensor(value) -> bool:
    """True for a graph expression (a tensor), False for a sequence or an optional without value."""
    return isinstance(value, Expr)


def _sequence(node: OnnxNode, index: int) -> SequenceValue:
    value = node.required(index)
    if not isinstance(value, SequenceValue):
        raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}): input {index} must be a sequence, got "
                            f"{'a tensor' if isinstance(value, Expr) else type(value).__name__}")
    return value


def _position(node: OnnxNode, index: int, length: int, default: int, inclusive: bool = False) -> int:
    """The position input `index` names (default when absent), normalized; ShapeError out of range."""
    if node.input(index) is None:
        return default
    value = np.asarray(node.const(index, "the position in the sequence"))
    if value.size != 1 or value.dtype.kind not in "iu":
        raise ShapeError(f"ONNX node {node.name!r} ({node.op_type}): the position must be one integer, got "
                         f"{value.dtype} of shape {value.shape}")
    position = int(value.reshape(-1)[0])
    upper = length if inclusive else length - 1
    if not -length <= position <= upper:
        raise ShapeError(f"ONNX node {node.name!r} ({node.op_type}): position {position} is out of range for a "
                         f"sequence of {length} element(s) (valid: {-length} to {upper})")
    return position + length if position < 0 else position


def _element_dtype(node: OnnxNode, elements) -> str:
    dtypes = {e.dtype for e in elements}
    if len(dtypes) > 1:
        raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}): sequence elements must share a dtype, "
                            f"got {sorted(dtypes)}")
    return dtypes.pop()


@converter("SequenceConstruct")
def convert_sequence_construct(node: OnnxNode):
    items = [node.required(i) for i in range(len(node.inputs))]
    return (SequenceValue(tuple(items), _element_dtype(node, items)),)


@converter("SequenceEmpty")
def convert_sequence_empty(node: OnnxNode):
    from onnx import helper
    dtype = from_numpy(helper.tensor_dtype_to_np_dtype(int(node.attr("dtype", 1))))
    return (SequenceValue((), str(dtype)),)


@converter("SequenceAt")
def convert_sequence_at(node: OnnxNode):
    sequence = _sequence(node, 0)
    position = node.required(1)
    types = {item.checked_type for item in sequence.items}
    if not isinstance(position, Constant) and len(types) == 1:
        # a position only the run knows, elements of one type: the stacked elements, indexed at run
        # time (take checks the index before its kernel runs)
        stacked = node.call("concatenate", *(node.call("expand_dims", item, axis=0) for item in sequence.items),
                            axis=0) if len(sequence) > 1 else node.call("expand_dims", sequence.items[0], axis=0)
        index = node.call("reshape", node.call("cast", position, dtype="int64"), newshape=())
        return node.call("take", stacked, index, axis=0)
    return sequence.items[_position(node, 1, len(sequence), 0)]


@converter("SequenceInsert")
def convert_sequence_insert(node: OnnxNode):
    sequence, item = _sequence(node, 0), node.required(1)
    if sequence.items and item.dtype != sequence.dtype:
        raise FrontendError(f"ONNX node {node.name!r} (SequenceInsert): inserting a {item.dtype} tensor into a "
                            f"sequence of {sequence.dtype}")
    position = _position(node, 2, len(sequence), len(sequence), inclusive=True)
    items = sequence.items[:position] + (item,) + sequence.items[position:]
    return (SequenceValue(items, item.dtype),)


@converter("SequenceErase")
def convert_sequence_erase(node: OnnxNode):
    sequence = _sequence(node, 0)
    if not sequence.items:
        raise ShapeError(f"ONNX node {node.name!r} (SequenceErase): the sequence is empty")
    position = _position(node, 1, len(sequence), len(sequence) - 1)
    return (SequenceValue(sequence.items[:position] + sequence.items[position + 1:], sequence.dtype),)


@converter("SequenceLength")
def convert_sequence_length(node: OnnxNode):
    return Constant(np.array(len(_sequence(node, 0)), np.int64))


@converter("SplitToSequence")
def convert_split_to_sequence(node: OnnxNode):
    data = node.required(0)
    rank = data.ndim
    axis = int(node.attr("axis", 0))
    if not -rank <= axis < rank:
        raise ShapeError(f"ONNX node {node.name!r} (SplitToSequence): axis {axis} out of range for rank {rank}")
    axis %= rank
    extent = data.shape[axis]
    split = node.input(1)
    keep = True
    if split is None:
        sizes = [1] * extent
        keep = bool(node.attr("keepdims", 1))
    else:
        value = np.asarray(node.const(1, "split"))
        if value.ndim == 0:
            chunk = int(value)
            if chunk <= 0:
                raise ShapeError(f"ONNX node {node.name!r} (SplitToSequence): split {chunk} must be positive")
            sizes = [min(chunk, extent - start) for start in range(0, extent, chunk)]
        else:
            sizes = [int(v) for v in value]
            if sum(sizes) != extent or any(s < 0 for s in sizes):
                raise ShapeError(f"ONNX node {node.name!r} (SplitToSequence): split sizes {sizes} must be "
                                 f"non-negative and add up to the axis length {extent}")
    items, start = [], 0
    for size in sizes:
        piece = node.call("strided_slice", data, begin=(start,), end=(start + size,), axes=(axis,))
        if not keep:
            piece = node.call("reshape", piece, newshape=data.shape[:axis] + data.shape[axis + 1:])
        items.append(piece)
        start += size
    return (SequenceValue(tuple(items), data.dtype),)


@converter("ConcatFromSequence")
def convert_concat_from_sequence(node: OnnxNode):
    sequence = _sequence(node, 0)
    if not sequence.items:
        raise ShapeError(f"ONNX node {node.name!r} (ConcatFromSequence): the sequence is empty")
    new_axis = bool(node.attr("new_axis", 0))
    rank = sequence.items[0].ndim + (1 if new_axis else 0)
    axis = int(node.attr("axis"))
    if not -rank <= axis < rank:
        raise ShapeError(f"ONNX node {node.name!r} (ConcatFromSequence): axis {axis} out of range for rank {rank}")
    axis %= rank
    items = [node.call("expand_dims", item, axis=axis) if new_axis else item for item in sequence.items]
    return items[0] if len(items) == 1 else node.call("concatenate", *items, axis=axis)


@converter("SequenceMap")
def convert_sequence_map(node: OnnxNode):
    """The body applied to each position of the sequence inputs (a tensor input is passed whole to
    every application), converted once per element: the sequences' lengths are known at import."""
    body = node.attr("body")
    if body is None or not hasattr(body, "node"):
        raise FrontendError(f"ONNX node {node.name!r} (SequenceMap) lacks its subgraph attribute 'body'")
    _sequence(node, 0)
    values = [node.required(i) for i in range(len(node.inputs))]
    if len(body.input) != len(values):
        raise FrontendError(f"ONNX node {node.name!r} (SequenceMap): the body takes {len(body.input)} inputs, "
                            f"the node passes {len(values)}")
    lengths = {len(v) for v in values if isinstance(v, SequenceValue)}
    if len(lengths) > 1:
        raise ShapeError(f"ONNX node {node.name!r} (SequenceMap): the input sequences have different lengths "
                         f"{sorted(lengths)}")
    results: list[list[Expr]] = [[] for _ in body.output]
    for position in range(lengths.pop()):
        scope = node.scope.child()
        for value_info, value in zip(body.input, values):
            scope.values[value_info.name] = value.items[position] if isinstance(value, SequenceValue) else value
        outputs = scope.convert_inline(body, where=f"ONNX node {node.name!r} (SequenceMap) body (element "
                                                   f"{position})")
        for items, output in zip(results, outputs):
            if not isinstance(output, Expr):
                raise node.unsupported("the body returns a sequence or an optional; its outputs must be tensors")
            items.append(output)
    return tuple(SequenceValue(tuple(items), _declared_dtype(node, declared, items))
                 for items, declared in zip(results, body.output))


def _declared_dtype(node: OnnxNode, value_info, items) -> str:
    """The element dtype of a body output: the elements' (which must agree), else the declared one."""
    if items:
        return _element_dtype(node, items)
    from onnx import helper
    return str(from_numpy(helper.tensor_dtype_to_np_dtype(value_info.type.tensor_type.elem_type)))


@converter("Optional")
def convert_optional(node: OnnxNode):
    value = node.input(0)
    if value is None:
        return (NoneValue(),)
    return (value,)


@converter("OptionalHasElement")
def convert_optional_has_element(node: OnnxNode):
    value = node.input(0)
    return Constant(np.array(value is not None and not isinstance(value, NoneValue)))


@converter("OptionalGetElement")
def convert_optional_get_element(node: OnnxNode):
    value = node.required(0)
    if isinstance(value, NoneValue):
        raise FrontendError(f"ONNX node {node.name!r} (OptionalGetElement): the optional has no value")
    return (value,)
