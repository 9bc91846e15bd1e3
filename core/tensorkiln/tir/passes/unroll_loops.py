"""tir/passes/unroll_loops.py: expand UNROLLED loops with small constant extents."""
from __future__ import annotations

from .. import nodes as n
from ..arith import as_int, simplify_expr, uniform_value
from ..visit import rewrite, substitute, uses_var
from .registry import register_loop_pass

__all__ = ["unroll_loops", "MAX_UNROLL_EXTENT"]

MAX_UNROLL_EXTENT = 16


@register_loop_pass("unroll_loops")
def unroll_loops(func: n.PrimFunc, max_extent: int = MAX_UNROLL_EXTENT) -> n.PrimFunc:
    """An UNROLLED loop with constant extent <= max_extent becomes a SeqStmt of copies;
    a larger or symbolic one stays For(kind=UNROLLED) for the code emitter."""
    def post(x):
        if isinstance(x, n.For) and x.kind is n.ForKind.UNROLLED:
            lo, extent = as_int(x.min), as_int(x.extent)
            if lo is not None and extent is not None and extent <= max_extent:
                return n.SeqStmt(tuple(_copy_with(x.body, x.loop_var, n.IntImm(x.loop_var.dtype, lo + i))
                                       for i in range(extent)))
        return None
    # an expression holds no loop: returned as it is, it is not walked (most of a kernel's nodes)
    body = rewrite(func.body, pre=lambda x: x if isinstance(x, n.PrimExpr) else None,
                   post=lambda x: post(x) if isinstance(x, n.Stmt) else None)
    return func if body is func.body else n.PrimFunc(func.name, func.params, body, func.attrs)


def _copy_with(body, var: n.Var, value: n.PrimExpr):
    """`body` with `var` := `value`, where a Select whose condition then folds is replaced by its taken
    branch: selects on the loop index (the rows of Winograd's transform matrices, core
    ops/nn/winograd.py) are copied as their live branches, not whole for simplify to prune."""
    mapping = {var: value}

    def pre(x):
        if isinstance(x, n.Var):
            return mapping.get(x)
        if isinstance(x, n.Select) and uses_var(x.condition, (var,)):
            taken = uniform_value(simplify_expr(substitute(x.condition, mapping)))
            if taken is not None:
                return rewrite(x.true_value if taken else x.false_value, pre=pre)
        return None
    try:
        return rewrite(body, pre=pre)
    finally:
        del pre   # it refers to itself through its closure: no cycle left for the GC (tir/visit.py)
