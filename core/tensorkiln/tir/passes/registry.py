"""tir/passes/registry.py: the registry of loop passes, run by a PassManager like graph passes.

Each pass module registers its function with `@register_loop_pass(name)`; with
`PassContext(verify=True)` the manager checks every PrimFunc a pass returns with
`tir.verify_prim_func`.
"""
from __future__ import annotations

from ...ir.pass_infra import PassContext, PassManager, PassRegistry
from ..verify import verify_prim_func

__all__ = ["LOOP_PASSES", "register_loop_pass", "LoopPassManager"]

LOOP_PASSES = PassRegistry("tir", verify=verify_prim_func)


def register_loop_pass(name: str, opt_level: int = 0, required=()):
    """Decorator registering a loop pass (PrimFunc -> PrimFunc) under `name`."""
    return LOOP_PASSES.register(name, opt_level, required)


class LoopPassManager(PassManager):
    """Runs pipelines of loop passes on a PrimFunc under a PassContext and records skips.

        manager = LoopPassManager(PassContext(disabled={"unroll_loops"}, verify=True))
        func = manager.run(func, te.LOWER_PIPELINE)
    """

    def __init__(self, context: PassContext | None = None, target=None) -> None:
        super().__init__(context, target, registry=LOOP_PASSES)
