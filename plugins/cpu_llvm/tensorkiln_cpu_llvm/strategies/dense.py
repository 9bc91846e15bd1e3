"""strategies/dense.py: cpu_llvm's dense computes: a split reduction for one row, a packed weight for more.

One row of data (batch-1 inference) is a matrix-vector product bound by reading the
weight once: it is computed as L partial sums per output (stage T_dense_partial, tag
"dense_partial"), each over the strided slice k = ko * L + l, so the schedule streams
every weight row contiguously with vectors over l; T_dense (tag "dense") adds the L
partial sums. L is the knob `split`: a divisor of K, by default the largest in
[4, split_max] where split_max is two vectors on a 16-register CPU and one on a
32-register one (16 float32 lanes either way on AVX2 and AVX-512).

Several rows: the (N, K) weight is repacked to (N / p, K, p) (stage T_dense_pack, tag
"dense_pack") so that p consecutive outputs read contiguous weights, and the schedule
vectorizes over them. p is the knob `pack`: by default the largest divisor of N in
[4, two vectors]; 1 reads the weight as it is.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.ops import tags
from tensorkiln.ops.nn._accumulate import multiply_sum
from tensorkiln.ops.nn.dense import cast_back

__all__ = ["PACK_TAG", "PARTIAL_TAG", "dense_split", "dense_packed", "largest_divisor_in"]

PACK_TAG = "dense_pack"
PARTIAL_TAG = "dense_partial"


def largest_divisor_in(extent: int, low: int, high: int) -> int:
    """The largest divisor of `extent` in [low, high], or 1."""
    for width in range(min(high, extent), low - 1, -1):
        if extent % width == 0:
            return width
    return 1


def _accumulate_dtype(dtype: str) -> str:
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def dense_split(data: te.Tensor, weight: te.Tensor, split: int) -> te.Tensor:
    """out[..., j] = sum_ko sum_l data[..., ko * split + l] * weight[j, ko * split + l] (see the module docstring)."""
    units, reduction = weight.shape
    accumulate = _accumulate_dtype(data.dtype)
    ko = te.reduce_axis((0, reduction // split), name="ko")

    def partial_body(*i):
        k = ko * split + i[-1]
        return multiply_sum(te.cast(data[i[:-2] + (k,)], accumulate) * te.cast(weight[i[-2], k], accumulate),
                            axis=ko)
    partial = te.compute((*data.shape[:-1], units, split), partial_body, name="T_dense_partial", tag=PARTIAL_TAG)
    lane = te.reduce_axis((0, split), name="l")
    result = te.compute((*data.shape[:-1], units), lambda *i: te.sum(partial[i + (lane,)], axis=lane),
                        name="T_dense", tag=tags.DENSE, attrs={"split": split})
    return cast_back(result, data.dtype, "T_dense_cast")


def dense_packed(data: te.Tensor, weight: te.Tensor, pack: int) -> te.Tensor:
    """out[..., j] = sum_k data[..., k] * packed[j // pack, k, j % pack] (see the module docstring)."""
    units, reduction = weight.shape
    accumulate = _accumulate_dtype(data.dtype)
    k = te.reduce_axis((0, reduction), name="k")
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
    result = te.compute((*data.shape[:-1], units), body, name="T_dense", tag=tags.DENSE, attrs={"pack": pack})
    return cast_back(result, data.dtype, "T_dense_cast")
