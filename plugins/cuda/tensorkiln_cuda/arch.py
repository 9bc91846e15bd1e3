"""arch.py: what each supported NVIDIA architecture allows, for compile-time checks.

    record = architecture("sm_90a")
    record.max_dynamic_shared_bytes     # 232448: the opt-in limit per block (227 KB)
    "wgmma" in record.intrinsics        # True only on sm_90a

A kernel over a limit is refused at compile time, naming the kernel and the limit
(`check_kernel`), instead of failing at launch on a GPU this machine does not have.
Numbers are the CUDA C Programming Guide's "Technical Specifications per Compute
Capability" table (CUDA 13.0).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tensorkiln.ir.errors import CompileError

__all__ = ["Architecture", "ARCHITECTURES", "architecture", "check_kernel", "check_resources", "parse_arch"]


@dataclass(frozen=True)
class Architecture:
    name: str                                  # "sm_90a": what NVRTC's --gpu-architecture takes
    compute_capability: tuple[int, int]
    max_dynamic_shared_bytes: int              # opt-in shared memory per block (cuFuncSetAttribute)
    shared_bytes_per_sm: int
    dtypes: tuple[str, ...]
    intrinsics: tuple[str, ...]
    max_static_shared_bytes: int = 48 * 1024   # __shared__ declared in the kernel
    max_threads_per_block: int = 1024
    registers_per_sm: int = 65536
    max_registers_per_thread: int = 255

    @property
    def virtual(self) -> str:
        """The PTX architecture of the same capability ("compute_90a")."""
        return self.name.replace("sm_", "compute_")


_BASE_DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float16", "bfloat16", "float32", "float64")
_AMPERE_INTRINSICS = ("wmma_m16n16k16_f16_f32", "mma_sync_m16n8k16_f16_f32", "ldmatrix", "cp_async")

ARCHITECTURES: dict[str, Architecture] = {
    record.name: record for record in (
        Architecture("sm_80", (8, 0), max_dynamic_shared_bytes=163 * 1024, shared_bytes_per_sm=164 * 1024,
                     dtypes=_BASE_DTYPES, intrinsics=_AMPERE_INTRINSICS),
        Architecture("sm_89", (8, 9), max_dynamic_shared_bytes=99 * 1024, shared_bytes_per_sm=100 * 1024,
                     dtypes=(*_BASE_DTYPES, "float8_e4m3fn", "float8_e5m2"), intrinsics=_AMPERE_INTRINSICS),
        Architecture("sm_90", (9, 0), max_dynamic_shared_bytes=227 * 1024, shared_bytes_per_sm=228 * 1024,
                     dtypes=(*_BASE_DTYPES, "float8_e4m3fn", "float8_e5m2"),
                     intrinsics=(*_AMPERE_INTRINSICS, "tma", "cluster")),
        Architecture("sm_90a", (9, 0), max_dynamic_shared_bytes=227 * 1024, shared_bytes_per_sm=228 * 1024,
                     dtypes=(*_BASE_DTYPES, "float8_e4m3fn", "float8_e5m2"),
                     intrinsics=(*_AMPERE_INTRINSICS, "tma", "cluster", "wgmma", "setmaxnreg")),
    )
}

_ARCH = re.compile(r"^sm_(\d)(\d+)(a?)$")


def parse_arch(text: str) -> tuple[int, int, bool] | None:
    """"sm_90a" -> (9, 0, True); None for anything that is not sm_XY[a]."""
    match = _ARCH.match(text or "")
    return None if match is None else (int(match.group(1)), int(match.group(2)), bool(match.group(3)))


def architecture(name: str) -> Architecture | None:
    """The record of `name` ("sm_80", "sm_89", "sm_90", "sm_90a"), None when tensorkiln has none."""
    return ARCHITECTURES.get(name)


def check_kernel(arch: Architecture, kernel: str, threads: int, static_shared: int, dynamic_shared: int,
                 dtypes: set[str] = frozenset()) -> None:
    """CompileError naming `kernel` and the limit it exceeds on `arch`."""
    where = f"cuda kernel '{kernel}' for {arch.name}"
    if threads > arch.max_threads_per_block:
        raise CompileError(f"{where} needs {threads} threads per block; the limit is {arch.max_threads_per_block}: "
                           "bind smaller threadIdx extents")
    if static_shared > arch.max_static_shared_bytes:
        raise CompileError(f"{where} declares {static_shared} bytes of static __shared__ memory; the limit is "
                           f"{arch.max_static_shared_bytes}")
    if static_shared + dynamic_shared > arch.max_dynamic_shared_bytes:
        raise CompileError(f"{where} uses {static_shared + dynamic_shared} bytes of shared memory; the limit per "
                           f"block is {arch.max_dynamic_shared_bytes} (max_dynamic_shared_bytes): use smaller "
                           "cache_read tiles")
    unsupported = sorted(d for d in dtypes if d not in arch.dtypes)
    if unsupported:
        raise CompileError(f"{where} uses dtype(s) {', '.join(unsupported)}, which {arch.name} lacks; it has "
                           f"{', '.join(arch.dtypes)}")


def check_resources(arch: Architecture, kernel: str, threads: int, resources: dict) -> None:
    """Refuse a kernel whose registers (from ptxas) do not fit `threads` threads in one SM."""
    registers = int(resources.get("registers", 0))
    if registers * max(threads, 1) > arch.registers_per_sm:
        raise CompileError(f"cuda kernel '{kernel}' for {arch.name} uses {registers} registers per thread x "
                           f"{threads} threads = {registers * threads}, over the {arch.registers_per_sm} registers "
                           "of an SM (registers_per_sm): bind fewer threads")
