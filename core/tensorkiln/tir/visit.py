"""tir/visit.py: generic traversal and rewriting of loop IR (and te expression nodes).

Nodes are frozen dataclasses; children are the fields holding a PrimExpr, a Stmt, or
a tuple of them. A node class may list fields that are not children in
`_opaque_fields` (te's Reduce keeps its IterVars there). Rewrites are memoized per
call, so shared subtrees stay shared, and a rewrite that changes nothing returns the
same object.
"""
from __future__ import annotations

import dataclasses
from typing import Callable

from . import nodes as n

__all__ = ["child_fields", "rewrite", "substitute", "post_order_visit", "collect_vars", "uses_var",
           "expr_key"]

_FIELDS: dict[type, tuple[str, ...]] = {}


def child_fields(cls: type) -> tuple[str, ...]:
    """Names of the dataclass fields of `cls` that may hold child nodes."""
    names = _FIELDS.get(cls)
    if names is None:
        opaque = set(getattr(cls, "_opaque_fields", ()))
        names = tuple(f.name for f in dataclasses.fields(cls) if f.name not in opaque)
        _FIELDS[cls] = names
    return names


def _is_node(value) -> bool:
    return isinstance(value, (n.PrimExpr, n.Stmt))


_SCALAR_ANNOTATIONS = frozenset({"str", "int", "float", "bool", "str | None", "int | None", "ForKind",
                                 "tuple[str, ...]", "tuple[tuple[str, object], ...]"})
_WALKED: dict[type, tuple[str, ...]] = {}
_REBUILD: dict[type, tuple[str, ...] | None] = {}


def _walked_fields(cls: type) -> tuple[str, ...]:
    """The child fields of `cls` that a walk must look into: those whose declared type can hold a node.

    A name, a dtype string or a lane count never holds one; skipping them halves the isinstance
    tests of rewrite and post_order_visit, which every loop pass runs on every node."""
    names = _WALKED.get(cls)
    if names is None:
        declared = {f.name: f.type for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
        names = tuple(name for name in child_fields(cls) if declared.get(name) not in _SCALAR_ANNOTATIONS)
        _WALKED[cls] = names
    return names


def _rebuilt(node, changes: dict):
    """`node` with the fields in `changes` replaced: the constructor called with every field in order,
    which is dataclasses.replace without its per-call checks of the field list (a fifth of rewrite's time)."""
    cls = type(node)
    names = _REBUILD.get(cls, ())
    if names == ():
        fields = dataclasses.fields(cls)
        names = tuple(f.name for f in fields) if all(f.init for f in fields) else None
        _REBUILD[cls] = names
    if names is None:
        return dataclasses.replace(node, **changes)
    return cls(*[changes[name] if name in changes else getattr(node, name) for name in names])


Visitor = Callable[[object], object | None]


def rewrite(node, pre: Visitor | None = None, post: Visitor | None = None, memo: dict | None = None):
    """Rewrite a tree of exprs/stmts.

    `pre(node)` runs before the children: a non-None result replaces the node and is
    not visited further. `post(node)` runs after the children were rewritten: a
    non-None result replaces the (rebuilt) node.

    `memo` (id(node) -> (node, result)): results kept from earlier rewrites with the same
    `pre` and `post`, which this one reuses and adds to (a subtree shared by several trees is
    rewritten once); by default each call has its own.
    """
    if memo is None:
        memo = {}
    walked, node_types = _WALKED, (n.PrimExpr, n.Stmt)

    def visit(node):
        key = id(node)
        hit = memo.get(key)
        if hit is not None:
            return hit[1]
        if pre is not None:
            replaced = pre(node)
            if replaced is not None:
                memo[key] = (node, replaced)
                return replaced
        changes = None
        names = walked.get(type(node))
        for name in names if names is not None else _walked_fields(type(node)):
            value = getattr(node, name)
            if isinstance(value, node_types):
                new = visit(value)
                if new is not value:
                    if changes is None:
                        changes = {}
                    changes[name] = new
            elif type(value) is tuple and value:
                new_items = tuple(visit(v) if isinstance(v, node_types) else v for v in value)
                if any(a is not b for a, b in zip(new_items, value)):
                    if changes is None:
                        changes = {}
                    changes[name] = new_items
        result = _rebuilt(node, changes) if changes else node
        if post is not None:
            replaced = post(result)
            if replaced is not None:
                result = replaced
        memo[key] = (node, result)
        return result

    try:
        return visit(node)
    finally:
        # `visit` refers to itself through its closure: without this the cycle (and the memo of
        # every node it rewrote) waited for the cyclic GC, a third of whose compile-time work it was
        del visit


def substitute(node, mapping: dict):
    """Replace Vars (by identity) with expressions; returns the same object if none occur."""
    if not mapping:
        return node
    return rewrite(node, pre=lambda x: mapping.get(x) if isinstance(x, n.Var) else None)


def post_order_visit(node, fn: Callable[[object], None]) -> None:
    """Call fn on every node once, children first."""
    seen: set[int] = set()

    def visit(node):
        if id(node) in seen:
            return
        seen.add(id(node))
        names = _WALKED.get(type(node))
        for name in names if names is not None else _walked_fields(type(node)):
            value = getattr(node, name)
            if _is_node(value):
                visit(value)
            elif type(value) is tuple:
                for v in value:
                    if _is_node(v):
                        visit(v)
        fn(node)

    try:
        visit(node)
    finally:
        del visit   # break the self-reference (see rewrite)


def collect_vars(node) -> list[n.Var]:
    """Vars used in `node`, in order of first appearance."""
    found: dict[int, n.Var] = {}

    def fn(x):
        if isinstance(x, n.Var):
            found.setdefault(id(x), x)
    post_order_visit(node, fn)
    return list(found.values())


def uses_var(node, variables) -> bool:
    ids = {id(v) for v in variables}
    return any(id(v) in ids for v in collect_vars(node))


_NO_DICT: dict = {}


def expr_key(e) -> tuple:
    """A hashable key equal for structurally equal exprs (Vars and Buffers by identity)."""
    # Nodes are immutable, so the key is computed once per node and kept on it: the
    # simplifier compares keys of whole subtrees after every rule, which re-walked deep
    # index expressions each time (a quarter of te.lower's time on a CNN). Looked up first:
    # most calls are for a node whose key is known.
    cached = getattr(e, "__dict__", _NO_DICT).get("_expr_key")
    if cached is not None:
        return cached
    if isinstance(e, n.Var):
        return ("Var", id(e))
    if isinstance(e, n.IntImm):
        return ("Int", e.dtype, e.value)
    if isinstance(e, n.FloatImm):
        return ("Float", e.dtype, e.value)
    if isinstance(e, n.Buffer):
        return ("Buffer", id(e))
    if isinstance(e, (n.PrimExpr, n.Stmt)):
        parts: list = [type(e).__name__, getattr(e, "dtype", None)]
        for name in child_fields(type(e)):
            value = getattr(e, name)
            if isinstance(value, tuple):
                parts.append(tuple(expr_key(v) for v in value))
            else:
                parts.append(expr_key(value))
        key = tuple(parts)
        object.__setattr__(e, "_expr_key", key)
        return key
    if isinstance(e, (int, float, str, bool, type(None))):
        return ("lit", e)
    return ("obj", id(e))
