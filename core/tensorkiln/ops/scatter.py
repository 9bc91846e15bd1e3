"""ops/scatter.py: te computes of scatter_elements and scatter_nd (tag "scatter").

te computes gather, so each output element looks for the updates aimed at it: a reduction
over the candidate updates (the line along `axis` for scatter_elements, every index tuple
for scatter_nd) with the match as its condition. That is O(|data| x candidates) work: fine
for the small index sets of models (KV caches, masks), quadratic for large ones. Reduction
none takes the last matching update (a max over positions, then a gather), as the reference.
"""
from __future__ import annotations

from functools import reduce

from .. import te
from ..tir import nodes as n
from ._common import normalize_axis, select, unravel

__all__ = ["scatter_elements", "scatter_nd"]

SCATTER = "scatter"

_REDUCERS = {"add": (te.sum, lambda a, b: a + b), "mul": (te.prod, lambda a, b: a * b),
             "max": (te.max, te.max), "min": (te.min, te.min)}


def _wrap(index, extent: int):
    """ONNX's negative indices count from the end."""
    index = te.cast(index, "int32")
    return select(index < 0, index + extent, index)


def _scatter(data: te.Tensor, name: str, candidates: int, match, update_at, reduction: str) -> te.Tensor:
    """data with update_at(i, r) written (or reduced) at each output i, over candidates r where match(i, r)."""
    r = te.reduce_axis((0, candidates), name="r")
    if reduction == "none":
        last = te.compute(data.shape, lambda *i: te.max(select(match(i, r), r, -1), axis=r),
                          name=f"{name}_last", tag=SCATTER)
        return te.compute(data.shape, lambda *i: select(last[i] >= 0, update_at(i, te.max(last[i], 0)), data[i]),
                          name=name, tag=SCATTER)
    reducer, combine = _REDUCERS[reduction]
    # no match leaves the reducer's identity (0, 1, -inf, +inf), which combine() absorbs
    reduced = te.compute(data.shape, lambda *i: reducer(update_at(i, r), axis=r, where=match(i, r)),
                         name=f"{name}_reduced", tag=SCATTER)
    return te.compute(data.shape, lambda *i: combine(data[i], reduced[i]), name=name, tag=SCATTER)


def scatter_elements(inputs, attrs, out_type):
    """Registry compute of scatter_elements: the candidates are the updates on the output's line."""
    data, indices, updates = inputs
    axis = normalize_axis(attrs.axis, data.ndim)

    def at(i, r):
        # the update on i's line at position r; other coordinates clamped (the line may be shorter)
        return tuple(r if k == axis else te.min(i[k], int(indices.shape[k]) - 1) for k in range(data.ndim))

    def match(i, r):
        hit = _wrap(indices[at(i, r)], int(data.shape[axis])).equal(i[axis])
        inside = [i[k] < int(indices.shape[k]) for k in range(data.ndim) if k != axis]
        return reduce(n.And, [*inside, hit])
    return _scatter(data, "T_scatter_elements", int(indices.shape[axis]), match,
                    lambda i, r: updates[at(i, r)], attrs.reduction)


def scatter_nd(inputs, attrs, out_type):
    """Registry compute of scatter_nd: the candidates are all index tuples."""
    data, indices, updates = inputs
    depth = int(indices.shape[-1])
    lead = tuple(int(d) for d in indices.shape[:-1])
    count = 1
    for d in lead:
        count *= d

    def tuple_at(u):
        return unravel(u, lead) if lead else ()

    def match(i, u):
        position = tuple_at(u)
        hits = [_wrap(indices[(*position, j)], int(data.shape[j])).equal(i[j]) for j in range(depth)]
        return reduce(n.And, hits) if hits else n.const(True)
    return _scatter(data, "T_scatter_nd", count, match, lambda i, u: updates[(*tuple_at(u), *i[depth:])],
                    attrs.reduction)
