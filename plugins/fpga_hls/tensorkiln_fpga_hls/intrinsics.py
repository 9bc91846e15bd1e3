"""intrinsics.py: gemm_accelerator (the seed's name) as a tensor intrinsic of fpga_hls.

Description: C[R, C] = sum_k A[R, k] * B[k, C] with K free, R = C = 32 by default; its
implementation is the systolic-array template of systolic.py. Tensorize the inner
32 x 32 tile of a matmul onto it, as the seed does:

    i_outer, i_inner = s[C].split(i, factor=32)
    j_outer, j_inner = s[C].split(j, factor=32)
    s[C].reorder(i_outer, j_outer, i_inner, j_inner)
    s[C].tensorize(i_inner, tk.intrinsic("gemm_accelerator", target="fpga_hls"))

`gemm_accelerator_int8` is the same array on int8 inputs with int32 accumulators
(C = sum A.astype(int32) * B.astype(int32)); rtl.py generates its Verilog.
"""
from __future__ import annotations

import functools

from tensorkiln import te
from tensorkiln.sdk import SourceImpl

from .systolic import systolic_source, systolic_symbol

__all__ = ["fpga_intrinsics", "gemm_intrinsic", "GEMM_ACCELERATOR", "ARRAY_ROWS", "ARRAY_COLS"]

GEMM_ACCELERATOR = "gemm_accelerator"
ARRAY_ROWS = ARRAY_COLS = 32


@functools.cache
def gemm_intrinsic(rows: int = ARRAY_ROWS, cols: int = ARRAY_COLS, dtype: str = "float32"):
    """The R x C systolic GEMM as a TensorIntrin; dtype "int8" accumulates in int32."""
    k_extent = te.var("K")
    a = te.placeholder((rows, k_extent), dtype=dtype, name="A")
    b = te.placeholder((k_extent, cols), dtype=dtype, name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    if dtype == "int8":
        c = te.compute((rows, cols), lambda i, j: te.sum(a[i, k].astype("int32") * b[k, j].astype("int32"), axis=k),
                       name="C")
        name = f"{GEMM_ACCELERATOR}_int8"
    else:
        c = te.compute((rows, cols), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
        name = GEMM_ACCELERATOR
    if (rows, cols) != (ARRAY_ROWS, ARRAY_COLS):
        name = f"{name}_{rows}x{cols}"
    symbol = systolic_symbol(rows, cols)
    impl = SourceImpl("hls", systolic_source(rows, cols), symbol)
    attrs = {"rows": rows, "cols": cols, "dtype": dtype, "kind": "systolic"}
    return te.decl_tensor_intrin(c, name, inputs=[a, b], implementations={"fpga_hls": impl}, attrs=attrs)


def fpga_intrinsics(target) -> list:
    """The intrinsics of the fpga_hls target (called by the tensorkiln_intrinsics hook)."""
    return [gemm_intrinsic(), gemm_intrinsic(dtype="int8")]
