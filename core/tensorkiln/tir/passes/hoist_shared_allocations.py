"""tir/passes/hoist_shared_allocations.py: move "shared" Allocates to the top of the kernel.

Work-group memory is declared once per kernel (OpenCL requires it at kernel scope);
its shape is static, so hoisting keeps the program's meaning.
"""
from __future__ import annotations

from .. import nodes as n
from ..visit import rewrite
from .registry import register_loop_pass

__all__ = ["hoist_shared_allocations"]


@register_loop_pass("hoist_shared_allocations")
def hoist_shared_allocations(func: n.PrimFunc) -> n.PrimFunc:
    """Move every "shared" Allocate to the top of the kernel body."""
    hoisted: list[n.Buffer] = []

    def post(x):
        if isinstance(x, n.Allocate) and x.buffer.scope == "shared":
            hoisted.append(x.buffer)
            return x.body
        return None
    # an expression holds no statement: returned as it is, it is not walked (most of a kernel's nodes)
    body = rewrite(func.body, pre=lambda x: x if isinstance(x, n.PrimExpr) else None,
                   post=lambda x: post(x) if isinstance(x, n.Stmt) else None)
    if not hoisted:
        return func
    for buf in reversed(hoisted):
        body = n.Allocate(buf, body)
    return n.PrimFunc(func.name, func.params, body, func.attrs)
