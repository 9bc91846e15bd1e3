"""sdk/strategy.py: op strategies, the contract through which a target owns its hardware knowledge.

A plugin's `tensorkiln_strategies(target)` hook returns `OpImplementation`s. Each is a
way to compute and schedule a fused group whose anchor is one of its `keys` (graph op
names such as "nn.conv2d", or anchor tags such as "conv2d_nhwc"; "injective" for a group
with no anchor), in the spirit of TVM's OpStrategy and JAX's per-platform lowering rules:

    def _dense_space(workload, target):                      # named knobs, analytic default
        lanes = vector_lanes(target, workload.dtype)
        return TuningSpace((Knob("row_block", (1, 2, 4, 8), default=4),
                            Knob("column_block", (lanes, 2 * lanes), default=lanes)))

    @hookimpl
    def tensorkiln_strategies(target):
        if target.name != "acme":
            return []
        return [OpImplementation("acme.dense", keys=("nn.dense",), schedule=_schedule_dense,
                                 space=_dense_space, priority=10,
                                 condition=lambda call, target: call.checked_type.dtype == "float32")]

- `compute(inputs, attrs, out_type, target, config)` replaces the op's registered te
  compute for the group's anchor op (packed weights, a blocked layout, a split
  reduction). None: the op's own compute.
- `schedule(outputs, target, config)` schedules the whole group (anchor plus fused
  epilogue); `outputs` are the group's te tensors.
- `space(workload, target)` declares the tuning space: named knobs, their candidate values
  and an analytic default; `config` is one value per knob (the defaults unless a tuned
  record chose others).
- `condition(call, target)` -> True, or a reason string / False when the implementation
  does not apply to this call (its shapes, dtypes, attrs).
- `priority`: among applicable implementations the highest wins.

The compiler (tensorkiln.compiler.strategy) picks the implementation; a target that
declares none for an op gets the core's one naive, correct default.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from ..ir.errors import ScheduleError

__all__ = ["Knob", "TuningSpace", "OpImplementation", "Workload", "INJECTIVE", "RULE_PRIORITY", "EMPTY_SPACE"]

INJECTIVE = "injective"
"""Key of a group without an anchor (only elementwise, broadcast and injective ops)."""

RULE_PRIORITY = 100
"""Priority of a schedule-only rule from `tensorkiln_schedule_rules`: rules override strategies."""


@dataclass(frozen=True)
class Knob:
    """One tunable decision: a name, its candidate values and the analytic default (one of them)."""

    name: str
    candidates: tuple
    default: Any

    def __post_init__(self) -> None:
        object.__setattr__(self, "candidates", tuple(self.candidates))
        if not self.candidates:
            raise ScheduleError(f"knob {self.name!r} has no candidate values")
        if self.default not in self.candidates:
            raise ScheduleError(f"knob {self.name!r}: default {self.default!r} is not one of its candidates "
                                f"{list(self.candidates)}")


@dataclass(frozen=True)
class TuningSpace:
    """The knobs an implementation declares; a config picks one candidate per knob."""

    knobs: tuple[Knob, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "knobs", tuple(self.knobs))
        names = [k.name for k in self.knobs]
        duplicated = sorted({n for n in names if names.count(n) > 1})
        if duplicated:
            raise ScheduleError(f"tuning space declares knob(s) {duplicated} more than once")

    def default_config(self) -> dict[str, Any]:
        """The analytic default: what the compiler uses without a tuned record."""
        return {k.name: k.default for k in self.knobs}

    def validate(self, config: Mapping[str, Any]) -> dict[str, Any]:
        """A complete config from a partial one (missing knobs take their default); unknown knobs or
        values outside a knob's candidates raise ScheduleError naming the knob."""
        known = {k.name: k for k in self.knobs}
        unknown = sorted(set(config) - set(known))
        if unknown:
            raise ScheduleError(f"config names unknown knob(s) {unknown}; this space has {sorted(known)}")
        result = self.default_config()
        for name, value in config.items():
            if value not in known[name].candidates:
                raise ScheduleError(f"knob {name!r}: {value!r} is not one of its candidates "
                                    f"{list(known[name].candidates)}")
            result[name] = value
        return result

    @property
    def size(self) -> int:
        total = 1
        for knob in self.knobs:
            total *= len(knob.candidates)
        return total

    def __iter__(self) -> Iterator[dict[str, Any]]:
        """Every config, in grid order (the first knob varies slowest)."""
        names = [k.name for k in self.knobs]
        for values in itertools.product(*(k.candidates for k in self.knobs)):
            yield dict(zip(names, values))

    def __len__(self) -> int:
        return self.size


EMPTY_SPACE = TuningSpace()


@dataclass(frozen=True)
class Workload:
    """What a tuning space is derived from: the group's anchor graph call and/or its te tensors.

    `call` (checked types and attrs) is there when the compiler selects by op name, before
    any compute is built; `outputs` (the group's te tensors) when a schedule-only
    implementation is chosen by anchor tag, or when te tensors are scheduled directly
    (`tensorkiln.compiler.strategy.schedule_for`), where `call` may be None.
    """

    call: Any = None
    outputs: tuple = ()

    @property
    def anchor(self):
        """The anchor te tensor of `outputs` (None without outputs or anchor)."""
        if not self.outputs:
            return None
        from .schedules.fused import find_anchor
        return find_anchor(list(self.outputs))

    @property
    def dtype(self) -> str:
        """The dtype the group computes in: the anchor's (or first output's), else the call's result."""
        anchor = self.anchor
        if anchor is not None:
            return anchor.dtype
        if self.outputs:
            return self.outputs[0].dtype
        checked = getattr(self.call, "checked_type", None)
        return getattr(checked, "dtype", "float32")


def _always(call, target) -> bool:
    return True


def _no_space(workload, target) -> TuningSpace:
    return EMPTY_SPACE


@dataclass(frozen=True)
class OpImplementation:
    """One way to compute and schedule a group anchored by one of `keys` (see the module docstring)."""

    name: str
    keys: tuple[str, ...]
    schedule: Callable[..., Any]
    compute: Callable[..., Any] | None = None
    space: Callable[..., TuningSpace] = _no_space
    condition: Callable[..., "bool | str"] = _always
    priority: int = 0
    plugin: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        keys = (self.keys,) if isinstance(self.keys, str) else tuple(self.keys)
        if not keys:
            raise ScheduleError(f"op implementation {self.name!r} has no keys (op names or anchor tags)")
        object.__setattr__(self, "keys", keys)

    def applies(self, call, target) -> "bool | str":
        """True, or the reason the implementation does not apply to `call`."""
        verdict = self.condition(call, target)
        if isinstance(verdict, str):
            return verdict or "condition rejected the call"
        return True if verdict else "condition rejected the call"   # bool, numpy bool, ...
