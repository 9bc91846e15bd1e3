"""Converters that rewrite to gathers and scatters: ReverseSequence, TensorScatter, MaxUnpool."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar


def _positions(size: int, axis: int, rank: int) -> Constant:
    """0..size-1 along `axis` of a rank-`rank` int64 tensor (size 1 on the other axes)."""
    shape = [1] * rank
    shape[axis] = size
    return Constant(np.arange(size, dtype=np.int64).reshape(shape))


def _along(node: OnnxNode, values: Expr, axis: int, rank: int) -> Expr:
    """A 1-D int tensor as int64 laid along `axis` of a rank-`rank` tensor."""
    shape = [1] * rank
    shape[axis] = values.shape[0]
    return node.call("reshape", node.call("cast", values, dtype="int64"), newshape=tuple(shape))


@converter("ReverseSequence")
def _reverse_sequence(node: OnnxNode) -> Expr:
    data, lengths = node.required(0), node.required(1)
    rank = len(data.shape)
    time, batch = node.attr("time_axis", 0) % rank, node.attr("batch_axis", 1) % rank
    t = _positions(data.shape[time], time, rank)
    length = _along(node, lengths, batch, rank)
    reversed_t = node.call("subtract", node.call("subtract", length, scalar(1, "int64")), t)
    index = node.call("where", node.call("less", t, length), reversed_t, t)
    index = node.call("broadcast_to", index, shape=tuple(data.shape))
    return node.call("gather_elements", data, index, axis=time)


@converter("TensorScatter")
def _tensor_scatter(node: OnnxNode) -> Expr:
    """past with `update` written at write_indices[b] along `axis` of each batch b (mode circular wraps)."""
    past, update = node.required(0), node.required(1)
    rank = len(past.shape)
    axis = node.attr("axis", -2) % rank
    size, count = past.shape[axis], update.shape[axis]
    writes = node.input(2)
    offset = scalar(0, "int64") if writes is None else _along(node, writes, 0, rank)
    distance = node.call("subtract", _positions(size, axis, rank), offset)   # position within the update
    if node.attr("mode", "linear") == "circular":
        distance = node.call("mod", distance, scalar(size, "int64"))
    inside = node.call("logical_and", node.call("greater_equal", distance, scalar(0, "int64")),
                       node.call("less", distance, scalar(count, "int64")))
    index = node.call("broadcast_to", node.call("where", inside, distance, scalar(0, "int64")),
                      shape=tuple(past.shape))
    written = node.call("gather_elements", update, index, axis=axis)
    return node.call("where", node.call("broadcast_to", inside, shape=tuple(past.shape)), written, past)


@converter("MaxUnpool")
def _max_unpool(node: OnnxNode) -> Expr:
    """Zeros with each value written at its flat index (MaxPool's Indices output) in the output."""
    data, indices = node.required(0), node.required(1)
    spatial = len(data.shape) - 2
    if node.input(2) is not None:
        shape = node.const_ints(2, "output_shape")
    else:
        kernel = node.attr("kernel_shape")
        strides = node.attr("strides", [1] * spatial)
        pads = node.attr("pads", [0] * (2 * spatial))
        shape = (*data.shape[:2], *((data.shape[2 + d] - 1) * strides[d] - pads[d] - pads[d + spatial] + kernel[d]
                                    for d in range(spatial)))
    total = int(np.prod(shape))
    zeros = node.call("broadcast_to", scalar(0, data.dtype), shape=(total,))
    flat_indices = node.call("reshape", indices, newshape=(-1, 1))
    flat = node.call("scatter_nd", zeros, flat_indices, node.call("reshape", data, newshape=(-1,)))
    return node.call("reshape", flat, newshape=tuple(shape))
