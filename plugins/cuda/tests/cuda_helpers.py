"""Schedules the cuda tests share (imported by name: every conftest.py is a module called conftest)."""
from __future__ import annotations

from tensorkiln import te


def bind_1d(s, tensor, threads: int):
    """Fuse the axes of `tensor`, split by `threads`, bind blockIdx.x / threadIdx.x."""
    stage = s[tensor]
    axes = list(stage.op.axis)
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    outer, inner = stage.split(fused, factor=threads)
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))
    return outer, inner


def tiled_matmul(n: int, tile: int, dtype: str = "float32"):
    """The seed's GEMM: (tile x tile) blocks, operand tiles in shared memory, accumulator in registers."""
    A = te.placeholder((n, n), dtype=dtype, name="A")
    B = te.placeholder((n, n), dtype=dtype, name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], tj)
    for cache in (AA, BB):
        s[cache].compute_at(s[C], bj)
        fused = s[cache].fuse(*s[cache].op.axis)
        outer, tx = s[cache].split(fused, factor=tile)
        _, ty = s[cache].split(outer, factor=tile)
        s[cache].bind(ty, te.thread_axis("threadIdx.y"))
        s[cache].bind(tx, te.thread_axis("threadIdx.x"))
    return s, (A, B, C)
