"""Placement: which target runs each op, and why an op fell back, written into the IR.

An op runs on the requested target when its manifest claims it, every
`tensorkiln_supported_ops` predicate of that target accepts it, and the
target's dtypes cover its operands. Otherwise it falls back to an available
CPU target (device_kind "cpu") unless strict mode refuses, listing every
unsupported op. `place_ops` returns the module with every op call annotated
(`Call.target`, `Call.fallback_reason`); fusion then only groups calls of one
target and puts the target and the reason on the group function's attrs, where
lowering and the execution plan read them.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..graph import Call, Expr, Function, Module, post_order, with_operands
from ..graph.ops.control_flow import is_control_flow
from ..graph.registry import Op, OpPattern
from ..graph.types import TensorType, TupleType
from ..ir.errors import UnsupportedOpError
from ..sdk.plugin_manager import registry
from ..sdk.target import Target

__all__ = ["place_ops", "unsupported_reason", "FOLLOWS_FALLBACK"]


def _dtypes(call: Call) -> set[str]:
    found = set()
    for t in [a.checked_type for a in call.args] + [call.checked_type]:
        fields = t.fields if isinstance(t, TupleType) else (t,)
        found.update(f.dtype for f in fields if isinstance(f, TensorType))
    return found


def unsupported_reason(call: Call, target: Target, predicates: dict) -> str:
    """"" when `target` runs `call`; otherwise a reason code such as "not_in_manifest"."""
    op = call.op
    if not target.manifest.ops.claims(op.name):
        return "not_in_manifest"
    missing = sorted(_dtypes(call) - set(target.capabilities.dtypes))
    if missing:
        return f"dtype_unsupported:{','.join(missing)}"
    predicate = predicates.get(op.name)
    if predicate is not None:
        verdict = predicate(call)
        if verdict is not True:
            return f"predicate:{verdict or 'rejected'}"
    return ""


FOLLOWS_FALLBACK = "follows_fallback"
"""Reason code of a cheap op the target could run, placed with the fallback ops around it."""


@dataclass
class _Decisions:
    """place_ops' working state, by node identity within one call of place_ops (never returned)."""

    primary: str
    by_call: dict[int, str] = field(default_factory=dict)
    reasons: dict[int, str] = field(default_factory=dict)


def _follow_fallbacks(mod: Module, placement: _Decisions) -> None:
    """Move data-movement ops (pattern INJECTIVE: reshape, transpose, ...) sandwiched between
    ops of one fallback target onto that target.

    reshape between a CPU max_pool2d and a CPU softmax would otherwise cost two copies
    (to the device and back). Forward: an injective op whose producing ops all run on one
    fallback target moves there; backward: a moved op none of whose users runs there moves back.
    Elementwise and broadcast ops compute, so they stay on the requested target.
    """
    primary = placement.primary
    calls = [n for n in post_order(mod.main.body) if isinstance(n, Call) and isinstance(n.op, Op)]
    users: dict[int, list[Call]] = {}
    for call in calls:
        for arg in call.args:
            users.setdefault(id(arg), []).append(call)
    moved = []
    for call in calls:
        producers = {placement.by_call.get(id(a)) for a in call.args if isinstance(a, Call) and isinstance(a.op, Op)}
        if placement.by_call.get(id(call)) != primary or call.op.pattern != OpPattern.INJECTIVE or len(producers) != 1:
            continue
        (fallback,) = producers
        if fallback is not None and fallback != primary:
            placement.by_call[id(call)] = fallback
            moved.append(call)
    for call in reversed(moved):
        here = placement.by_call[id(call)]
        if not any(placement.by_call.get(id(user)) == here for user in users.get(id(call), [])):
            placement.by_call[id(call)] = primary
    for call in moved:
        if placement.by_call[id(call)] != primary:
            placement.reasons[id(call)] = FOLLOWS_FALLBACK


def _fallback_targets(primary: Target) -> list[Target]:
    reg = registry()
    found = []
    for name in reg.names():
        spec = reg.targets[name]
        if name != primary.name and spec.is_available and spec.manifest.plugin.device_kind == "cpu":
            found.append(reg.target(name))
    return found


def place_ops(mod: Module, target: Target, strict: bool = False) -> Module:
    """`mod` with every op call of main annotated with its target and fallback reason (see the module doc)."""
    placement = _Decisions(str(target))
    predicates_cache: dict[str, dict] = {}

    def predicates(t: Target) -> dict:
        if str(t) not in predicates_cache:
            merged: dict = {}
            for result in registry().call("tensorkiln_supported_ops", t):
                merged.update(result)
            predicates_cache[str(t)] = merged
        return predicates_cache[str(t)]

    unsupported = []
    fallbacks = None
    for node in post_order(mod.main.body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        if is_control_flow(node.op):   # a host step around compiled bodies (compiler/control_flow.py)
            placement.by_call[id(node)] = str(target)
            continue
        if node.op.compute is None:
            _ensure_computes()
        if node.op.compute is None:
            unsupported.append((node, "no_compute"))
            continue
        reason = unsupported_reason(node, target, predicates(target))
        if not reason:
            placement.by_call[id(node)] = str(target)
            continue
        if strict:
            unsupported.append((node, reason))
            continue
        fallbacks = _fallback_targets(target) if fallbacks is None else fallbacks
        chosen = next((t for t in fallbacks if not unsupported_reason(node, t, predicates(t))), None)
        if chosen is None:
            unsupported.append((node, reason))
            continue
        placement.by_call[id(node)] = str(chosen)
        placement.reasons[id(node)] = reason
    if unsupported:
        lines = [f"  {node.op.name} ({reason}) at {node.summary()}" for node, reason in unsupported]
        mode = "strict mode refuses to fall back" if strict else "no fallback target can run them"
        raise UnsupportedOpError(f"target {target} cannot run {len(unsupported)} op(s) and {mode}:\n" + "\n".join(lines))
    if placement.reasons:
        _follow_fallbacks(mod, placement)
    return _annotate(mod, placement)


def _annotate(mod: Module, placement: _Decisions) -> Module:
    """Rebuild main with `target` / `fallback_reason` set on every op call."""
    memo: dict[int, Expr] = {}
    main = mod.main
    for node in post_order(main.body):
        rebuilt = with_operands(node, memo, False)
        if isinstance(node, Call) and isinstance(node.op, Op):
            rebuilt = dataclasses.replace(rebuilt, target=placement.by_call.get(id(node), placement.primary),
                                          fallback_reason=placement.reasons.get(id(node), ""))
        memo[id(node)] = rebuilt
    return mod.with_function("main", Function(main.params, memo.get(id(main.body), main.body), main.attrs))


def _ensure_computes() -> None:
    import importlib
    importlib.import_module("tensorkiln.ops")
