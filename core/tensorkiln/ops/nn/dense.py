"""ops/nn/dense.py: dense (x @ w.T) and matmul (numpy.matmul: batched, broadcasting, 1-D
operands promoted). Tags "dense" and "batch_matmul"; float16 accumulates in float32.
"""
from __future__ import annotations

from .. import tags
from ... import te
from .._common import accumulate_dtype, broadcast_indices
from ._accumulate import multiply_sum

__all__ = ["dense", "dense_pack", "matmul", "dense_compute", "dense_pack_compute", "matmul_compute", "cast_back"]


def cast_back(result: te.Tensor, dtype: str, name: str) -> te.Tensor:
    if result.dtype == dtype:
        return result
    return te.compute(result.shape, lambda *i: te.cast(result[i], dtype), name=name, tag=tags.ELEMWISE)


def dense(data: te.Tensor, weight: te.Tensor, out_dtype: str | None = None) -> te.Tensor:
    """out[..., j] = sum_k data[..., k] * weight[j, k] (tag "dense"); the naive, layout-free form.

    Targets pack the weight or split the reduction in their own strategies (cpu_llvm's
    strategies/dense.py); this compute is what a target without one gets.
    """
    units, reduction = weight.shape
    accumulate = out_dtype or accumulate_dtype(data.dtype)
    k = te.reduce_axis((0, reduction), name="k")

    def body(*i):
        return multiply_sum(te.cast(data[i[:-1] + (k,)], accumulate) * te.cast(weight[i[-1], k], accumulate), axis=k)
    result = te.compute((*data.shape[:-1], units), body, name="T_dense", tag=tags.DENSE)
    return result if out_dtype else cast_back(result, data.dtype, "T_dense_cast")


def dense_pack(data: te.Tensor, weight: te.Tensor, units: int) -> te.Tensor:
    """out[..., j] = sum_k data[..., k] * weight[j // n, k, j % n] (tag "dense"): nn.dense_pack, whose weight is packed
    in blocks of n output features (graph.pack_dense_weight)."""
    _, reduction, block = weight.shape
    accumulate = accumulate_dtype(data.dtype)
    k = te.reduce_axis((0, reduction), name="k")

    def body(*i):
        j = i[-1]
        return multiply_sum(te.cast(data[i[:-1] + (k,)], accumulate) * te.cast(weight[j // block, k, j % block],
                                                                                accumulate), axis=k)
    result = te.compute((*data.shape[:-1], units), body, name="T_dense_pack", tag=tags.DENSE)
    return cast_back(result, data.dtype, "T_dense_pack_cast")


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
    return cast_back(result, lhs.dtype, "T_matmul_cast")


def dense_compute(inputs, attrs, out_type):
    """Registry compute of nn.dense."""
    data, weight = inputs
    return dense(data, weight, getattr(attrs, "out_dtype", "") or None)


def dense_pack_compute(inputs, attrs, out_type):
    """Registry compute of nn.dense_pack."""
    data, weight = inputs
    return dense_pack(data, weight, attrs.units)


def matmul_compute(inputs, attrs, out_type):
    """Registry compute of nn.matmul."""
    lhs, rhs = inputs
    return matmul(lhs, rhs, out_type.shape)
