"""tir/bound.py: symbolic interval arithmetic used by bound inference and tensorize.

`interval(e, env)` gives inclusive (lo, hi) expressions for e when the Vars in `env`
range over their (lo, hi) and every other Var is a fixed point. None means unknown
(data-dependent indices); callers fall back to the whole tensor.
"""
from __future__ import annotations

from . import nodes as n
from .arith import as_int

__all__ = ["interval", "Interval"]

Interval = tuple  # (lo: PrimExpr, hi: PrimExpr)


def interval(e: n.PrimExpr, env: dict) -> Interval | None:
    if isinstance(e, n.Var):
        return env.get(e, (e, e))
    if isinstance(e, (n.IntImm, n.FloatImm)):
        return (e, e)
    if isinstance(e, n.Cast):
        return interval(e.value, env)
    if isinstance(e, (n.Add, n.Sub, n.Min, n.Max)):
        a, b = interval(e.a, env), interval(e.b, env)
        if a is None or b is None:
            return None
        if isinstance(e, n.Add):
            return (n.Add(a[0], b[0]), n.Add(a[1], b[1]))
        if isinstance(e, n.Sub):
            return (n.Sub(a[0], b[1]), n.Sub(a[1], b[0]))
        node = type(e)
        return (node(a[0], b[0]), node(a[1], b[1]))
    if isinstance(e, n.Mul):
        a, b = interval(e.a, env), interval(e.b, env)
        if a is None or b is None:
            return None
        for x, c in ((a, as_int(e.b)), (b, as_int(e.a))):
            if c is not None:
                return (n.Mul(x[0], n.IntImm(e.dtype, c)), n.Mul(x[1], n.IntImm(e.dtype, c))) if c >= 0 \
                    else (n.Mul(x[1], n.IntImm(e.dtype, c)), n.Mul(x[0], n.IntImm(e.dtype, c)))
        if a[0] is a[1] and b[0] is b[1]:
            return (e, e)
        return None
    if isinstance(e, (n.FloorDiv, n.Div)):
        a, c = interval(e.a, env), as_int(e.b)
        if a is None or c is None or c <= 0:
            return None
        return (n.FloorDiv(a[0], e.b), n.FloorDiv(a[1], e.b))
    if isinstance(e, n.FloorMod):
        a, c = interval(e.a, env), as_int(e.b)
        if a is None or c is None or c <= 0:
            return None
        if a[0] is a[1]:
            return (n.FloorMod(a[0], e.b), n.FloorMod(a[0], e.b))
        return (n.IntImm(e.dtype, 0), n.IntImm(e.dtype, c - 1))
    if isinstance(e, n.Select):
        a, b = interval(e.true_value, env), interval(e.false_value, env)
        if a is None or b is None:
            return None
        return (n.Min(a[0], b[0]), n.Max(a[1], b[1]))
    return None
