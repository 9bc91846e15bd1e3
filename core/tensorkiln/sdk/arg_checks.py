"""sdk/arg_checks.py: which buffers a kernel writes, and the run-time check that they are writable.

An emitter records, per kernel, the buffer parameters its code stores into (or hands
to an intrinsic by pointer) as `artifact.metadata["written"][kernel] = [names]`
(CSourceEmitter keeps the same list in `metadata["kernels"][kernel]["written"]`).
A loader's kernel calls `check_writable` before any memory is touched, so a
read-only numpy array (`a.flags.writeable == False`: a constant, a view of bytes, a
broadcast) is refused with an error instead of being written through its pointer.

Only numpy and the standard library are imported here: loading a package needs no compiler.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..ir.errors import RuntimeLaunchError
from .codegen import KernelFunction, KernelSignature

__all__ = ["WRITTEN_METADATA_KEY", "written_buffers", "written_params", "written_positions", "check_writable",
           "WriteCheckedKernel"]

WRITTEN_METADATA_KEY = "written"
"""`Artifact.metadata[WRITTEN_METADATA_KEY]`: {kernel name: [names of the buffer parameters it writes]}."""


def written_buffers(func: Any) -> tuple[str, ...]:
    """Names of the buffers a tir.PrimFunc stores into or passes by pointer (intrinsics may write
    through it; a prefetch hint, tir.PREFETCH_CALL, only reads), sorted. Called by emitters at emit time."""
    from ..tir import nodes as tir
    from ..tir.visit import post_order_visit

    written: set[str] = set()
    hinted: set[int] = set()

    def hints(node) -> None:
        if isinstance(node, tir.Call) and node.name == tir.PREFETCH_CALL:
            hinted.update(id(arg) for arg in node.args)

    def visit(node) -> None:
        if isinstance(node, tir.Store) or (isinstance(node, tir.BufferPointer) and id(node) not in hinted):
            written.add(node.buffer.name)
    post_order_visit(func.body, hints)
    post_order_visit(func.body, visit)
    return tuple(sorted(written))


def written_params(metadata: dict, kernel: str) -> frozenset[str] | None:
    """The buffer parameters kernel `kernel` writes, from an artifact's (or a library's) metadata;
    None when the metadata does not say (an artifact from an older tensorkiln: nothing is checked)."""
    recorded = metadata.get(WRITTEN_METADATA_KEY)
    if isinstance(recorded, dict) and kernel in recorded:
        return frozenset(recorded[kernel])
    kernels = metadata.get("kernels")
    if isinstance(kernels, dict) and isinstance(kernels.get(kernel), dict) and "written" in kernels[kernel]:
        return frozenset(kernels[kernel]["written"])
    return None


def written_positions(signature: KernelSignature, written: frozenset[str] | None) -> tuple[int, ...]:
    """Positions of the parameters of `signature` named in `written` (computed once per kernel)."""
    return tuple(i for i, spec in enumerate(signature.params) if written and spec.name in written)


def check_writable(signature: KernelSignature, positions: Sequence[int], args: Sequence[Any]) -> None:
    """Raise RuntimeLaunchError when an argument at one of `positions` (what the kernel writes,
    see `written_positions`) is a read-only numpy array."""
    for index in positions:
        value = args[index] if index < len(args) else None
        if isinstance(value, np.ndarray) and not value.flags.writeable:
            raise RuntimeLaunchError(
                f"{signature.name}: argument {index} {signature.params[index].name!r} is written by the kernel, but "
                "the numpy array is read-only (flags.writeable is False); pass a writable array, e.g. numpy.array(x)")


class WriteCheckedKernel(KernelFunction):
    """`kernel` behind `check_writable`: what a loader returns for a kernel whose written
    parameters are known, e.g. `WriteCheckedKernel(native_kernel, written_params(metadata, name))`."""

    def __init__(self, kernel: KernelFunction, written: frozenset[str] | None) -> None:
        self.kernel = kernel
        self.signature = kernel.signature
        self.written = written
        self._positions = written_positions(kernel.signature, written)

    def __call__(self, *args: Any) -> None:
        check_writable(self.signature, self._positions, args)
        self.kernel(*args)

    def bind(self, *args: Any):
        check_writable(self.signature, self._positions, args)
        return self.kernel.bind(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)

    def __repr__(self) -> str:
        return repr(self.kernel)
