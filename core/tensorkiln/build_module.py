"""build_module.py: `tensorkiln.build`: a te schedule or tir PrimFuncs -> a runtime.Module loaded on the target.

    f = tk.build(s, [A, B, C], target="llvm", name="gemm")   # lowers with tensorkiln.te.lower
    f = tk.build(prim_func, target="llvm")                    # or [prim_func, ...]
"""
from __future__ import annotations

from typing import Any, Sequence

from .ir.errors import TensorkilnError
from .runtime.module import Module
from .target_lookup import target as resolve_target

__all__ = ["build"]


def _prim_funcs(sch_or_funcs: Any, args: Sequence[Any] | None, name: str) -> list:
    from .tir.nodes import PrimFunc

    if isinstance(sch_or_funcs, PrimFunc):
        return [sch_or_funcs]
    if isinstance(sch_or_funcs, (list, tuple)) and sch_or_funcs and \
            all(isinstance(f, PrimFunc) for f in sch_or_funcs):
        return list(sch_or_funcs)
    if args is None:
        raise TensorkilnError("build: a schedule needs its argument tensors, e.g. "
                              "tk.build(s, [A, B, C], target='llvm')")
    from .te.lower import lower

    return [lower(sch_or_funcs, list(args), name=name)]


def build(sch_or_funcs: Any, args: Sequence[Any] | None = None, target: Any = "cpu_llvm", name: str = "main") -> Module:
    """Compile and load kernels for `target`; returns a Module whose call runs kernel `name`.

    `sch_or_funcs` is a te.Schedule (lowered with `args` by `tensorkiln.te.lower`),
    a tir.PrimFunc, or a list of PrimFuncs. The target's emitter produces an
    Artifact (`module.artifact`), its runtime loader loads it.
    """
    funcs = _prim_funcs(sch_or_funcs, args, name)
    resolved = resolve_target(target)
    resolved.spec.require_available()
    if "prefetch" not in resolved.capabilities.schedule_primitives:   # a hint the target does not take
        from .tir.passes import strip_prefetch
        funcs = [strip_prefetch(func) for func in funcs]
    artifact = resolved.spec.emitter.emit(funcs, resolved)
    loaded = resolved.spec.loader.load(artifact, resolved)
    return Module(loaded, resolved, entry_name=name)
