"""intrinsics.py: tensor intrinsics of the cuda target: wmma 16x16x16 on tensor cores.

    (nn, nt) = [tk.intrinsic(name, "cuda") for name in WMMA_INTRINSICS]
    s[C].tensorize(ii, nn)        # C[16, 16] (+)= A[16, 16] @ B[16, 16]: fp16 in, fp32 accumulate

`cuda_wmma_16x16x16_f16` takes B as (k, j) rows (matmul); `cuda_wmma_16x16x16_f16_nt`
takes it as (j, k) rows (dense's weight, B transposed). Both are warp-level: the 32
threads of a warp call them together with the same arguments, so the schedule leaves the
tensorized tile outside any threadIdx loop and gives the block 32 threads elsewhere (the
cooperative shared-memory fetch of the operand tiles does). In a block that is not whole
warps one thread computes the tile with plain loops (correct, no tensor cores). Pointers
must be 32-byte aligned and strides multiples of 8 (shared tiles are declared
__align__(32)). On the CPU shim, shim.h's nvcuda::wmma computes the same thing.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.sdk.intrinsic_impl import SourceImpl

__all__ = ["cuda_intrinsics", "WMMA_NN", "WMMA_NT", "WMMA_INTRINSICS", "wmma_code", "serial_tile_code"]

WMMA_NN = "cuda_wmma_16x16x16_f16"
WMMA_NT = "cuda_wmma_16x16x16_f16_nt"
WMMA_INTRINSICS = (WMMA_NN, WMMA_NT)


def serial_tile_code(columns: int, a: str, b: str, c: str, a_index: str, b_index: str, c_index: str) -> str:
    """The opening of a warp-level tile routine: in a block that is not whole warps (the kit tensorizes with
    no thread binding) one thread computes the (16 x columns) tile with plain loops and returns. Indices in
    terms of i (row), j (column) and k."""
    return f"""\
    if ((blockDim.x * blockDim.y * blockDim.z) % 32 != 0) {{   // not whole warps: one thread, plain loops
        for (int i = 0; i < 16; ++i)
            for (int j = 0; j < {columns}; ++j) {{
                float sum = accumulate ? {c}[{c_index}] : 0.0f;
                for (int k = 0; k < 16; ++k)
                    sum += __half2float({a}[{a_index}]) * __half2float({b}[{b_index}]);
                {c}[{c_index}] = sum;
            }}
        return;
    }}"""


def wmma_code(symbol: str, b_layout: str) -> str:
    """CUDA C of one wmma tile: A row-major, B `b_layout` ("row_major" or "col_major"), C row-major fp32.
    A block that is not whole warps (the kit's serial tensorize) computes the tile with plain loops."""
    b_index = "k * ldb + j" if b_layout == "row_major" else "j * ldb + k"
    serial_tile = serial_tile_code(16, "a", "b", "c", "i * lda + k", b_index, "i * ldc + j")
    return f"""\
#ifndef TK_CUDA_SHIM
#include <mma.h>
#endif
__device__ __forceinline__ void {symbol}(const half* a, const half* b, float* c, int64_t lda, int64_t ldb,
                                          int64_t ldc, int32_t accumulate) {{
{serial_tile}
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_a, 16, 16, 16, half, nvcuda::wmma::row_major> fa;
    nvcuda::wmma::fragment<nvcuda::wmma::matrix_b, 16, 16, 16, half, nvcuda::wmma::{b_layout}> fb;
    nvcuda::wmma::fragment<nvcuda::wmma::accumulator, 16, 16, 16, float> fc;
    if (accumulate) nvcuda::wmma::load_matrix_sync(fc, c, (unsigned)ldc, nvcuda::wmma::mem_row_major);
    else nvcuda::wmma::fill_fragment(fc, 0.0f);
    nvcuda::wmma::load_matrix_sync(fa, a, (unsigned)lda);
    nvcuda::wmma::load_matrix_sync(fb, b, (unsigned)ldb);
    nvcuda::wmma::mma_sync(fc, fa, fb, fc);
    nvcuda::wmma::store_matrix_sync(c, fc, (unsigned)ldc, nvcuda::wmma::mem_row_major);
}}"""


def _wmma(name: str, transposed_b: bool):
    a = te.placeholder((16, 16), dtype="float16", name="a")
    b = te.placeholder((16, 16), dtype="float16", name="b")
    k = te.reduce_axis((0, 16), name="k")
    if transposed_b:
        body = lambda i, j: te.sum(te.cast(a[i, k], "float32") * te.cast(b[j, k], "float32"), axis=k)  # noqa: E731
    else:
        body = lambda i, j: te.sum(te.cast(a[i, k], "float32") * te.cast(b[k, j], "float32"), axis=k)  # noqa: E731
    c = te.compute((16, 16), body, name="c")
    code = wmma_code(f"tk_{name}", "col_major" if transposed_b else "row_major")
    return te.decl_tensor_intrin(c, name, inputs=[a, b], implementations={"cuda": SourceImpl("cuda", code, f"tk_{name}")})


def cuda_intrinsics(target) -> list:
    """The intrinsics of the cuda target (called by the tensorkiln_intrinsics hook)."""
    from .mma import mma_intrinsic
    return [_wmma(WMMA_NN, False), _wmma(WMMA_NT, True), mma_intrinsic()]
