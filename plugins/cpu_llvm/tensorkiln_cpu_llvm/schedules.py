"""schedules.py: schedules of cpu_llvm for dense / matmul (used by the operator library and benchmarks/gemm.py).

    A = te.placeholder((M, K)); B = te.placeholder((K, N))
    C = matmul_packed(A, B, target="llvm")        # packs B as Bp[N/nr, K, nr], then C = A @ B
    s = schedule_dense(C, target="llvm")          # blocking + micro-kernel + parallel packing
    f = tk.build(s, [A, B, C], target="llvm")

Loop nest of `schedule_dense` (mr x nr is the intrinsic's register tile)::

    parallel for i.outer.outer in M / mc:            # each thread owns mc rows of C
      for k.outer in K / kc:                        # kc x nr panel of Bp stays in L1
        for j.outer in N / nr:
          for i.outer.inner in mc / mr:
            sgemm_ukernel_packed(A[mr, kc], Bp[j.outer, kc, nr], C[mr, nr], accumulate = k.outer > 0)

Shapes that the tile does not divide fall back to `schedule_dense_fallback`
(split + vectorize + parallel, no intrinsic).
"""
from __future__ import annotations

from tensorkiln.ir.errors import ScheduleError

__all__ = ["matmul_packed", "schedule_dense", "schedule_dense_fallback", "DenseConfig", "default_dense_config"]

from dataclasses import dataclass


@dataclass(frozen=True)
class DenseConfig:
    """Blocking of schedule_dense: rows per thread block `mc`, reduction block `kc`, parallel or not."""

    mc: int = 64
    kc: int = 256
    parallel: bool = True


def default_dense_config(m: int, k: int, mr: int) -> DenseConfig:
    """The largest mc <= 64 and kc <= 256 that divide M (multiple of mr) and K."""
    mc = max((c for c in range(mr, 65, mr) if m % c == 0), default=mr)
    kc = max((c for c in (256, 192, 128, 96, 64, 48, 32, 16, 8, 4, 2, 1) if k % c == 0), default=1)
    return DenseConfig(mc=mc, kc=kc)


def _packed_intrinsic(target):
    import tensorkiln as tk
    from .intrinsics import UKERNEL_PACKED
    return tk.intrinsic(UKERNEL_PACKED, target=target)


def matmul_packed(a, b, target="llvm", name: str = "C"):
    """C[M, N] = A[M, K] @ B[K, N] with B packed into Bp[N/nr, K, nr] (nr = the micro-kernel's width).

    When nr does not divide N, Bp is padded with zeros; schedule_dense then falls back.
    """
    from tensorkiln import te

    nr = _packed_intrinsic(target).attrs["nr"]
    (m, k_extent), (_, n) = a.shape, b.shape
    blocks = -(-int(n) // nr)
    if int(n) % nr == 0:
        packed = te.compute((blocks, k_extent, nr), lambda jo, k, ji: b[k, jo * nr + ji], name=f"{b.name}_packed")
    else:
        packed = te.compute((blocks, k_extent, nr), lambda jo, k, ji: te.if_then_else(
            jo * nr + ji < n, b[k, jo * nr + ji], te.const(0.0, b.dtype)), name=f"{b.name}_packed")
    k = te.reduce_axis((0, k_extent), name="k")
    return te.compute((m, n), lambda i, j: te.sum(a[i, k] * packed[j // nr, k, j % nr], axis=k), name=name)


def _schedule_packing(s, packed, parallel: bool) -> None:
    jo, _, ji = s[packed].op.axis
    s[packed].vectorize(ji)
    if parallel:
        s[packed].parallel(jo)


def schedule_dense(c, target="llvm", config: DenseConfig | None = None):
    """Schedule `c = matmul_packed(...)` onto the packed micro-kernel; returns a te.Schedule."""
    from tensorkiln import te

    intrin = _packed_intrinsic(target)
    mr, nr = intrin.attrs["mr"], intrin.attrs["nr"]
    m, n = (int(x) for x in c.shape)
    (k_axis,) = c.op.reduce_axis
    k_extent = int(k_axis.dom.extent)
    if m % mr or n % nr:
        return schedule_dense_fallback(c, target, parallel=True if config is None else config.parallel)
    config = config or default_dense_config(m, k_extent, mr)
    if config.mc % mr or m % config.mc or k_extent % config.kc:
        raise ScheduleError(f"schedule_dense: mc={config.mc} must be a multiple of mr={mr} dividing M={m}, and "
                            f"kc={config.kc} must divide K={k_extent}")
    s = te.create_schedule(c.op)
    packed = c.op.input_tensors[1]
    i, j = s[c].op.axis
    i_outer, i_inner = s[c].split(i, factor=mr)
    i_block, i_tile = s[c].split(i_outer, factor=config.mc // mr)
    j_outer, j_inner = s[c].split(j, factor=nr)
    k_outer, k_inner = s[c].split(k_axis, factor=config.kc)
    s[c].reorder(i_block, k_outer, j_outer, i_tile, i_inner, j_inner, k_inner)
    s[c].tensorize(i_inner, intrin)
    if config.parallel:
        s[c].parallel(i_block)
    _schedule_packing(s, packed, config.parallel)
    return s


def schedule_dense_fallback(c, target="llvm", parallel: bool = True):
    """Any shape: tile rows and columns, vectorize the inner columns, parallelize rows (no intrinsic)."""
    from tensorkiln import te

    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    (k,) = s[c].op.reduce_axis
    n = int(c.shape[1])
    lanes = 16 if n % 16 == 0 else (8 if n % 8 == 0 else 1)
    j_outer, j_inner = s[c].split(j, factor=lanes)
    s[c].reorder(i, j_outer, k, j_inner)
    if lanes > 1:
        s[c].vectorize(j_inner)
    if parallel:
        s[c].parallel(i)
    if len(c.op.input_tensors) > 1 and c.op.input_tensors[1].name.endswith("_packed"):
        _schedule_packing(s, c.op.input_tensors[1], parallel)
    return s
