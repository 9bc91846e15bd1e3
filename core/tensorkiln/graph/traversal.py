"""Walking and rewriting graphs without recursion.

- `post_order(expr)`: every node once, operands before users (a topological order).
- `free_vars(expr)`: variables used but not bound, in first-use order.
- `rewrite(mod_or_expr, fn)`: post-order, memoized rebuild; `fn(node)` returns a
  replacement or None to keep the (operand-updated) node.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Iterator, TypeVar

from .expr import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, Var

__all__ = ["post_order", "topological_order", "free_vars", "rewrite", "operands", "count_users", "with_operands"]

T = TypeVar("T", Expr, Module)


def operands(node: Expr, into_functions: bool = True) -> tuple[Expr, ...]:
    """The direct operands of `node` (a Call's function op counts when `into_functions`)."""
    if isinstance(node, Call):
        if isinstance(node.op, Function) and into_functions:
            return (node.op, *node.args)
        return node.args
    if isinstance(node, Tuple):
        return node.fields
    if isinstance(node, TupleGetItem):
        return (node.tuple_value,)
    if isinstance(node, Function):
        return (node.body,) if into_functions else ()
    return ()


def post_order(expr: Expr, into_functions: bool = False) -> Iterator[Expr]:
    """Yield each node reachable from `expr` once, operands first (iterative DFS).

    A nested function (the op of a Call, e.g. a fused group) and its body are
    visited only when `into_functions` is True; a root Function is always entered.
    """
    visited: set[int] = set()
    stack: list[tuple[Expr, bool]] = [(expr, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            yield node
            continue
        if id(node) in visited:
            continue
        visited.add(id(node))
        stack.append((node, True))
        children = operands(node, into_functions or node is expr)
        for child in reversed(children):
            if id(child) not in visited:
                stack.append((child, False))


topological_order = post_order


def free_vars(expr: Expr) -> list[Var]:
    """Variables used in `expr` and not bound by an enclosing Function, in first-use order."""
    bound: set[int] = set()
    for node in post_order(expr, into_functions=True):
        if isinstance(node, Function):
            bound.update(id(p) for p in node.params)
    seen: list[Var] = []
    seen_ids: set[int] = set()
    for node in post_order(expr, into_functions=True):
        if isinstance(node, Var) and id(node) not in bound and id(node) not in seen_ids:
            seen_ids.add(id(node))
            seen.append(node)
    return seen


def count_users(expr: Expr) -> dict[int, int]:
    """id(node) -> number of operand slots that use it (for memory release and fusion)."""
    users: dict[int, int] = {}
    for node in post_order(expr):
        for child in operands(node, into_functions=False):
            users[id(child)] = users.get(id(child), 0) + 1
    return users


def rewrite(mod_or_expr: T, fn: Callable[[Expr], Expr | None], into_functions: bool = False) -> T:
    """Rebuild bottom-up: each node first gets its rewritten operands, then `fn` may replace it.

    Memoized by node identity, so shared subgraphs are rewritten once and stay
    shared. A node whose operands did not change and that `fn` keeps is returned
    as the same object, so a rewrite that changes nothing returns its input.
    Replacements are not visited again. A Module is rewritten function by function.
    """
    if isinstance(mod_or_expr, Module):
        functions = tuple((name, rewrite(function, fn, into_functions)) for name, function in mod_or_expr)
        if all(new is old for (_, new), (_, old) in zip(functions, mod_or_expr.functions)):
            return mod_or_expr
        return Module(functions)
    memo: dict[int, Expr] = {}
    for node in post_order(mod_or_expr, into_functions):
        rebuilt = with_operands(node, memo, into_functions or node is mod_or_expr)
        replacement = fn(rebuilt)
        memo[id(node)] = rebuilt if replacement is None else replacement
    return memo[id(mod_or_expr)]


def with_operands(node: Expr, memo: dict[int, Expr], into_functions: bool) -> Expr:
    """`node` rebuilt with each operand replaced by memo[id(operand)] when present (same object if none)."""
    def new(child: Expr) -> Expr:
        return memo.get(id(child), child)

    if isinstance(node, (Var, Constant)):
        return node
    if isinstance(node, Call):
        op = new(node.op) if isinstance(node.op, Function) and into_functions else node.op
        args = tuple(new(a) for a in node.args)
        if op is node.op and all(a is b for a, b in zip(args, node.args)):
            return node
        return dataclasses.replace(node, op=op, args=args)
    if isinstance(node, Tuple):
        fields = tuple(new(f) for f in node.fields)
        return node if all(a is b for a, b in zip(fields, node.fields)) else Tuple(fields)
    if isinstance(node, TupleGetItem):
        value = new(node.tuple_value)
        return node if value is node.tuple_value else TupleGetItem(value, node.index)
    if isinstance(node, Function):
        if not into_functions:
            return node
        body = new(node.body)
        params = tuple(p2 if isinstance(p2 := new(p), Var) else p for p in node.params)
        if body is node.body and all(a is b for a, b in zip(params, node.params)):
            return node
        return Function(params, body, node.attrs)
    raise TypeError(f"rewrite: unknown node type {type(node).__name__}")


_with_operands = with_operands  # older name, still used by some passes
