"""ops/reduction.py: sum, mean, max, min, prod over axes with keepdims; argmax, argmin.

The reduction stage is tagged "comm_reduce"; what follows it (mean's division,
float16's cast back from its float32 accumulator) is an elementwise stage that the
reduce schedule attaches to the reduction's loops.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .. import te
from . import tags
from ._common import accumulate_dtype, const_like, normalize_axis, select

__all__ = ["reduce", "reduce_compute", "argreduce_compute"]

_REDUCERS: dict[str, Callable] = {"sum": te.sum, "mean": te.sum, "max": te.max, "min": te.min, "prod": te.prod}


def reduce(x: te.Tensor, reducer: Callable, axes: Sequence[int], keepdims: bool, name: str,
           accumulate: str | None = None, tag: str = tags.COMM_REDUCE) -> te.Tensor:
    """Reduce `x` over `axes` with `reducer` (te.sum, te.max, ...), in dtype `accumulate`."""
    axes = sorted(set(axes))
    reduce_axes = {a: te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes}
    out_shape = tuple(1 if a in reduce_axes else d for a, d in enumerate(x.shape) if keepdims or a not in reduce_axes)
    accumulate = accumulate or x.dtype

    def body(*i):
        it = iter(i)
        index = []
        for a in range(x.ndim):
            if a in reduce_axes:
                if keepdims:
                    next(it)
                index.append(reduce_axes[a])
            else:
                index.append(next(it))
        value = x[tuple(index)]
        return reducer(te.cast(value, accumulate), axis=[reduce_axes[a] for a in axes])
    if not axes:  # nothing to reduce: a copy
        return te.compute(x.shape, lambda *i: x[i], name=name, tag=tags.ELEMWISE)
    return te.compute(out_shape, body, name=name, tag=tag)


def _axes(attrs, ndim: int) -> list[int]:
    return list(range(ndim)) if attrs.axis is None else [normalize_axis(a, ndim) for a in attrs.axis]


def reduce_compute(op_name: str) -> Callable:
    """The registry compute of reduction `op_name` (sum, mean, max, min, prod)."""
    reducer = _REDUCERS[op_name]

    def compute(inputs, attrs, out_type):
        (x,) = inputs
        axes = _axes(attrs, x.ndim)
        accumulate = accumulate_dtype(x.dtype)
        reduced = reduce(x, reducer, axes, attrs.keepdims, f"T_{op_name}", accumulate)
        count = 1
        for a in axes:
            count *= x.shape[a]
        if op_name == "mean":
            divisor = const_like(max(count, 1), accumulate)
            return te.compute(reduced.shape, lambda *i: te.cast(reduced[i] / divisor, x.dtype),
                              name="T_mean_divide", tag=tags.ELEMWISE)
        if accumulate != x.dtype:
            return te.compute(reduced.shape, lambda *i: te.cast(reduced[i], x.dtype), name=f"T_{op_name}_cast",
                              tag=tags.ELEMWISE)
        return reduced
    compute.__name__ = f"compute_{op_name}"
    compute.__doc__ = f"te compute of {op_name}: a comm_reduce stage over attrs.axis."
    return compute


def argreduce_compute(op_name: str) -> Callable:
    """argmax / argmin: the extreme value, then the first (or last) index that holds it."""
    extreme = te.max if op_name == "argmax" else te.min

    def compute(inputs, attrs, out_type):
        (x,) = inputs
        axis = normalize_axis(attrs.axis, x.ndim)
        best = reduce(x, extreme, [axis], True, f"T_{op_name}_value")
        k = te.reduce_axis((0, x.shape[axis]), name="k")
        pick = te.max if attrs.select_last_index else te.min
        missing = -1 if attrs.select_last_index else x.shape[axis]

        def body(*i):
            index = list(i) if attrs.keepdims else list(i[:axis]) + [0] + list(i[axis:])
            at = list(index)
            at[axis] = k
            hit = x[tuple(at)].equal(best[tuple(index)])
            return pick(select(hit, te.cast(k, "int64"), const_like(missing, "int64")), axis=k)
        return te.compute(out_type.shape, body, name=f"T_{op_name}", tag=tags.COMM_REDUCE)
    compute.__name__ = f"compute_{op_name}"
    compute.__doc__ = f"te compute of {op_name}: two comm_reduce stages (value, then index)."
    return compute
