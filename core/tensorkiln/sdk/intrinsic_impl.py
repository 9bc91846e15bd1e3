"""sdk/intrinsic_impl.py: how a tensor intrinsic is implemented on one target.

A `te.TensorIntrin` carries a te description (what it computes, used by
tensorize and by the conformance kit) plus `implementations={target: impl}`. The
target's emitter reads the impl for its own name or alias when a lowered kernel
contains `tir.Evaluate(tir.Call("void", intrin.name, args))`.

Argument convention of the implementing function (set by tensorize lowering):

1. for each description input buffer in declaration order, then the output:
   a pointer to the tile origin;
2. for each of those buffers in the same order, the element strides (int64) of
   every tile dimension except the last (the last is contiguous);
3. each symbolic extent of the description (e.g. K) as int64, in order of first
   appearance;
4. an int32 `accumulate` flag: 0 = overwrite the output tile, 1 = add into it.

Example, C[8, 32] (+)= A[8, K] @ B[K, 32]::

    void ukernel(float* A, float* B, float* C, int64 lda, int64 ldb, int64 ldc, int64 K, int32 accumulate)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["IntrinsicImpl", "SourceImpl", "ExternImpl", "implementation_for"]


class IntrinsicImpl:
    """Base of the implementation kinds; an emitter accepts the kinds it knows."""

    symbol: str


@dataclass(frozen=True)
class SourceImpl(IntrinsicImpl):
    """A function given as source text in the target's language, compiled into each module using it.

    `language` is "llvm" (LLVM IR text) for cpu_llvm, "c" or "opencl" for C-style
    plugins. `code` defines `symbol` (and may define private helpers). `vectorized`: the code
    holds its own vector instructions (a hand-vectorized micro-kernel), so a target's compiler
    may skip its auto-vectorizers and loop unrolling on the kernels that call it (cpu_llvm does
    when the calling kernel's own stores are vector stores too: emitter.explicitly_vectorized).
    """

    language: str
    code: str
    symbol: str
    vectorized: bool = False


@dataclass(frozen=True)
class ExternImpl(IntrinsicImpl):
    """A C symbol from a shared library (or the process itself when `library` is None).

    The JIT makes `library` visible before it links; an exported module links
    against it, so the library must be present where the module is loaded.
    """

    symbol: str
    library: str | None = None


def implementation_for(intrin: Any, target: Any) -> IntrinsicImpl | None:
    """The impl of `intrin` for `target` (a resolved Target), keyed by its name or any alias."""
    implementations = getattr(intrin, "implementations", None) or {}
    names = (target.name, *target.manifest.plugin.aliases)
    for name in names:
        if name in implementations:
            return implementations[name]
    return None
