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

__all__ = ["WRITTEN_METADATA_KEY", "written_buffers", "written_params", "check_writable",
           "WriteCheckedKernel"]

WRITTEN_METADATA_KEY = "written"
"""`Artifact.metadata[WRITTEN_METADATA_KEY]`: {kernel name: [names of the buffer parameters it writes]}."""


def written_buffers(func: Any) -> tuple[str, ...]:
    """Names of the buffers a tir.PrimFunc stores into or passes by pointer (intrinsics may write
    through it), sorted. Called by emitters at emit time."""
    from ..tir import nodes as tir
    from ..tir.visit import post_order_visit

    written: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, (tir.Store, tir.BufferPointer)):
            written.add(node.buffer.name)
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


def check_writable(signature: KernelSignature, written: frozenset[str] | None, args: Sequence[Any]) -> None:
    """Raise RuntimeLaunchError when an argument the kernel writes is a read-only numpy array."""
    if not written:
        return
    for index, (spec, value) in enumerate(zip(signature.params, args)):
        if spec.name in written and isinstance(value, np.ndarray) and not value.flags.writeable:
            raise RuntimeLaunchError(
                f"{signature.name}: argument {index} {spec.name!r} is written by the kernel, but the numpy array "
                "is read-only (flags.writeable is False); pass a writable array, e.g. numpy.array(x)")


class WriteCheckedKernel(KernelFunction):
    """`kernel` behind `check_writable`: what a loader returns for a kernel whose written
    parameters are known, e.g. `WriteCheckedKernel(native_kernel, written_params(metadata, name))`."""

    def __init__(self, kernel: KernelFunction, written: frozenset[str] | None) -> None:
        self.kernel = kernel
        self.signature = kernel.signature
        self.written = written

    def __call__(self, *args: Any) -> None:
        check_writable(self.signature, self.written, args)
        self.kernel(*args)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.kernel, name)

    def __repr__(self) -> str:
        return repr(self.kernel)
