"""lane_masks.py: the predicate of a masked vector load as a lane range and a condition shared by every lane.

A padded input is read as `x[ramp(base, 1, n) if row_inside && 0 <= ramp(-left, 1, n) < width]`: one
condition for the whole vector (the row) and, for each lane, a condition of its position alone (the column).
`split_predicate` finds that form: the lanes on are a constant range [first, stop), and the rest is a list of
scalar conditions. The emitter (exprs.py) then loads the range with a plain vector load, from a zeroed stack
slot when the shared condition fails, and shuffles it into place: no masked load. A masked load was the
costliest part of a depthwise conv on Zen 1: `vmaskmovps` took a third of the kernel's samples
(shufflenet's 28x28x136 layer).
"""
from __future__ import annotations

import operator
from typing import Callable, Sequence

from tensorkiln import tir

__all__ = ["split_predicate", "constant_lanes"]

_ARITHMETIC: dict[type, Callable] = {
    tir.Add: operator.add, tir.Sub: operator.sub, tir.Mul: operator.mul,
    tir.FloorDiv: lambda a, b: a // b if b else None, tir.FloorMod: lambda a, b: a % b if b else None,
    tir.Min: min, tir.Max: max,
    tir.LT: operator.lt, tir.LE: operator.le, tir.GT: operator.gt, tir.GE: operator.ge,
    tir.EQ: operator.eq, tir.NE: operator.ne,
    tir.And: lambda a, b: bool(a) and bool(b), tir.Or: lambda a, b: bool(a) or bool(b),
}


def constant_lanes(e: tir.PrimExpr, lanes: int) -> "tuple | None":
    """The value of each of `lanes` lanes of an integer or boolean expression without variables, else None."""
    if isinstance(e, tir.IntImm):
        return (e.value,) * lanes
    if isinstance(e, tir.Broadcast):
        return constant_lanes(e.value, lanes)
    if isinstance(e, tir.Ramp):
        base, stride = constant_lanes(e.base, 1), constant_lanes(e.stride, 1)
        if base is None or stride is None or e.lanes != lanes:
            return None
        return tuple(base[0] + i * stride[0] for i in range(lanes))
    if isinstance(e, tir.Not):
        value = constant_lanes(e.a, lanes)
        return None if value is None else tuple(not v for v in value)
    apply = _ARITHMETIC.get(type(e))
    if apply is None:
        return None
    a, b = constant_lanes(e.a, lanes), constant_lanes(e.b, lanes)
    if a is None or b is None:
        return None
    values = tuple(apply(x, y) for x, y in zip(a, b))
    return None if any(v is None for v in values) else values


def _conjuncts(e: tir.PrimExpr) -> list[tir.PrimExpr]:
    if isinstance(e, tir.And):
        return _conjuncts(e.a) + _conjuncts(e.b)
    return [e]


def split_predicate(predicate: tir.PrimExpr, lanes: int) -> "tuple[list[tir.PrimExpr], int, int] | None":
    """(shared, first, stop): `predicate` holds in lane i exactly when every scalar condition of `shared`
    holds and first <= i < stop. None when it has another form (a lane condition on a variable, or lanes on
    that are not one range)."""
    shared: list[tir.PrimExpr] = []
    on: Sequence[bool] = (True,) * lanes
    for term in _conjuncts(predicate):
        if term.lanes == 1:
            shared.append(term)
        elif isinstance(term, tir.Broadcast) and term.value.lanes == 1:
            shared.append(term.value)
        else:
            values = constant_lanes(term, lanes)
            if values is None:
                return None
            on = tuple(bool(x) and bool(y) for x, y in zip(on, values))
    chosen = [i for i, value in enumerate(on) if value]
    if not chosen:
        return shared, 0, 0
    first, stop = chosen[0], chosen[-1] + 1
    if stop - first != len(chosen):
        return None
    return shared, first, stop
