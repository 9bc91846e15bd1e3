"""ops/ngram.py: te compute of ngram_counts (tag "comm_reduce"): for each row and pool n-gram, a
sum over (skip, start) of whether the tokens at start, start + skip + 1, ... match the n-gram."""
from __future__ import annotations

from .. import te
from ..tir import nodes as n
from . import tags
from ._common import select

__all__ = ["ngram_counts"]


def ngram_counts(inputs, attrs, out_type):
    """Registry compute of ngram_counts."""
    tokens, pool, lengths = inputs
    columns, longest = int(tokens.shape[-1]), int(pool.shape[1])
    skip = te.reduce_axis((0, attrs.max_skip + 1), name="skip")
    start = te.reduce_axis((0, columns), name="start")

    def body(*index):
        row, g = index[:-1], index[-1]
        length = te.cast(lengths[g], "int32")
        gap = skip + 1
        # length 0 marks an n-gram outside the counted sizes; a 1-gram counts at skip 0 only
        found = n.And(n.And(length > 0, start + (length - 1) * gap < columns), n.Or(length > 1, skip.equal(0)))
        for k in range(longest):
            position = te.min(start + k * gap, columns - 1)
            same = te.cast(tokens[(*row, position)], "int64").equal(te.cast(pool[g, k], "int64"))
            found = n.And(found, n.Or(length <= k, same))
        return te.sum(select(found, 1.0, 0.0), axis=[skip, start])
    return te.compute(out_type.shape, body, name="T_ngram_counts", tag=tags.COMM_REDUCE)
