"""conformance/catalogue.py: what a check is, how it fails, and the catalogue of levels.

A `Check` is one named, self-contained test of a target: `run(target)` returns
normally when the target behaves (optionally with a dict of *facts* for the report,
such as a model's share of ops on the target), or raises `CheckFailure` saying
*how* it failed:

- "compile": building kernels for the target raised (emitter, build, lowering),
- "run":     loading or running them raised, or runtime behaviour broke a contract,
- "numeric": the results differ from numpy beyond tolerance (max abs / rel error),
- "contract": a declaration is inconsistent (manifest level) or an API misbehaves,
- "coverage": too little of a model ran on the target (`KitOptions.min_target_share`).

Each level module (`levels/manifest.py`, ...) exposes `checks(target, options)`,
which reads the target's claims and returns the checks that apply, with skipped
ones carrying the reason (a target without `tensorize` skips the intrinsics level).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

__all__ = ["LEVELS", "FAILURE_KINDS", "Check", "CheckFailure", "KitOptions", "stage", "catalogue"]

LEVELS = ("manifest", "runtime", "te", "intrinsics", "ops", "models")
FAILURE_KINDS = ("compile", "run", "numeric", "contract", "coverage")


class CheckFailure(Exception):
    """A check found the target misbehaving; `kind` is one of FAILURE_KINDS."""

    def __init__(self, kind: str, message: str, *, max_abs_error: float | None = None,
                 max_rel_error: float | None = None, facts: dict | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.max_abs_error = max_abs_error
        self.max_rel_error = max_rel_error
        self.facts = facts   # what the check measured before it failed (reported like a pass's facts)


@contextlib.contextmanager
def stage(kind: str) -> Iterator[None]:
    """Turn any exception raised inside into a CheckFailure of `kind` ("compile", "run")."""
    try:
        yield
    except CheckFailure:
        raise
    except Exception as error:  # the target's code: any exception is a finding, never a crash of the kit
        raise CheckFailure(kind, f"{type(error).__name__}: {error}") from error


@dataclass(frozen=True)
class KitOptions:
    """How much the kit runs (shapes per op, dtypes, ops, seed) and what it requires. Tests use small settings."""

    shapes_per_op: int = 3
    dtypes: tuple[str, ...] | None = None   # None: every dtype the target claims
    ops: tuple[str, ...] | None = None      # None: every op the target claims
    seed: int = 0
    min_target_share: float = 0.0           # models level: fail a model with a smaller share of ops on the target


@dataclass(frozen=True)
class Check:
    """One entry of the catalogue: `run(target)` or a recorded reason it is skipped."""

    id: str                                   # "ops/nn.conv2d/float32/1": level/subject/...
    level: str
    required: bool
    description: str
    run: Callable[[Any], dict | None] | None = None  # None when skipped; may return facts for the report
    skip_reason: str = ""
    tags: dict[str, str] = field(default_factory=dict)

    @property
    def is_skipped(self) -> bool:
        return self.run is None


def catalogue(target: Any, levels: tuple[str, ...] = LEVELS, options: KitOptions | None = None) -> list[Check]:
    """Every check of `levels` that the claims of `target` (a resolved Target) select, in level order."""
    from .levels import LEVEL_MODULES

    options = options or KitOptions()
    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        raise ValueError(f"unknown conformance level(s) {unknown}; levels are {', '.join(LEVELS)}")
    found: list[Check] = []
    for level in LEVELS:
        if level in levels:
            found.extend(LEVEL_MODULES[level].checks(target, options))
    return found
