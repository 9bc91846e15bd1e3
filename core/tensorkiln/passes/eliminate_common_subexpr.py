"""passes/eliminate_common_subexpr.py: compute each distinct value once.

    %0 = nn.relu(%x)                 %0 = nn.relu(%x)
    %1 = nn.relu(%x)        ->       %2 = add(%0, %0)
    %2 = add(%0, %1)

Two calls merge when they apply the same op with equal attributes to the same
(already merged) operands; equal constants merge too (compared by value), so
calls on two copies of one weight merge as well. Ops with side effects never
merge (an op declares them with `has_side_effects = True` on its record; no
built-in op has any yet).
"""
from __future__ import annotations

from ..graph import Call, Constant, Expr, Module, Tuple, TupleGetItem, rewrite
from ..graph.registry import Op
from ..ir.structural import structural_equal
from .manager import register_pass

__all__ = ["eliminate_common_subexpr"]


@register_pass("eliminate_common_subexpr", opt_level=1)
def eliminate_common_subexpr(mod: Module) -> Module:
    """Merge structurally equal calls on identical operands, and equal constants."""
    return mod.map_functions(_eliminate)


def _eliminate(function):
    seen: dict[tuple, Expr] = {}
    constants: dict[int, list[Constant]] = {}

    def merge(node: Expr) -> Expr | None:
        if isinstance(node, Constant):
            bucket = constants.setdefault(hash(node), [])
            for other in bucket:
                if other.checked_type == node.checked_type and structural_equal(other, node):
                    return other
            bucket.append(node)
            return None
        key = _key(node)
        if key is None:
            return None
        if key in seen:
            return seen[key]
        seen[key] = node
        return None

    return rewrite(function, merge)


def _key(node: Expr) -> tuple | None:
    """What makes two nodes the same value, given that their operands are already merged."""
    if isinstance(node, Call):
        if isinstance(node.op, Op):
            if getattr(node.op, "has_side_effects", False):
                return None
            return ("call", id(node.op), node.attrs, tuple(id(a) for a in node.args))
        return ("call_function", id(node.op), tuple(id(a) for a in node.args))
    if isinstance(node, TupleGetItem):
        return ("get", id(node.tuple_value), node.index)
    if isinstance(node, Tuple):
        return ("tuple", tuple(id(f) for f in node.fields))
    return None
