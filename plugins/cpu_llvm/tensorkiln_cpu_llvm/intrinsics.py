"""intrinsics.py: tensor intrinsics of cpu_llvm: fp32 GEMM kernels with their te descriptions.

- `sgemm_ukernel`: C[mr, nr] (+)= A[mr, K] @ B[K, nr], the register-blocked FMA
  micro-kernel (AVX-512: 8x32; AVX2: 6x16), K free.
- `sgemm_ukernel_packed`: the same with B packed as Bp[N/nr, K, nr] and read as
  Bp[j // nr, k, j % nr]; what `schedules.schedule_dense` tensorizes onto.
- `gemm_accelerator` (the seed's name): C[M, N] (+)= A[M, K] @ B[K, N] for any
  M, N, K, looping the micro-kernel with masked edges.

The tile is chosen from the target's CPU features when the intrinsics are
requested (`tensorkiln_intrinsics(target)`), so `-mcpu=haswell` gets the AVX2 tile.
"""
from __future__ import annotations

import functools

from tensorkiln.sdk.intrinsic_impl import SourceImpl

from .host import cpu_facts
from .ukernels import GemmTile, tile_gemm_source, ukernel_source

__all__ = ["tile_for", "cpu_llvm_intrinsics", "packed_intrinsic", "UKERNEL", "UKERNEL_PACKED", "GEMM_ACCELERATOR"]

UKERNEL, UKERNEL_PACKED, GEMM_ACCELERATOR = "sgemm_ukernel", "sgemm_ukernel_packed", "gemm_accelerator"


def tile_for(target) -> GemmTile:
    """The register tile for `target`'s CPU: nr = two vectors of float32, mr = 8 rows with 32 vector
    registers (16 accumulators) and 6 with 16 (12 accumulators, the rest hold B and the broadcast A):
    8x32 on AVX-512, 6x16 on AVX2."""
    facts = cpu_facts(target)
    lanes = facts.lanes(32)
    return GemmTile(mr=8 if facts.vector_registers >= 32 else 6, nr=2 * lanes, lanes=lanes)


@functools.cache
def packed_intrinsic(tile: GemmTile):
    """The packed micro-kernel for any register tile (the strategies pick mr per workload), named
    `sgemm_ukernel_packed_<mr>x<nr>`: kernels of one module may use several tiles, and a kernel
    calls an intrinsic by name."""
    from tensorkiln import te

    attrs = {"mr": tile.mr, "nr": tile.nr, "lanes": tile.lanes, "dtype": "float32"}
    name = f"{UKERNEL_PACKED}_{tile.mr}x{tile.nr}"
    symbol = f"tk_{name}"
    return te.decl_tensor_intrin(
        _matmul_description(tile.mr, tile.nr, packed_nr=tile.nr), name, attrs=attrs,
        implementations={"cpu_llvm": SourceImpl("llvm", ukernel_source(tile, symbol, b_strides=2), symbol,
                                                vectorized=True)})


def _matmul_description(m, n, packed_nr: int | None = None):
    """te description C[m, n] = sum_k A[m, k] * B[k, n] (B packed as Bp[n // nr, K, nr] when packed_nr)."""
    from tensorkiln import te

    k_extent = te.var("K")
    a = te.placeholder((m, k_extent), name="A")
    k = te.reduce_axis((0, k_extent), name="k")
    if packed_nr is None:
        b = te.placeholder((k_extent, n), name="B")
        return te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    b = te.placeholder((1, k_extent, packed_nr), name="Bp")
    return te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[j // packed_nr, k, j % packed_nr], axis=k), name="C")


@functools.cache
def _intrinsics_for_tile(tile: GemmTile) -> tuple:
    from tensorkiln import te

    attrs = {"mr": tile.mr, "nr": tile.nr, "lanes": tile.lanes, "dtype": "float32"}
    micro_symbol = f"tk_{UKERNEL}_{tile.mr}x{tile.nr}"
    micro = te.decl_tensor_intrin(
        _matmul_description(tile.mr, tile.nr), UKERNEL, attrs=attrs,
        implementations={"cpu_llvm": SourceImpl("llvm", ukernel_source(tile, micro_symbol), micro_symbol,
                                                vectorized=True)})
    # Bp[N/nr, K, nr]: lowering passes two strides for it; the kernel reads the last (nr)
    packed_symbol = f"tk_{UKERNEL_PACKED}_{tile.mr}x{tile.nr}"
    packed = te.decl_tensor_intrin(
        _matmul_description(tile.mr, tile.nr, packed_nr=tile.nr), UKERNEL_PACKED, attrs=attrs,
        implementations={"cpu_llvm": SourceImpl("llvm", ukernel_source(tile, packed_symbol, b_strides=2),
                                                packed_symbol, vectorized=True)})
    m_extent, n_extent = te.var("M"), te.var("N")
    general = _matmul_description(m_extent, n_extent)
    declared = te.decl_tensor_intrin(general, GEMM_ACCELERATOR, attrs=attrs, implementations={})
    # the function takes the extents in the order lowering passes them (TensorIntrin.extent_vars)
    order = tuple(v.name for v in declared.extent_vars)
    impl = SourceImpl("llvm", tile_gemm_source(tile, f"tk_{GEMM_ACCELERATOR}", extent_order=order),
                      f"tk_{GEMM_ACCELERATOR}")
    accelerator = te.decl_tensor_intrin(general, GEMM_ACCELERATOR, attrs=attrs, implementations={"cpu_llvm": impl})
    return micro, packed, accelerator


def cpu_llvm_intrinsics(target) -> list:
    """Every intrinsic this plugin registers for a cpu_llvm `target`."""
    return list(_intrinsics_for_tile(tile_for(target)))
