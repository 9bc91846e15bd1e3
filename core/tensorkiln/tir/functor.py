"""tir/functor.py: the visitor base of loop IR, shared by every emitter and interpreter.

In the style of TVM's ExprFunctor / StmtFunctor: `visit_expr(node, ...)` and
`visit_stmt(node, ...)` call the method named after the node's class,
`visit_<ClassName>(node, ...)`, passing any extra arguments through::

    class CountLoads(tir.StmtExprVisitor):
        def __init__(self):
            self.loads = 0

        def visit_Load(self, node):
            self.loads += 1
            self.generic_visit(node)    # still visit the index and predicate

    counter = CountLoads()
    counter.visit_stmt(func.body)

Dispatch walks the node class's MRO, so `visit_BinaryOp` handles every binary op
without its own method (`Add`, `Min`, ...) and a plugin's subclass of a node type is
handled as its base; the method found is cached per (visitor class, node class).
When no class in the MRO has a method, `visit_default` runs: `ExprFunctor` and
`StmtFunctor` raise an `InternalError` naming the node class and the visitor (an
emitter overrides it with its own error), `StmtExprVisitor` visits the children.
"""
from __future__ import annotations

from typing import Any

from ..ir.errors import InternalError
from . import nodes as n
from .visit import child_fields

__all__ = ["ExprFunctor", "StmtFunctor", "StmtExprVisitor"]

# (visitor class, node class) -> name of the method that visits it ("visit_default" when none)
_METHODS: dict[tuple[type, type], str] = {}


def _find_method(visitor_class: type, node_class: type) -> str:
    found = "visit_default"
    for base in node_class.__mro__:
        if base is object:
            break
        name = f"visit_{base.__name__}"
        if hasattr(visitor_class, name):
            found = name
            break
    _METHODS[visitor_class, node_class] = found
    return found


class _Functor:
    """The error for nodes without a method; shared by ExprFunctor and StmtFunctor."""

    def visit_default(self, node, *args, **kwargs) -> Any:
        """Called for a node whose class (and bases) has no `visit_<ClassName>` method."""
        searched = ", ".join(f"visit_{c.__name__}" for c in type(node).__mro__ if c is not object)
        raise InternalError(
            f"{type(self).__name__} cannot visit a {type(node).__name__} node: it defines none of {searched}; "
            f"add a visit_{type(node).__name__} method, or derive from tir.StmtExprVisitor to visit its "
            f"children by default\n  node: {node}")


class ExprFunctor(_Functor):
    """Base of visitors of tir expressions: `visit_expr(e, *args)` -> `visit_<ClassName>(e, *args)`.

    Subclasses define one method per expression class they handle (or per base class:
    `visit_BinaryOp`, `visit_CompareOp`); the result of the method is returned.
    """

    def visit_expr(self, expr: n.PrimExpr, *args, **kwargs) -> Any:
        try:
            name = _METHODS[type(self), type(expr)]
        except KeyError:
            name = _find_method(type(self), type(expr))
        return getattr(self, name)(expr, *args, **kwargs)


class StmtFunctor(_Functor):
    """Base of visitors of tir statements: `visit_stmt(s, *args)` -> `visit_<ClassName>(s, *args)`."""

    def visit_stmt(self, stmt: n.Stmt, *args, **kwargs) -> Any:
        try:
            name = _METHODS[type(self), type(stmt)]
        except KeyError:
            name = _find_method(type(self), type(stmt))
        return getattr(self, name)(stmt, *args, **kwargs)


class StmtExprVisitor(ExprFunctor, StmtFunctor):
    """Visits statements and expressions; nodes without a `visit_<ClassName>` visit their children.

    Children are the node's fields holding a Stmt or a PrimExpr (or a tuple of them),
    visited in field order with the same extra arguments; Buffers (shapes, strides)
    are not entered. Override `visit_<ClassName>` for the nodes you care about and
    call `self.generic_visit(node)` from it to keep walking below them.
    """

    def visit_default(self, node, *args, **kwargs) -> None:
        self.generic_visit(node, *args, **kwargs)

    def generic_visit(self, node, *args, **kwargs) -> None:
        """Visit every child of `node` (statements with visit_stmt, expressions with visit_expr)."""
        for name in child_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, tuple):
                for item in value:
                    self._visit_child(item, args, kwargs)
            else:
                self._visit_child(value, args, kwargs)

    def _visit_child(self, value, args, kwargs) -> None:
        if isinstance(value, n.Stmt):
            self.visit_stmt(value, *args, **kwargs)
        elif isinstance(value, n.PrimExpr):
            self.visit_expr(value, *args, **kwargs)
