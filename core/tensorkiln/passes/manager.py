"""passes/manager.py: the registry of graph passes and the graph PassManager.

A graph pass is a pure function Module -> Module with a name and an opt level.
The machinery (PassContext, instruments, skip records) is shared with the loop
passes and lives in `tensorkiln.ir.pass_infra`; this module binds it to graph
modules: `register_pass` fills the graph registry, and `verify=True` re-infers
every type after each pass.

    with PassContext(opt_level=3, disabled={"alter_layout"}, instruments=[PassTimingInstrument()]):
        lib = tk.compile(mod, target="cpu_llvm")
"""
from __future__ import annotations

from typing import Any

from ..ir import pass_infra
from ..ir.pass_infra import (Pass, PassContext, PassInstrument, PassTimingInstrument, PrintIRInstrument,
                             SkippedPass, current_pass_context)

__all__ = [
    "Pass", "register_pass", "get_pass", "registered_passes", "PassContext", "PassInstrument",
    "PassTimingInstrument", "PrintIRInstrument", "VerifyInstrument", "PassManager", "SkippedPass",
    "current_pass_context", "GRAPH_PASSES",
]


def _verify_graph(mod) -> None:
    from ..graph.verify import verify_module

    verify_module(mod)


GRAPH_PASSES = pass_infra.PassRegistry("graph", verify=_verify_graph)


def register_pass(name: str, opt_level: int = 0, required=()):
    """Decorator registering a graph pass function under `name`; the function stays callable."""
    return GRAPH_PASSES.register(name, opt_level, required)


def get_pass(name: str) -> Pass:
    return GRAPH_PASSES.get(name)


def registered_passes() -> dict[str, Pass]:
    return GRAPH_PASSES.passes()


class VerifyInstrument(pass_infra.VerifyInstrument):
    """Check after each pass that the module is still well-typed (re-inferring every type)."""

    def __init__(self) -> None:
        super().__init__(_verify_graph)


class PassManager(pass_infra.PassManager):
    """Runs pipelines of registered graph passes under a PassContext and records skips."""

    def __init__(self, context: PassContext | None = None, target: Any = None) -> None:
        super().__init__(context, target, registry=GRAPH_PASSES)
