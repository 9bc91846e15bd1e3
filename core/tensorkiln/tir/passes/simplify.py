"""tir/passes/simplify.py: simplify every expression using the bounds of enclosing loops."""
from __future__ import annotations

from .. import nodes as n
from ..arith import SimplifyMemo, as_int, simplify_expr
from .registry import register_loop_pass

__all__ = ["simplify"]


@register_loop_pass("simplify")
def simplify(func: n.PrimFunc) -> n.PrimFunc:
    """Fold constants and index arithmetic; drop branches whose condition is known."""
    body = simplify_stmt(func.body, {})
    return func if body is func.body else n.PrimFunc(func.name, func.params, body, func.attrs)


def simplify_stmt(stmt: n.Stmt, bounds: dict, memos: dict | None = None) -> n.Stmt:
    """`memos`: a SimplifyMemo per bounds object (id -> (bounds, memo)), shared by the statements
    under the same loops, whose expressions share subtrees."""
    if memos is None:
        memos = {}
    entry = memos.get(id(bounds))
    if entry is None or entry[0] is not bounds:
        entry = memos[id(bounds)] = (bounds, SimplifyMemo())
    memo = entry[1]

    def expr(e):
        return None if e is None else simplify_expr(e, bounds, memo)

    if isinstance(stmt, n.For):
        lo, extent = expr(stmt.min), expr(stmt.extent)
        lo_v, ext_v = as_int(lo), as_int(extent)
        inner_bounds = bounds
        if lo_v is not None and ext_v is not None and ext_v > 0:
            inner_bounds = {**bounds, stmt.loop_var: (lo_v, lo_v + ext_v - 1)}
        body = simplify_stmt(stmt.body, inner_bounds, memos)
        if lo is stmt.min and extent is stmt.extent and body is stmt.body:
            return stmt
        return n.For(stmt.loop_var, lo, extent, stmt.kind, body, stmt.thread_tag, stmt.annotations)
    if isinstance(stmt, n.SeqStmt):
        stmts = tuple(simplify_stmt(s, bounds, memos) for s in stmt.stmts)
        return stmt if all(a is b for a, b in zip(stmts, stmt.stmts)) else n.SeqStmt(stmts)
    if isinstance(stmt, n.Store):
        value, index = expr(stmt.value), expr(stmt.index)
        predicate = expr(stmt.predicate)
        if value is stmt.value and index is stmt.index and predicate is stmt.predicate:
            return stmt
        return n.Store(stmt.buffer, value, index, predicate)
    if isinstance(stmt, n.IfThenElse):
        cond = expr(stmt.condition)
        if isinstance(cond, n.IntImm):
            chosen = stmt.then_case if cond.value else stmt.else_case
            return simplify_stmt(chosen, bounds, memos) if chosen is not None else n.NO_OP
        then_case = simplify_stmt(stmt.then_case, bounds, memos)
        else_case = None if stmt.else_case is None else simplify_stmt(stmt.else_case, bounds, memos)
        if cond is stmt.condition and then_case is stmt.then_case and else_case is stmt.else_case:
            return stmt
        return n.IfThenElse(cond, then_case, else_case)
    if isinstance(stmt, n.Allocate):
        body = simplify_stmt(stmt.body, bounds, memos)
        return stmt if body is stmt.body else n.Allocate(stmt.buffer, body)
    if isinstance(stmt, n.LetStmt):
        value = expr(stmt.value)
        body = simplify_stmt(stmt.body, bounds, memos)
        return stmt if value is stmt.value and body is stmt.body else n.LetStmt(stmt.var, value, body)
    if isinstance(stmt, n.Evaluate):
        value = expr(stmt.value)
        return stmt if value is stmt.value else n.Evaluate(value)
    return stmt
