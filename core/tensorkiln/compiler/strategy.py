"""compiler/strategy.py: which implementation (compute + schedule + knob values) a fused group gets.

The targets' `tensorkiln_strategies(target)` hooks return `OpImplementation`s
(tensorkiln.sdk.strategy); `tensorkiln_schedule_rules(target)` rules join them as
schedule-only implementations of priority RULE_PRIORITY. For a group:

1. the anchor call is the op with the highest fusion pattern (conv2d over its bias add
   and relu); a group of elementwise / injective ops has the key "injective";
2. implementations keyed by the anchor op's name whose condition accepts the call are
   candidates; the highest priority wins (registration order breaks ties), and its
   compute, when it has one, replaces the op's te compute;
3. with no candidate by name, implementations without a compute keyed by the anchor
   stage's tag (from the op's own compute: "conv2d_nhwc", "dense", ...) are tried;
4. with none, the core's naive default (tensorkiln.ops.naive_schedule).

The knob values come from `configs` (a tuned record) when given, else from the
implementation's analytic defaults. The choice is returned as a `StrategyChoice`, which
the compiled model reports per kernel (`lib.summary()["strategies"]`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from ..graph import Call
from ..graph.registry import Op, OpPattern
from ..ir.errors import PluginError, ScheduleError
from ..sdk.plugin_manager import registry
from ..sdk.schedules.common import as_outputs, resolve_target
from ..sdk.schedules.fused import find_anchor
from ..sdk.strategy import EMPTY_SPACE, INJECTIVE, RULE_PRIORITY, OpImplementation, TuningSpace, Workload

__all__ = ["StrategyChoice", "implementations_for", "select_by_call", "select_by_tag", "schedule_for",
           "anchor_call", "NAIVE"]

NAIVE = "core.naive"
"""Name of the core's default implementation in reports."""


@dataclass(frozen=True)
class StrategyChoice:
    """The implementation chosen for a group, its tuning space and the knob values used."""

    implementation: OpImplementation | None      # None: the core's naive default
    space: TuningSpace = EMPTY_SPACE
    config: dict[str, Any] = field(default_factory=dict)
    key: str = ""
    rejected: tuple[tuple[str, str], ...] = ()   # (implementation, reason) that did not apply

    @property
    def name(self) -> str:
        return self.implementation.name if self.implementation is not None else NAIVE

    def schedule(self, outputs, target):
        if self.implementation is None:
            from ..ops import naive_schedule
            return naive_schedule(outputs, target)
        return self.implementation.schedule(as_outputs(outputs), target, dict(self.config))

    def describe(self) -> dict:
        return {"strategy": self.name, "key": self.key, "config": dict(self.config),
                "plugin": self.implementation.plugin if self.implementation is not None else "tensorkiln",
                "space_size": self.space.size, "rejected": [list(r) for r in self.rejected]}


def _rule_implementations(target) -> list[OpImplementation]:
    found = []
    for plugin_name, table in _per_plugin("tensorkiln_schedule_rules", target):
        for key, rule in (table or {}).items():
            found.append(OpImplementation(f"{plugin_name}:rule:{key}", (key,), _rule_schedule(rule),
                                          priority=RULE_PRIORITY, plugin=plugin_name))
    return found


def _rule_schedule(rule: Callable) -> Callable:
    def schedule(outputs, target, config):
        return rule(outputs, target)
    return schedule


def _per_plugin(hook_name: str, target) -> list[tuple[str, Any]]:
    """(plugin name, result) of every implementation of a per-target hook.

    A plugin whose hook raises is named in a PluginError (plugin, hook, reason), so the
    user sees which plugin broke the compile rather than a raw traceback.
    """
    reg = registry()
    results = []
    for impl in getattr(reg.hooks.hook, hook_name).get_hookimpls():
        try:
            result = impl.function(target=target)
        except Exception as error:  # noqa: BLE001 - any failure of third-party code is reported as its own
            raise PluginError(impl.plugin_name, f"hook {hook_name}", f"{type(error).__name__}: {error}",
                              "fix the plugin's hook, or uninstall the plugin") from error
        if result:
            results.append((impl.plugin_name, result))
    return results


def implementations_for(target) -> list[OpImplementation]:
    """Every implementation the installed plugins (strategies and rules) declare for `target`."""
    from ..sdk.target import Target
    target = resolve_target(target)
    if not isinstance(target, Target):
        return []  # a bare capabilities object (tests): no plugin serves it
    cache = _CACHE.get(str(target))
    if cache is not None and cache[0] is registry():
        return cache[1]
    found: list[OpImplementation] = []
    for plugin_name, result in _per_plugin("tensorkiln_strategies", target):
        for implementation in result:
            if not isinstance(implementation, OpImplementation):
                raise PluginError(plugin_name, "hook tensorkiln_strategies",
                                  f"returned a {type(implementation).__name__}, not an OpImplementation",
                                  "return a list of tensorkiln.sdk.OpImplementation")
            if not implementation.plugin:
                object.__setattr__(implementation, "plugin", plugin_name)
            found.append(implementation)
    found.extend(_rule_implementations(target))
    _CACHE[str(target)] = (registry(), found)
    return found


_CACHE: dict[str, tuple[object, list[OpImplementation]]] = {}


def _pick(candidates: list[OpImplementation]) -> OpImplementation | None:
    best = None
    for implementation in candidates:  # registration order breaks ties: the first stays
        if best is None or implementation.priority > best.priority:
            best = implementation
    return best


def _choice(implementation: OpImplementation | None, workload: Workload, target, key: str, configs,
            rejected) -> StrategyChoice:
    if implementation is None:
        return StrategyChoice(None, key=key, rejected=tuple(rejected))
    space = implementation.space(workload, target)
    wanted = configs(implementation, space) if configs is not None else None
    try:
        config = space.validate(wanted or {})
    except ScheduleError as error:
        raise ScheduleError(f"{implementation.name}: {error}") from None
    return StrategyChoice(implementation, space, config, key, tuple(rejected))


def anchor_call(calls: Sequence[Call]) -> Call | None:
    """The group's anchor: the op call with the highest fusion pattern above injective (the last such
    in execution order), or None for a group of elementwise / broadcast / injective ops."""
    best = None
    for call in calls:
        if not isinstance(call.op, Op) or call.op.pattern <= OpPattern.INJECTIVE:
            continue
        if best is None or call.op.pattern >= best.op.pattern:
            best = call
    return best


def select_by_call(calls: Sequence[Call], target, configs=None) -> StrategyChoice | None:
    """Phase 1: an implementation keyed by the anchor op's name (or "injective"), or None.

    `configs(implementation, space) -> dict | None` supplies tuned knob values.
    """
    anchor = anchor_call(calls)
    key = anchor.op.name if anchor is not None else INJECTIVE
    call = anchor if anchor is not None else (calls[-1] if calls else None)
    candidates, rejected = [], []
    for implementation in implementations_for(target):
        if key not in implementation.keys:
            continue
        verdict = implementation.applies(call, target) if call is not None else True
        if verdict is True:
            candidates.append(implementation)
        else:
            rejected.append((implementation.name, str(verdict)))
    chosen = _pick(candidates)
    if chosen is None:
        return None
    return _choice(chosen, Workload(call=call), target, key, configs, rejected)


def select_by_tag(outputs, target, call: Call | None = None, configs=None, ops: Sequence[str] = ()) -> StrategyChoice:
    """Phase 2 (and `schedule_for`): a compute-less implementation keyed by the anchor stage's tag
    (or "injective"), then by the group's op names; else the naive default."""
    outputs = as_outputs(outputs)
    anchor = find_anchor(outputs)
    keys = [anchor.op.tag if anchor is not None else INJECTIVE, *ops]
    candidates, rejected = [], []
    for key in keys:
        for implementation in implementations_for(target):
            if implementation.compute is not None or key not in implementation.keys:
                continue
            verdict = implementation.applies(call, target) if call is not None else True
            if verdict is True:
                candidates.append(implementation)
            else:
                rejected.append((implementation.name, str(verdict)))
        if candidates:
            return _choice(_pick(candidates), Workload(call, tuple(outputs)), target, key, configs, rejected)
    return _choice(None, Workload(call, tuple(outputs)), target, keys[0], configs, rejected)


def schedule_for(outputs, target, ops: Sequence[str] = (), config: dict | None = None):
    """The te.Schedule `target`'s strategies give te tensors built with the ops' own computes.

        s = schedule_for([out], tk.target("opencl"))   # blockIdx.x / threadIdx.x bound

    Implementations that replace a compute are not considered here (their schedules expect
    their own computes); `tk.compile` uses them through `select_by_call`.
    """
    target = resolve_target(target)
    choice = select_by_tag(outputs, target, ops=ops, configs=(lambda impl, space: config) if config else None)
    return choice.schedule(outputs, target)
