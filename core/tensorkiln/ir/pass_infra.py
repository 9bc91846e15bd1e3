"""ir/pass_infra.py: the pass machinery shared by graph passes and loop (tir) passes.

A pass is a pure function IR -> IR with a name and an opt level. Each IR keeps
its passes in a `PassRegistry` (graph passes in `tensorkiln.passes`, loop passes
in `tensorkiln.tir.passes`); a `PassManager` runs a pipeline (a tuple of pass
names) of one registry under a `PassContext`, skipping each pass the context
disables or whose opt level is too high and recording why; instruments observe
every pass that runs (timing, IR dumps), and `verify=True` checks the IR after
each pass with the registry's verifier.

    registry = PassRegistry("tir", verify=verify_prim_func)

    @registry.register("unroll_loops")
    def unroll_loops(func): ...

    manager = PassManager(PassContext(disabled={"unroll_loops"}, verify=True), registry=registry)
    func = manager.run(func, ("simplify", "unroll_loops"))
    manager.skipped   # [SkippedPass("unroll_loops", "disabled by PassContext")]

This module imports no IR: `tensorkiln.passes` (graph) and `tensorkiln.tir`
(loops) both build on it. Users import the public names from `tensorkiln.passes`.
"""
from __future__ import annotations

import contextvars
import inspect
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence, TextIO

from .errors import InternalError, TensorkilnError

__all__ = [
    "Pass", "PassRegistry", "PassContext", "PassInstrument", "PassTimingInstrument", "PrintIRInstrument",
    "VerifyInstrument", "PassManager", "SkippedPass", "current_pass_context", "add_pass_source",
]


@dataclass(frozen=True)
class Pass:
    """A named transformation of one IR.

    `function(ir, **needs)` where needs are drawn from {"target", "config"} by the
    function's signature, so a pass asks only for what it uses.
    """

    name: str
    function: Callable[..., Any]
    opt_level: int = 0
    required: tuple[str, ...] = ()
    description: str = ""

    def __call__(self, ir, *, target=None, config: dict | None = None):
        parameters = inspect.signature(self.function).parameters
        kwargs = {}
        if "target" in parameters:
            kwargs["target"] = target
        if "config" in parameters:
            kwargs["config"] = dict(config or {})
        return self.function(ir, **kwargs)


# Every registry, so a PassContext can tell a misspelled name from a pass of another IR.
_REGISTRIES: list["PassRegistry"] = []


class PassRegistry:
    """The passes of one IR by name, and the check `verify=True` runs after each of them.

    `verify(ir)` returns None for sound IR and raises InternalError naming the problem.
    """

    def __init__(self, ir_name: str, verify: Callable[[Any], None] | None = None) -> None:
        self.ir_name = ir_name
        self.verify = verify
        self._passes: dict[str, Pass] = {}
        _REGISTRIES.append(self)

    def register(self, name: str, opt_level: int = 0, required: Sequence[str] = ()) -> Callable:
        """Decorator registering a pass function under `name`; the function stays callable."""

        def wrap(function: Callable) -> Callable:
            if name in self._passes and self._passes[name].function is not function:
                raise InternalError(f"{self.ir_name} pass {name!r} registered twice")
            doc = (inspect.getdoc(function) or "").split("\n")[0]
            self._passes[name] = Pass(name, function, opt_level, tuple(required), doc)
            return function

        return wrap

    def get(self, name: str) -> Pass:
        if name not in self._passes:
            raise TensorkilnError(f"unknown pass {name!r}; registered {self.ir_name} passes: "
                                  f"{', '.join(sorted(self._passes))}")
        return self._passes[name]

    def passes(self) -> dict[str, Pass]:
        return dict(self._passes)

    def __contains__(self, name: str) -> bool:
        return name in self._passes


class PassInstrument:
    """Observes passes. Override any of the hooks."""

    def enter(self) -> None: ...
    def exit(self) -> None: ...
    def run_before_pass(self, name: str, ir) -> None: ...
    def run_after_pass(self, name: str, ir, seconds: float) -> None: ...


class PassTimingInstrument(PassInstrument):
    """Wall time per pass, in execution order (a pass run twice is summed)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def run_after_pass(self, name, ir, seconds) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds

    def render(self) -> str:
        total = sum(self.times.values()) or 1e-12
        lines = [f"{name:<32} {seconds * 1e3:9.2f} ms {100 * seconds / total:5.1f}%" for name, seconds in self.times.items()]
        return "\n".join(lines + [f"{'total':<32} {total * 1e3:9.2f} ms"])


class PrintIRInstrument(PassInstrument):
    """Print the IR before and/or after the named passes ("*" = every pass)."""

    def __init__(self, before: Iterable[str] = (), after: Iterable[str] = (), stream: TextIO | None = None) -> None:
        self.before, self.after = set(before), set(after)
        self.stream = stream

    def _print(self, when: str, name: str, ir) -> None:
        out = self.stream or sys.stdout
        out.write(f"# IR {when} {name}\n{ir}\n")

    def run_before_pass(self, name, ir) -> None:
        if name in self.before or "*" in self.before:
            self._print("before", name, ir)

    def run_after_pass(self, name, ir, seconds) -> None:
        if name in self.after or "*" in self.after:
            self._print("after", name, ir)


class VerifyInstrument(PassInstrument):
    """Check the IR after each pass with `verify(ir)`; a failure is a bug in that pass.

    `verify` raises InternalError naming the problem and showing the IR.
    """

    def __init__(self, verify: Callable[[Any], None]) -> None:
        self.verify = verify

    def run_after_pass(self, name, ir, seconds) -> None:
        try:
            self.verify(ir)
        except (InternalError, TensorkilnError) as error:
            raise InternalError(f"pass {name!r} produced invalid IR: {error}") from error


@dataclass(frozen=True)
class SkippedPass:
    name: str
    reason: str


_CURRENT: contextvars.ContextVar["PassContext | None"] = contextvars.ContextVar("tensorkiln_pass_context", default=None)


@dataclass
class PassContext:
    """Settings of one compilation: opt level, disabled passes, per-pass config, instruments.

    Passed explicitly to `PassManager`; `with PassContext(...)` also makes it the
    default of `tk.compile` calls inside the block (the only reader of the
    context variable). Names may be graph or loop passes: one context serves
    every IR level of a compilation.
    """

    opt_level: int = 2
    disabled: frozenset[str] | set[str] = frozenset()
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    instruments: list[PassInstrument] = field(default_factory=list)
    verify: bool = False

    def __post_init__(self) -> None:
        self.disabled = frozenset(self.disabled)
        unknown = self._unknown_names()
        if unknown:
            _register_plugin_passes()
            unknown = self._unknown_names()
        if unknown:
            listing = "; ".join(f"{registry.ir_name}: {', '.join(sorted(registry.passes()))}"
                                for registry in _REGISTRIES if registry.passes())
            raise TensorkilnError(f"PassContext names unknown passes {sorted(unknown)}; registered passes: {listing}")

    def _unknown_names(self) -> list[str]:
        known = {name for registry in _REGISTRIES for name in registry.passes()}
        return [name for name in self.disabled | set(self.config) if known and name not in known]

    def __enter__(self) -> "PassContext":
        self._token = _CURRENT.set(self)
        for instrument in self.instruments:
            instrument.enter()
        return self

    def __exit__(self, *exc) -> None:
        for instrument in self.instruments:
            instrument.exit()
        _CURRENT.reset(self._token)


_PASS_SOURCES: list = []


def add_pass_source(load) -> None:
    """`load()` registers passes defined elsewhere (sdk.plugin_manager adds the installed plugins' passes, which
    a plugin registers when its `tensorkiln_passes` hook is first called): a PassContext naming a pass not yet
    registered calls every source once before it reports the name unknown."""
    _PASS_SOURCES.append(load)


def _register_plugin_passes() -> None:
    for load in _PASS_SOURCES:
        load()


def current_pass_context() -> PassContext | None:
    return _CURRENT.get()


class PassManager:
    """Runs pipelines of the passes in `registry` under a PassContext and records skips.

    `skipped` lists each pass that did not run and why; `ran` the passes that did.
    """

    def __init__(self, context: PassContext | None = None, target: Any = None, *, registry: PassRegistry) -> None:
        self.context = context or PassContext()
        self.target = target
        self.registry = registry
        self.skipped: list[SkippedPass] = []
        self.ran: list[str] = []

    def run(self, ir, pipeline: Sequence[str | Pass]):
        instruments = list(self.context.instruments)
        verify = self.registry.verify
        if self.context.verify and verify is not None and not any(
                isinstance(i, VerifyInstrument) and i.verify is verify for i in instruments):
            instruments.append(VerifyInstrument(verify))
        for item in pipeline:
            p = item if isinstance(item, Pass) else self.registry.get(item)
            reason = self._skip_reason(p)
            if reason:
                self.skipped.append(SkippedPass(p.name, reason))
                continue
            for instrument in instruments:
                instrument.run_before_pass(p.name, ir)
            start = time.perf_counter()
            ir = p(ir, target=self.target, config=self.context.config.get(p.name))
            seconds = time.perf_counter() - start
            self.ran.append(p.name)
            for instrument in instruments:
                instrument.run_after_pass(p.name, ir, seconds)
        return ir

    def _skip_reason(self, p: Pass) -> str:
        if p.name in self.context.disabled:
            return "disabled by PassContext"
        if p.opt_level > self.context.opt_level:
            return f"opt level {p.opt_level} > {self.context.opt_level}"
        missing = [r for r in p.required if r not in self.ran]
        if missing:
            return f"requires {', '.join(missing)}, which did not run"
        return ""
