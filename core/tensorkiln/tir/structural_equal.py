"""tir/structural_equal.py: structural equality of loop IR up to renaming of bound names.

Loop variables, let variables and allocated buffers are bound where they are
introduced; two programs are equal when they have the same shape and bound names map
one-to-one. Free variables and parameter buffers map one-to-one too (by position for
PrimFunc params). Iterative, so deep nests do not hit the recursion limit.
"""
from __future__ import annotations

import dataclasses

from . import nodes as n
from .visit import child_fields

__all__ = ["structural_equal", "assert_structural_equal"]


def structural_equal(a, b) -> bool:
    """True when a and b (PrimFunc, Stmt, PrimExpr or Buffer) are equal up to renaming."""
    return _first_difference(a, b) is None


def assert_structural_equal(a, b) -> None:
    """Raise AssertionError showing both sides and the first difference."""
    diff = _first_difference(a, b)
    if diff is not None:
        raise AssertionError(f"IR differs at {diff[0]!s} vs {diff[1]!s}\n--- left\n{a}\n--- right\n{b}")


def _first_difference(a, b):
    mapping: dict[int, object] = {}
    reverse: dict[int, object] = {}
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        if x is y and not isinstance(x, (n.Var, n.Buffer)):
            continue
        if type(x) is not type(y):
            return (x, y)
        if isinstance(x, (n.Var, n.Buffer)):
            if id(x) in mapping or id(y) in reverse:
                if mapping.get(id(x)) is not y or reverse.get(id(y)) is not x:
                    return (x, y)
                continue
            mapping[id(x)], reverse[id(y)] = y, x
            if isinstance(x, n.Var):
                if x.dtype != y.dtype:
                    return (x, y)
                continue
            if x.dtype != y.dtype or x.scope != y.scope or len(x.shape) != len(y.shape):
                return (x, y)
            stack.extend(zip(x.shape, y.shape))
            if (x.strides is None) != (y.strides is None):
                return (x, y)
            if x.strides is not None:
                stack.extend(zip(x.strides, y.strides))
            continue
        if isinstance(x, (tuple, list)):
            if len(x) != len(y):
                return (x, y)
            stack.extend(zip(x, y))
            continue
        if isinstance(x, n.PrimFunc):
            if len(x.params) != len(y.params):
                return (x, y)
            stack.append((x.body, y.body))
            stack.extend(zip(x.params, y.params))
            continue
        if dataclasses.is_dataclass(x) and isinstance(x, (n.PrimExpr, n.Stmt, n.CommCombiner)):
            if getattr(x, "dtype", None) != getattr(y, "dtype", None):
                return (x, y)
            for f in dataclasses.fields(x):
                stack.append((getattr(x, f.name), getattr(y, f.name)))
            continue
        if isinstance(x, n.ForKind) or isinstance(x, (int, float, str, bool, type(None))):
            if x != y:
                return (x, y)
            continue
        if x != y:
            return (x, y)
    return None
