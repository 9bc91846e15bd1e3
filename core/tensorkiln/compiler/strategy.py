"""compiler/strategy.py: which implementation (compute + schedule + knob values) a fused group gets.

The targets' `tensorkiln_strategies(target)` hooks return `OpImplementation`s
(tensorkiln.sdk.strategy); `tensorkiln_schedule_rules(target)` rules join them as
schedule-only implementations of priority RULE_PRIORITY. For a group (`select`):

1. the anchor call is the op with the highest fusion pattern (conv2d over its bias add
   and relu); a group of elementwise / injective ops has none;
2. its keys, most specific first: the anchor op's name, the anchor stage's tag from the
   ops' own computes ("conv2d_nhwc", "dense", ...; "injective" without anchor), then the
   group's op names;
3. every implementation matching a key whose condition accepts the anchor call
   competes; the highest priority wins, then the more specific key, then registration
   order. An implementation with a compute competes only when keyed by the anchor op's
   name (in a group without anchor: an injective op's, `compute_anchor`), and its compute
   then replaces that op's;
4. with no candidate, the core's naive default (tensorkiln.ops.naive_schedule).

A `configs` callback whose `implementation` attribute is GENERATED_NAME (a task tuned in a
generated space, a group whose fastest tuning record is generated) overrides all of this:
the group gets the generated sketch (sdk/schedules/generated.py) with the record's knob values.

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
from ..sdk.schedules.generated import GENERATED, GENERATED_NAME
from ..sdk.strategy import EMPTY_SPACE, INJECTIVE, RULE_PRIORITY, OpImplementation, TuningSpace, Workload

__all__ = ["StrategyChoice", "implementations_for", "select", "select_by_tag", "schedule_for", "anchor_call",
           "compute_anchor", "NAIVE"]

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
        if not isinstance(table, dict) or not all(callable(rule) for rule in table.values()):
            registry().disable(plugin_name, "hook tensorkiln_schedule_rules",
                               f"returned a {type(table).__name__}, not a dict of schedule rules "
                               "({op name or tag: rule(outputs, target) -> Schedule})")
            continue
        for key, rule in table.items():
            found.append(OpImplementation(f"{plugin_name}:rule:{key}", (key,), _rule_schedule(rule),
                                          priority=RULE_PRIORITY, plugin=plugin_name))
    return found


def _rule_schedule(rule: Callable) -> Callable:
    def schedule(outputs, target, config):
        return rule(outputs, target)
    return schedule


def _per_plugin(hook_name: str, target) -> list[tuple[str, Any]]:
    """(plugin name, result) of every implementation of a per-target hook.

    A plugin whose hook raises does not break the compile: the registry disables it (a
    PluginWarning and a PluginError in `registry().errors` name plugin, hook and reason)
    and the other plugins' results are used.
    """
    return registry().call_each(hook_name, target=target)


def implementations_for(target) -> list[OpImplementation]:
    """Every implementation the installed plugins (strategies and rules) declare for `target`."""
    from ..sdk.target import Target
    target = resolve_target(target)
    if not isinstance(target, Target):
        return []  # a bare capabilities object (tests): no plugin serves it
    # keyed by the plugins registered now: one registered later (a test, a notebook) is asked too
    plugins = tuple(sorted(registry().hooks.get_plugins(), key=id))  # the objects: a freed one's id is reused
    cache = _CACHE.get(str(target))
    if cache is not None and cache[0] == plugins:
        return cache[1]
    found: list[OpImplementation] = []
    for plugin_name, result in _per_plugin("tensorkiln_strategies", target):
        wrong = [type(i).__name__ for i in result if not isinstance(i, OpImplementation)]
        if wrong:   # unusable: the plugin is disabled like one whose hook raised
            registry().disable(plugin_name, "hook tensorkiln_strategies",
                               f"returned a {wrong[0]}, not an OpImplementation (return a list of "
                               "tensorkiln.sdk.OpImplementation)")
            continue
        for implementation in result:
            if not implementation.plugin:
                object.__setattr__(implementation, "plugin", plugin_name)
            found.append(implementation)
    found.extend(_rule_implementations(target))
    plugins = tuple(sorted(registry().hooks.get_plugins(), key=id))   # without any plugin disabled just now
    _CACHE[str(target)] = (plugins, found)
    return found


_CACHE: dict[str, tuple[tuple[object, ...], list[OpImplementation]]] = {}


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


def compute_anchor(calls: Sequence[Call], implementation: OpImplementation) -> Call | None:
    """The call whose compute `implementation` replaces: the anchor when it is keyed by the anchor's name; in a
    group without anchor, the last injective call keyed by it (a concatenate with an elementwise epilogue
    or a resize before it); None otherwise."""
    anchor = anchor_call(calls)
    if anchor is not None:
        return anchor if anchor.op.name in implementation.keys else None
    for call in reversed(calls):
        if isinstance(call.op, Op) and call.op.pattern == OpPattern.INJECTIVE and call.op.name in implementation.keys:
            return call
    return None


def _keys(anchor: Call | None, outputs: Sequence, ops: Sequence[str]) -> list[str]:
    """Keys a group matches, most specific first: the anchor op's name, the anchor stage's tag (or
    "injective" for a group without anchor), then the names of the group's ops, highest fusion pattern
    first (the anchor op before its epilogue; ties keep execution order)."""
    from ..graph.registry import get_op

    tensor_anchor = find_anchor(list(outputs)) if outputs else None
    keys = [anchor.op.name] if anchor is not None else []
    keys.append(tensor_anchor.op.tag if tensor_anchor is not None else INJECTIVE)
    names = sorted(dict.fromkeys(ops), key=lambda name: -int(get_op(name).pattern))
    return list(dict.fromkeys([*keys, *names]))


def select(calls: Sequence[Call], outputs, target, configs=None, ops: Sequence[str] = ()) -> StrategyChoice:
    """The implementation for a group: its op `calls` (graph, in execution order; may be empty when
    only te tensors are scheduled) and its `outputs` built with the ops' own computes.

    Every implementation matching one of the group's keys (`_keys`) and accepting the anchor call
    competes: the highest priority wins, then the more specific key, then registration order. An
    implementation with a compute competes only when it is keyed by the anchor op's name (its compute
    replaces that op's). Without a candidate: the core's naive default.
    `configs(implementation, space) -> dict | None` supplies tuned knob values.
    """
    outputs = as_outputs(outputs)
    anchor = anchor_call(calls)
    call = anchor if anchor is not None else (calls[-1] if calls else None)
    names = [c.op.name for c in calls if isinstance(c.op, Op)] or list(ops)
    keys = _keys(anchor, outputs, names)
    if getattr(configs, "implementation", None) == GENERATED_NAME:
        # a generated sketch (sdk/schedules/generated.py): a task tuned in a generated space, or a
        # group whose fastest tuning record is one; it needs no strategy, so it applies to any group
        return _choice(GENERATED, Workload(call, tuple(outputs)), target, keys[0], configs, [])
    ranked, rejected = [], []
    for order, implementation in enumerate(implementations_for(target)):
        matched = [keys.index(k) for k in implementation.keys if k in keys]
        if not matched:
            continue
        if implementation.compute is not None and compute_anchor(calls, implementation) is None:
            continue
        verdict = implementation.applies(call, target) if call is not None else True
        if verdict is not True:
            rejected.append((implementation.name, str(verdict)))
            continue
        ranked.append(((implementation.priority, -min(matched), -order), implementation, keys[min(matched)]))
    workload = Workload(call, tuple(outputs))
    if not ranked:
        return _choice(None, workload, target, keys[0], configs, rejected)
    _, chosen, key = max(ranked, key=lambda entry: entry[0])
    if chosen.compute is not None:
        workload = Workload(call)  # its outputs are not built yet: the space comes from the call
    return _choice(chosen, workload, target, key, configs, rejected)


def select_by_tag(outputs, target, call: Call | None = None, configs=None, ops: Sequence[str] = ()) -> StrategyChoice:
    """`select` for te tensors built with the ops' own computes, without the group's graph calls
    (or with only its anchor `call`): implementations with a compute do not compete."""
    return select((), outputs, target, configs, [*ops, *([call.op.name] if call is not None else [])])


def schedule_for(outputs, target, ops: Sequence[str] = (), config: dict | None = None):
    """The te.Schedule `target`'s strategies give te tensors built with the ops' own computes.

        s = schedule_for([out], tk.target("opencl"))   # blockIdx.x / threadIdx.x bound

    Implementations that replace a compute are not considered here (their schedules expect
    their own computes); `tk.compile` uses them (compiler/lower_groups.py).
    """
    target = resolve_target(target)
    choice = select((), outputs, target, configs=(lambda impl, space: config) if config else None, ops=ops)
    return choice.schedule(outputs, target)
