"""ops/nn/dense.py: dense (x @ w.T) and matmul (numpy.matmul: batched, broadcasting, 1-D
operands promoted). Tags "dense" and "batch_matmul"; float16 accumulates in float32.
"""
from __future__ import annotations

from .. import tags
from ... import te
from .._common import accumulate_dtype, broadcast_indices
from ._accumulate import multiply_sum

__all__ = ["dense", "matmul", "dense_compute", "matmul_compute"]


def _cast_back(result: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if result.dtype == dtype:
        return result
    return te.compute(result.shape, lambda *i: te.cast(result[i], dtype), name=name, tag=tags.ELEMWISE)


PACK_TAG = "dense_pack"
PARTIAL_TAG = "dense_partial"
MAX_PACK = 16
SPLIT_LANES = 16
"""Lanes of the batch-1 dense's partial sums: one AVX-512 vector of float32, two AVX2 ones."""
MIN_SPLIT = 4


def _pack_width(units: int) -> int:
    for width in range(min(MAX_PACK, units), 3, -1):
        if units % width == 0:
            return width
    return 1


def _split_width(reduction: int) -> int:
    """The largest divisor of the reduction length in [MIN_SPLIT, SPLIT_LANES], or 1."""
    for width in range(min(SPLIT_LANES, reduction), MIN_SPLIT - 1, -1):
        if reduction % width == 0:
            return width
    return 1


def dense(data: te.Tensor, weight: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """out[..., j] = sum_k data[..., k] * weight[j, k].

    One row of data (batch-1 inference) is a matrix-vector product bound by reading the
    weight once: it is computed as L partial sums per output (stage T_dense_partial, tag
    "dense_partial"; L = 16 or the largest divisor of K in [4, 16]), each over the
    strided slice k = ko * L + l, so the schedule streams every weight row contiguously
    with vectors over l; T_dense (tag "dense") adds the L partial sums.

    Several rows: the (N, K) weight is repacked to (N / p, K, p) (stage T_dense_pack, tag
    "dense_pack") so that p consecutive outputs read contiguous weights, and the schedule
    vectorizes over them. p is the largest divisor of N in [4, 16]; with none, the
    weight is read as it is.
    """
    units, reduction = weight.shape
    accumulate = out_dtype or accumulate_dtype(data.dtype)
    rows = 1
    for extent in data.shape[:-1]:
        rows *= int(extent)
    split = _split_width(int(reduction)) if rows == 1 else 1
    if split > 1:
        result = _dense_split(data, weight, accumulate, split)
    else:
        result = _dense_packed(data, weight, accumulate)
    return result if out_dtype else _cast_back(result, data.dtype, "T_dense_cast")


def _dense_split(data: te.Tensor, weight: te.Tensor, accumulate: str, split: int) -> te.Tensor:
    units, reduction = weight.shape
    ko = te.reduce_axis((0, reduction // split), name="ko")

    def partial_body(*i):
        k = ko * split + i[-1]
        return multiply_sum(te.cast(data[i[:-2] + (k,)], accumulate) * te.cast(weight[i[-2], k], accumulate),
                            axis=ko)
    partial = te.compute((*data.shape[:-1], units, split), partial_body, name="T_dense_partial", tag=PARTIAL_TAG)
    lane = te.reduce_axis((0, split), name="l")
    return te.compute((*data.shape[:-1], units), lambda *i: te.sum(partial[i + (lane,)], axis=lane),
                      name="T_dense", tag=tags.DENSE, attrs={"split": split})


def _dense_packed(data: te.Tensor, weight: te.Tensor, accumulate: str) -> te.Tensor:
    units, reduction = weight.shape
    k = te.reduce_axis((0, reduction), name="k")
    pack = _pack_width(units)
    if pack > 1:
        packed = te.compute((units // pack, reduction, pack), lambda o, r, i: weight[o * pack + i, r],
                            name="T_dense_pack", tag=PACK_TAG)

        def read_weight(j):
            return packed[j // pack, k, j % pack]
    else:
        def read_weight(j):
            return weight[j, k]

    def body(*i):
        return multiply_sum(te.cast(data[i[:-1] + (k,)], accumulate) * te.cast(read_weight(i[-1]), accumulate),
                            axis=k)
    return te.compute((*data.shape[:-1], units), body, name="T_dense", tag=tags.DENSE, attrs={"pack": pack})


def matmul(lhs: te.Tensor, rhs: te.Tensor, out_shape: tuple[int, ...]) -> te.Tensor:
    """numpy.matmul of `lhs` and `rhs` with output shape `out_shape` (from the type rule)."""
    accumulate = accumulate_dtype(lhs.dtype)
    lhs_vector, rhs_vector = lhs.ndim == 1, rhs.ndim == 1
    reduction = lhs.shape[-1]
    k = te.reduce_axis((0, reduction), name="k")
    batch_ndim = len(out_shape) - (0 if lhs_vector else 1) - (0 if rhs_vector else 1)
    batch_shape = tuple(out_shape[:batch_ndim])

    def body(*i):
        batch, rest = i[:batch_ndim], list(i[batch_ndim:])
        row = None if lhs_vector else rest.pop(0)
        column = None if rhs_vector else rest.pop(0)
        if lhs_vector:
            left = lhs[k]
        else:
            left = lhs[broadcast_indices(batch, lhs.shape[:-2], batch_shape) + (row, k)]
        if rhs_vector:
            right = rhs[k]
        else:
            right = rhs[broadcast_indices(batch, rhs.shape[:-2], batch_shape) + (k, column)]
        return multiply_sum(te.cast(left, accumulate) * te.cast(right, accumulate), axis=k)
    tag = tags.BATCH_MATMUL if batch_ndim else tags.DENSE
    result = te.compute(tuple(out_shape), body, name="T_matmul", tag=tag)
    return _cast_back(result, lhs.dtype, "T_matmul_cast")


def dense_compute(inputs, attrs, out_type):
    """Registry compute of nn.dense."""
    data, weight = inputs
    return dense(data, weight)


def matmul_compute(inputs, attrs, out_type):
    """Registry compute of nn.matmul."""
    lhs, rhs = inputs
    return matmul(lhs, rhs, out_type.shape)
