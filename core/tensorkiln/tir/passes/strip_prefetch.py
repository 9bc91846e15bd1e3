"""tir/passes/strip_prefetch.py: drop the prefetch hints of te's Stage.prefetch (tir.PREFETCH_CALL).

`tk.build` applies it for a target that does not claim the "prefetch" schedule primitive, so a schedule
written with prefetches for one target builds unchanged for another: the hints never change a result.
"""
from __future__ import annotations

from .. import nodes as n
from ..visit import rewrite
from .remove_no_op import remove_no_op

__all__ = ["strip_prefetch"]


def strip_prefetch(func: n.PrimFunc) -> n.PrimFunc:
    """`func` without its prefetch calls, and without the loops and branches left empty by them."""
    found = []

    def drop(node):
        if isinstance(node, n.Evaluate) and isinstance(node.value, n.Call) and node.value.name == n.PREFETCH_CALL:
            found.append(node)
            return n.NO_OP
        return None
    body = rewrite(func.body, pre=drop)
    if not found:
        return func
    return remove_no_op(n.PrimFunc(func.name, func.params, body, func.attrs))
