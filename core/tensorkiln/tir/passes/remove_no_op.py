"""tir/passes/remove_no_op.py: drop empty loops, empty sequences and known branches."""
from __future__ import annotations

from .. import nodes as n
from ..arith import as_int
from ..visit import substitute
from .registry import register_loop_pass

__all__ = ["remove_no_op", "is_no_op"]


def is_no_op(stmt: n.Stmt) -> bool:
    return isinstance(stmt, n.SeqStmt) and not stmt.stmts


@register_loop_pass("remove_no_op")
def remove_no_op(func: n.PrimFunc) -> n.PrimFunc:
    """SeqStmts are flattened; loops, branches and allocations with nothing inside vanish;
    serial loops of extent 1 become their body."""
    body = _clean(func.body)
    return func if body is func.body else n.PrimFunc(func.name, func.params, body, func.attrs)


def _clean(stmt: n.Stmt) -> n.Stmt:
    if isinstance(stmt, n.SeqStmt):
        out = []
        for s in stmt.stmts:
            s = _clean(s)
            if isinstance(s, n.SeqStmt):
                out.extend(s.stmts)
            else:
                out.append(s)
        if len(out) == 1:
            return out[0]
        if len(out) == len(stmt.stmts) and all(a is b for a, b in zip(out, stmt.stmts)):
            return stmt
        return n.SeqStmt(tuple(out))
    if isinstance(stmt, n.For):
        if as_int(stmt.extent) == 0:
            return n.NO_OP
        body = _clean(stmt.body)
        if is_no_op(body):
            return n.NO_OP
        if as_int(stmt.extent) == 1 and stmt.kind is not n.ForKind.THREAD_BINDING and not stmt.annotations:
            return _clean(substitute(body, {stmt.loop_var: stmt.min}))
        return stmt if body is stmt.body else n.For(stmt.loop_var, stmt.min, stmt.extent, stmt.kind, body,
                                                    stmt.thread_tag, stmt.annotations)
    if isinstance(stmt, n.IfThenElse):
        then_case = _clean(stmt.then_case)
        else_case = None if stmt.else_case is None else _clean(stmt.else_case)
        if else_case is not None and is_no_op(else_case):
            else_case = None
        if is_no_op(then_case) and else_case is None:
            return n.NO_OP
        if then_case is stmt.then_case and else_case is stmt.else_case:
            return stmt
        return n.IfThenElse(stmt.condition, then_case, else_case)
    if isinstance(stmt, n.Allocate):
        body = _clean(stmt.body)
        if is_no_op(body):
            return n.NO_OP
        return stmt if body is stmt.body else n.Allocate(stmt.buffer, body)
    if isinstance(stmt, n.LetStmt):
        body = _clean(stmt.body)
        return stmt if body is stmt.body else n.LetStmt(stmt.var, stmt.value, body)
    if isinstance(stmt, n.Evaluate) and isinstance(stmt.value, (n.IntImm, n.FloatImm)):
        return n.NO_OP
    return stmt
