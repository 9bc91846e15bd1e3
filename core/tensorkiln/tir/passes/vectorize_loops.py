"""tir/passes/vectorize_loops.py: turn VECTORIZED loops into Ramp/Broadcast vector code.

A VECTORIZED loop with a constant extent whose body is stores (possibly under
loop-invariant conditions) becomes one vector statement per store when every load
and store index is either loop-invariant or contiguous (stride 1). Anything else
(gathers, nested loops, conditions that depend on the loop, calls of intrinsics)
leaves the For(kind=VECTORIZED) in place; emitters may run it as a serial loop.
"""
from __future__ import annotations

from .. import nodes as n
from ..arith import as_int, simplify_expr
from ..visit import child_fields, rewrite, uses_var
from .registry import register_loop_pass

__all__ = ["vectorize_loops"]


class _CannotVectorize(Exception):
    pass


@register_loop_pass("vectorize_loops")
def vectorize_loops(func: n.PrimFunc) -> n.PrimFunc:
    """VECTORIZED loops whose accesses are contiguous or invariant become vector statements."""
    def post(x):
        if isinstance(x, n.For) and x.kind is n.ForKind.VECTORIZED:
            return _vectorize_loop(x)
        return None
    body = rewrite(func.body, post=lambda x: post(x) if isinstance(x, n.Stmt) else None)
    return func if body is func.body else n.PrimFunc(func.name, func.params, body, func.attrs)


def _vectorize_loop(loop: n.For) -> n.Stmt | None:
    lanes = as_int(loop.extent)
    if lanes is None or lanes < 2:
        return None
    ramp = n.Ramp(loop.min, n.IntImm(loop.loop_var.dtype, 1), lanes)
    try:
        return _Vectorizer(loop.loop_var, ramp, lanes).stmt(loop.body)
    except _CannotVectorize:
        return None


class _Vectorizer:
    def __init__(self, var: n.Var, ramp: n.Ramp, lanes: int):
        self.var, self.ramp, self.lanes = var, ramp, lanes

    def stmt(self, s: n.Stmt) -> n.Stmt:
        if isinstance(s, n.SeqStmt):
            return n.SeqStmt(tuple(self.stmt(x) for x in s.stmts))
        if isinstance(s, n.Store):
            if s.predicate is not None:
                raise _CannotVectorize
            index = self.expr(s.index)
            if index.lanes == 1 or not self._contiguous(index):
                raise _CannotVectorize
            value = self.broadcast(self.expr(s.value))
            return n.Store(s.buffer, value, index)
        if isinstance(s, n.IfThenElse):
            if uses_var(s.condition, [self.var]):
                raise _CannotVectorize
            return n.IfThenElse(s.condition, self.stmt(s.then_case),
                                None if s.else_case is None else self.stmt(s.else_case))
        raise _CannotVectorize

    def broadcast(self, e: n.PrimExpr) -> n.PrimExpr:
        return e if e.lanes == self.lanes else n.Broadcast(e, self.lanes)

    @staticmethod
    def _contiguous(index: n.PrimExpr) -> bool:
        return isinstance(index, n.Ramp) and as_int(simplify_expr(index.stride)) == 1

    def expr(self, e: n.PrimExpr) -> n.PrimExpr:
        if e is self.var:
            return self.ramp
        if isinstance(e, (n.Var, n.IntImm, n.FloatImm, n.StringImm)):
            return e
        if isinstance(e, n.Load):
            index = self.expr(e.index)
            predicate = None if e.predicate is None else self.expr(e.predicate)
            if index.lanes == 1 and (predicate is None or predicate.lanes == 1):
                return e if index is e.index and predicate is e.predicate else n.Load(e.buffer, index, predicate)
            if index.lanes == 1 or not self._contiguous(index):
                raise _CannotVectorize
            # a predicated contiguous load becomes a masked vector load
            return n.Load(e.buffer, index, None if predicate is None else self.broadcast(predicate))
        if isinstance(e, n.BinaryOp):
            a, b = self.expr(e.a), self.expr(e.b)
            if a.lanes == 1 and b.lanes == 1:
                return e if a is e.a and b is e.b else type(e)(a, b)
            if isinstance(e, (n.Add, n.Sub)):
                ramp = _ramp_arith(type(e), a, b)
                if ramp is not None:
                    return ramp
            if isinstance(e, n.Mul):
                for x, y in ((a, b), (b, a)):
                    if isinstance(x, n.Ramp) and y.lanes == 1:
                        return n.Ramp(n.Mul(x.base, y), n.Mul(x.stride, y), x.lanes_count)
            return type(e)(self.broadcast(a), self.broadcast(b))
        if isinstance(e, n.Select):
            # a Select evaluates both branches anyway (tir.Select), so lane-wise is as safe
            # as the scalar loop: loads a condition guards carry it as their predicate
            c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
            if c.lanes == 1 and t.lanes == 1 and f.lanes == 1:
                return n.Select(c, t, f)
            return n.Select(self.broadcast(c), self.broadcast(t), self.broadcast(f))
        if isinstance(e, n.Cast):
            v = self.expr(e.value)
            if v.lanes == 1:
                return e if v is e.value else n.Cast(e.dtype, v)
            return n.Cast(_with_lanes(e.dtype, self.lanes), v)
        if isinstance(e, n.Not):
            return n.Not(self.expr(e.a))
        if isinstance(e, n.Call):
            if e.dtype == "void":
                raise _CannotVectorize
            args = [self.expr(a) for a in e.args]
            if all(a.lanes == 1 for a in args):
                return e
            return n.Call(_with_lanes(e.dtype, self.lanes), e.name, tuple(self.broadcast(a) for a in args))
        if isinstance(e, (n.Ramp, n.Broadcast)):
            raise _CannotVectorize
        for name in child_fields(type(e)):
            value = getattr(e, name)
            if isinstance(value, n.PrimExpr) and uses_var(value, [self.var]):
                raise _CannotVectorize
        return e


def _ramp_arith(op, a, b):
    if isinstance(a, n.Ramp) and b.lanes == 1:
        return n.Ramp(op(a.base, b), a.stride, a.lanes_count)
    if isinstance(b, n.Ramp) and a.lanes == 1:
        stride = b.stride if op is n.Add else n.Sub(n.IntImm(b.stride.dtype, 0), b.stride)
        return n.Ramp(op(a, b.base), stride, b.lanes_count)
    if isinstance(a, n.Ramp) and isinstance(b, n.Ramp):
        return n.Ramp(op(a.base, b.base), op(a.stride, b.stride), a.lanes_count)
    return None


def _with_lanes(dtype: str, lanes: int) -> str:
    from ...ir.dtypes import with_lanes
    return with_lanes(dtype, lanes)
