"""gemm.py: the te GEMM schedules the GPU check times against cuBLAS (and the tests run on the shim).

    s, (A, B, C) = tiled_gemm(4096)              # fp32: 64x64 block tiles, 4x4 per thread, K in steps of 16
    s, (A, B, C) = wmma_gemm(4096)               # fp16 in, fp32 out: one warp per 16x16 tile on tensor cores
"""
from __future__ import annotations

from tensorkiln import te

__all__ = ["tiled_gemm", "wmma_gemm", "warp_tile_gemm"]


def tiled_gemm(n: int, block: int = 64, per_thread: int = 4, k_step: int = 16, dtype: str = "float32"):
    """C = A @ B: each block computes (block x block) outputs with (block/per_thread)^2 threads, each
    thread (per_thread x per_thread) of them in registers; A and B tiles of k_step go through shared memory."""
    A = te.placeholder((n, n), dtype=dtype, name="A")
    B = te.placeholder((n, n), dtype=dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    AA, BB = s.cache_read(A, "shared", [CC]), s.cache_read(B, "shared", [CC])
    threads = block // per_thread
    i, j = s[C].op.axis
    bi, ri = s[C].split(i, factor=block)
    bj, rj = s[C].split(j, factor=block)
    ty, ii = s[C].split(ri, factor=per_thread)
    tx, ji = s[C].split(rj, factor=per_thread)
    s[C].reorder(bi, bj, ty, tx, ii, ji)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], tx)
    ci, cj = s[CC].op.axis
    (ck,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(ck, factor=k_step)
    s[CC].reorder(ko, ki, ci, cj)
    s[CC].unroll(ci)
    s[CC].unroll(cj)
    for cache in (AA, BB):
        s[cache].compute_at(s[CC], ko)
        fused = s[cache].fuse(*s[cache].op.axis)
        outer, tx_fetch = s[cache].split(fused, factor=threads)
        _, ty_fetch = s[cache].split(outer, factor=threads)
        s[cache].bind(ty_fetch, te.thread_axis("threadIdx.y"))
        s[cache].bind(tx_fetch, te.thread_axis("threadIdx.x"))
    return s, (A, B, C)


def warp_tile_gemm(m: int, n: int, k: int, intrinsic, tile_n: int = 16, weight_rows: bool = False):
    """C (fp32) = A (fp16) @ B (fp16) with a warp-level intrinsic on (16 x tile_n) output tiles: a block is one
    warp on one tile, the operand tiles of each K step (16) fetched into shared memory by its 32 threads.
    `weight_rows`: B is given as W[n, k] (dense's layout, C = A @ W^T) instead of B[k, n]."""
    A = te.placeholder((m, k), dtype="float16", name="A")
    B = te.placeholder((n, k) if weight_rows else (k, n), dtype="float16", name="B")
    r = te.reduce_axis((0, k), name="k")

    def product(i, j):
        right = B[j, r] if weight_rows else B[r, j]
        return te.sum(te.cast(A[i, r], "float32") * te.cast(right, "float32"), axis=r)
    C = te.compute((m, n), product, name="C")
    s = te.create_schedule(C.op)
    caches = [s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])]
    io, ii = s[C].split(C.op.axis[0], factor=16)
    jo, ji = s[C].split(C.op.axis[1], factor=tile_n)
    ko, ki = s[C].split(s[C].op.reduce_axis[0], factor=16)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].bind(io, te.thread_axis("blockIdx.y"))
    s[C].bind(jo, te.thread_axis("blockIdx.x"))
    for cache in caches:
        s[cache].compute_at(s[C], ko)
        _, lane = s[cache].split(s[cache].fuse(*s[cache].op.axis), factor=32)
        s[cache].bind(lane, te.thread_axis("threadIdx.x"))
    s[C].tensorize(ii, intrinsic)
    return s, (A, B, C)


def wmma_gemm(n: int, intrinsic=None):
    """C (fp32) = A (fp16) @ B (fp16), n x n, on tensor cores through wmma 16x16x16."""
    if intrinsic is None:
        from .intrinsics import WMMA_NN, cuda_intrinsics
        intrinsic = next(i for i in cuda_intrinsics(None) if i.name == WMMA_NN)
    return warp_tile_gemm(n, n, n, intrinsic)
