"""tests/tir/test_functor.py: the tir visitor base: dispatch by class name, MRO fallback, defaults, errors."""
from __future__ import annotations

import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import InternalError


def _program():
    """for i in 0..8: A[i] = min(A[i] + 1.0, B[i]) if i < 4"""
    A, B = tir.Buffer("A", (tir.const(8),)), tir.Buffer("B", (tir.const(8),))
    i = tir.Var("i")
    value = tir.Min(tir.Add(tir.Load(A, i), tir.const(1.0)), tir.Load(B, i))
    body = tir.IfThenElse(tir.LT(i, tir.const(4)), tir.Store(A, value, i))
    return tir.For(i, tir.const(0), tir.const(8), tir.ForKind.SERIAL, body)


class _Printer(tir.StmtFunctor, tir.ExprFunctor):
    """A tiny printer: one method per class, BinaryOp for every binary op, extra argument `depth`."""

    def visit_For(self, s, depth):
        return (f"{'  ' * depth}for {self.visit_expr(s.loop_var)} < {self.visit_expr(s.extent)}:\n"
                + self.visit_stmt(s.body, depth + 1))

    def visit_IfThenElse(self, s, depth):
        return f"{'  ' * depth}if {self.visit_expr(s.condition)}:\n" + self.visit_stmt(s.then_case, depth + 1)

    def visit_Store(self, s, depth):
        return f"{'  ' * depth}{s.buffer.name}[{self.visit_expr(s.index)}] = {self.visit_expr(s.value)}\n"

    def visit_BinaryOp(self, e):
        return f"({self.visit_expr(e.a)} {e.symbol} {self.visit_expr(e.b)})"

    def visit_Load(self, e):
        return f"{e.buffer.name}[{self.visit_expr(e.index)}]"

    def visit_Var(self, e):
        return e.name

    def visit_IntImm(self, e):
        return str(e.value)

    def visit_FloatImm(self, e):
        return repr(e.value)


def test_dispatch_by_class_name_passes_extra_arguments_and_falls_back_along_the_mro():
    text = _Printer().visit_stmt(_program(), 0)
    # Min, Add and LT have no method of their own: visit_BinaryOp handles them (LT via CompareOp's MRO)
    assert text == "for i < 8:\n  if (i < 4):\n    A[i] = ((A[i] + 1.0) min B[i])\n"


def test_a_subclass_of_a_node_type_uses_its_base_method_unless_it_has_its_own():
    class Saturate(tir.Add):
        """A plugin's node: saturating add."""

    class WithOwn(_Printer):
        def visit_Saturate(self, e):
            return f"sat({self.visit_expr(e.a)}, {self.visit_expr(e.b)})"

    node = Saturate(tir.Var("x"), tir.const(1))
    assert _Printer().visit_expr(node) == "(x + 1)"
    assert WithOwn().visit_expr(node) == "sat(x, 1)"
    # the cache is per visitor class: the first lookup does not leak into the subclass
    assert _Printer().visit_expr(node) == "(x + 1)"


def test_missing_method_names_the_node_class_and_the_visitor():
    with pytest.raises(InternalError, match=r"_Printer cannot visit a Select node: it defines none of visit_Select, "
                                            r"visit_PrimExpr; add a visit_Select method, or derive from "
                                            r"tir.StmtExprVisitor"):
        _Printer().visit_expr(tir.Select(tir.const(True), tir.const(1), tir.const(2)))
    with pytest.raises(InternalError, match=r"_Printer cannot visit a Barrier node: .*visit_Barrier, visit_Stmt"):
        _Printer().visit_stmt(tir.Barrier("shared"), 0)


def test_visit_default_can_be_overridden_for_a_visitor_specific_error():
    class Strict(tir.ExprFunctor):
        def visit_default(self, node):
            raise ValueError(f"strict: no {type(node).__name__}")

    with pytest.raises(ValueError, match="strict: no Var"):
        Strict().visit_expr(tir.Var("x"))


def test_stmt_expr_visitor_walks_every_child_by_default():
    seen = []

    class Loads(tir.StmtExprVisitor):
        def visit_Load(self, e):
            seen.append(e.buffer.name)
            self.generic_visit(e)

        def visit_Var(self, e):
            seen.append(e.name)

    Loads().visit_stmt(_program())
    # field order: For(loop_var, min, extent, ..., body), IfThenElse(condition, then), Store(value, index)
    assert seen == ["i", "i", "A", "i", "B", "i", "i"]


def test_stmt_expr_visitor_walks_tuples_and_skips_none():
    calls = []

    class Calls(tir.StmtExprVisitor):
        def visit_Call(self, e):
            calls.append(e.name)
            self.generic_visit(e)

    inner = tir.Call("float32", "exp", (tir.const(1.0),))
    seq = tir.SeqStmt((tir.Evaluate(tir.Call("void", "f", (inner, tir.const(2)))), tir.IfThenElse(
        tir.const(True), tir.Evaluate(tir.Call("void", "g", ())), None)))
    Calls().visit_stmt(seq)
    assert calls == ["f", "exp", "g"]
