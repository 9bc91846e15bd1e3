"""Pass infrastructure: registered passes, pipelines, PassContext and instruments.

A pass is a pure function Module -> Module with a name and an opt level. The
manager runs a pipeline (a tuple of pass names), skipping each pass that the
context disables or whose opt level is too high, and records why; instruments
observe every pass (timing, IR dumps, verification).

    with PassContext(opt_level=3, disabled={"alter_layout"}, instruments=[PassTimingInstrument()]):
        lib = tk.compile(mod, target="cpu_llvm")
"""
from __future__ import annotations

import contextvars
import inspect
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence, TextIO

from ..ir.errors import InternalError, TensorkilnError

__all__ = [
    "Pass", "register_pass", "get_pass", "registered_passes", "PassContext", "PassInstrument",
    "PassTimingInstrument", "PrintIRInstrument", "VerifyInstrument", "PassManager", "Sequential",
    "SkippedPass", "current_pass_context",
]


@dataclass(frozen=True)
class Pass:
    """A named graph transformation.

    `function(mod, **needs)` where needs are drawn from {"target", "config"} by the
    function's signature, so a pass asks only for what it uses.
    """

    name: str
    function: Callable[..., Any]
    opt_level: int = 0
    required: tuple[str, ...] = ()
    description: str = ""

    def __call__(self, mod, *, target=None, config: dict | None = None):
        parameters = inspect.signature(self.function).parameters
        kwargs = {}
        if "target" in parameters:
            kwargs["target"] = target
        if "config" in parameters:
            kwargs["config"] = dict(config or {})
        return self.function(mod, **kwargs)


_PASSES: dict[str, Pass] = {}


def register_pass(name: str, opt_level: int = 0, required: Sequence[str] = ()) -> Callable:
    """Decorator registering a pass function under `name`; the function stays callable."""

    def wrap(function: Callable) -> Callable:
        if name in _PASSES and _PASSES[name].function is not function:
            raise InternalError(f"pass {name!r} registered twice")
        doc = (inspect.getdoc(function) or "").split("\n")[0]
        _PASSES[name] = Pass(name, function, opt_level, tuple(required), doc)
        return function

    return wrap


def get_pass(name: str) -> Pass:
    if name not in _PASSES:
        raise TensorkilnError(f"unknown pass {name!r}; registered passes: {', '.join(sorted(_PASSES))}")
    return _PASSES[name]


def registered_passes() -> dict[str, Pass]:
    return dict(_PASSES)


class PassInstrument:
    """Observes passes. Override any of the hooks."""

    def enter(self) -> None: ...
    def exit(self) -> None: ...
    def run_before_pass(self, name: str, mod) -> None: ...
    def run_after_pass(self, name: str, mod, seconds: float) -> None: ...


class PassTimingInstrument(PassInstrument):
    """Wall time per pass, in execution order (a pass run twice is summed)."""

    def __init__(self) -> None:
        self.times: dict[str, float] = {}

    def run_after_pass(self, name, mod, seconds) -> None:
        self.times[name] = self.times.get(name, 0.0) + seconds

    def render(self) -> str:
        total = sum(self.times.values()) or 1e-12
        lines = [f"{name:<32} {seconds * 1e3:9.2f} ms {100 * seconds / total:5.1f}%" for name, seconds in self.times.items()]
        return "\n".join(lines + [f"{'total':<32} {total * 1e3:9.2f} ms"])


class PrintIRInstrument(PassInstrument):
    """Print the module before and/or after the named passes ("*" = every pass)."""

    def __init__(self, before: Iterable[str] = (), after: Iterable[str] = (), stream: TextIO | None = None) -> None:
        self.before, self.after = set(before), set(after)
        self.stream = stream

    def _print(self, when: str, name: str, mod) -> None:
        out = self.stream or sys.stdout
        out.write(f"# IR {when} {name}\n{mod}\n")

    def run_before_pass(self, name, mod) -> None:
        if name in self.before or "*" in self.before:
            self._print("before", name, mod)

    def run_after_pass(self, name, mod, seconds) -> None:
        if name in self.after or "*" in self.after:
            self._print("after", name, mod)


class VerifyInstrument(PassInstrument):
    """Check after each pass that the module is still well-typed (re-inferring every type)."""

    def run_after_pass(self, name, mod, seconds) -> None:
        from ..graph.verify import verify_module

        try:
            verify_module(mod)
        except TensorkilnError as error:
            raise InternalError(f"pass {name!r} produced an ill-typed module: {error}\n{mod}") from error


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
    context variable).
    """

    opt_level: int = 2
    disabled: frozenset[str] | set[str] = frozenset()
    config: dict[str, dict[str, Any]] = field(default_factory=dict)
    instruments: list[PassInstrument] = field(default_factory=list)
    verify: bool = False

    def __post_init__(self) -> None:
        self.disabled = frozenset(self.disabled)
        unknown = [name for name in self.disabled | set(self.config) if name not in _PASSES]
        if unknown and _PASSES:
            raise TensorkilnError(f"PassContext names unknown passes {sorted(unknown)}; "
                                  f"registered passes: {', '.join(sorted(_PASSES))}")

    def __enter__(self) -> "PassContext":
        self._token = _CURRENT.set(self)
        for instrument in self.instruments:
            instrument.enter()
        return self

    def __exit__(self, *exc) -> None:
        for instrument in self.instruments:
            instrument.exit()
        _CURRENT.reset(self._token)


def current_pass_context() -> PassContext | None:
    return _CURRENT.get()


class PassManager:
    """Runs pipelines of registered passes under a PassContext and records skips."""

    def __init__(self, context: PassContext | None = None, target: Any = None) -> None:
        self.context = context or PassContext()
        self.target = target
        self.skipped: list[SkippedPass] = []
        self.ran: list[str] = []

    def run(self, mod, pipeline: Sequence[str | Pass]):
        instruments = list(self.context.instruments)
        if self.context.verify and not any(isinstance(i, VerifyInstrument) for i in instruments):
            instruments.append(VerifyInstrument())
        for item in pipeline:
            p = item if isinstance(item, Pass) else get_pass(item)
            reason = self._skip_reason(p)
            if reason:
                self.skipped.append(SkippedPass(p.name, reason))
                continue
            for instrument in instruments:
                instrument.run_before_pass(p.name, mod)
            start = time.perf_counter()
            mod = p(mod, target=self.target, config=self.context.config.get(p.name))
            seconds = time.perf_counter() - start
            self.ran.append(p.name)
            for instrument in instruments:
                instrument.run_after_pass(p.name, mod, seconds)
        return mod

    def _skip_reason(self, p: Pass) -> str:
        if p.name in self.context.disabled:
            return "disabled by PassContext"
        if p.opt_level > self.context.opt_level:
            return f"opt level {p.opt_level} > {self.context.opt_level}"
        missing = [r for r in p.required if r not in self.ran]
        if missing:
            return f"requires {', '.join(missing)}, which did not run"
        return ""


@dataclass(frozen=True)
class Sequential:
    """A named pipeline usable wherever a pass is: Sequential("simplify", ("a", "b"))."""

    name: str
    passes: tuple[str, ...]

    def __call__(self, mod, context: PassContext | None = None, target=None):
        return PassManager(context, target).run(mod, self.passes)
