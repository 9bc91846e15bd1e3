"""ops/col2im.py: te compute of col2im (tag "comm_reduce"): each image element sums, over the block
offsets, the block element that covers it (if any)."""
from __future__ import annotations

from functools import reduce

from .. import te
from ..graph.ops.col2im import block_counts
from ..tir import nodes as n
from . import tags
from ._common import accumulate_dtype, ravel, unravel

__all__ = ["col2im"]


def col2im(inputs, attrs, out_type):
    """Registry compute of col2im."""
    (x,) = inputs
    rank = len(attrs.image_shape)
    counts = block_counts(attrs)
    volume = 1
    for k in attrs.block_shape:
        volume *= k
    offset = te.reduce_axis((0, volume), name="k")
    accumulate = accumulate_dtype(x.dtype)

    def body(batch, channel, *where):
        kernel = unravel(offset, attrs.block_shape)
        hits, blocks = [], []
        for d in range(rank):
            # the block starting at position * stride - pad covers `where` at kernel offset kernel[d]
            start = where[d] + attrs.pads[d] - kernel[d] * attrs.dilations[d]
            position = te.max(te.min(start // attrs.strides[d], counts[d] - 1), 0)
            hits.append(n.And((start % attrs.strides[d]).equal(0),
                              n.And(start >= 0, start < counts[d] * attrs.strides[d])))
            blocks.append(position)
        value = x[batch, channel * volume + offset, ravel(blocks, counts)]
        return te.sum(te.cast(value, accumulate), axis=offset, where=reduce(n.And, hits))

    total = te.compute(out_type.shape, body, name="T_col2im_sum", tag=tags.COMM_REDUCE)
    if accumulate == x.dtype:
        return total
    return te.compute(out_type.shape, lambda *i: te.cast(total[i], x.dtype), name="T_col2im", tag=tags.ELEMWISE)
