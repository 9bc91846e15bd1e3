"""tir/verify.py: well-formedness checks for loop IR, run after each loop pass (verify=True).

`verify_prim_func(func)` returns None when `func` is sound and raises InternalError
(a pass produced bad IR) naming the kernel, the problem and showing the IR:
  - every variable the body uses is bound (a parameter, a parameter buffer's
    shape, a loop variable or a let);
  - every buffer the body reads, writes or points into is a parameter or is
    allocated by an Allocate;
  - a Store's value has the buffer's element type and its index's lane count.
The checks are not scoped: a variable bound anywhere in the kernel counts as bound.
"""
from __future__ import annotations

from ..ir.dtypes import dtype_of
from ..ir.errors import InternalError
from . import nodes as n
from .visit import collect_vars, post_order_visit

__all__ = ["verify_prim_func"]


def verify_prim_func(func: n.PrimFunc) -> None:
    """Check that `func` is a well-formed PrimFunc (see the module docstring)."""
    if not isinstance(func, n.PrimFunc):
        raise InternalError(f"expected a tir.PrimFunc, got {type(func).__name__}")
    if len({id(p) for p in func.params}) != len(func.params):
        raise InternalError(f"kernel {func.name!r} lists a parameter twice:\n{func}")
    bound: set[int] = set()
    buffers: set[int] = set()
    for param in func.params:
        if isinstance(param, n.Var):
            bound.add(id(param))
        else:
            buffers.add(id(param))
            bound.update(id(v) for v in _buffer_vars(param))
    used: dict[int, n.Var] = {}
    accessed: dict[int, n.Buffer] = {}
    bad_stores: list[n.Store] = []

    def visit(node) -> None:
        if isinstance(node, n.Var):
            used.setdefault(id(node), node)
        elif isinstance(node, n.For):
            bound.add(id(node.loop_var))
        elif isinstance(node, n.LetStmt):
            bound.add(id(node.var))
        elif isinstance(node, n.Allocate):
            buffers.add(id(node.buffer))
        elif isinstance(node, (n.Load, n.BufferPointer)):
            accessed.setdefault(id(node.buffer), node.buffer)
        elif isinstance(node, n.Store):
            accessed.setdefault(id(node.buffer), node.buffer)
            if not _store_types_match(node):
                bad_stores.append(node)

    post_order_visit(func.body, visit)
    unbound = sorted({v.name for key, v in used.items() if key not in bound})
    if unbound:
        raise InternalError(f"kernel {func.name!r} uses unbound variables {unbound}; a pass dropped the loop "
                            f"or let that binds them:\n{func}")
    undeclared = sorted({b.name for key, b in accessed.items() if key not in buffers})
    if undeclared:
        raise InternalError(f"kernel {func.name!r} accesses buffers {undeclared} that are neither parameters "
                            f"nor allocated:\n{func}")
    if bad_stores:
        store = bad_stores[0]
        raise InternalError(f"kernel {func.name!r}: store into {store.buffer.name} ({store.buffer.dtype}) of a "
                            f"{store.value.dtype} value at a {store.index.dtype} index:\n{func}")


def _buffer_vars(buffer: n.Buffer) -> list[n.Var]:
    exprs = [*buffer.shape, *(buffer.strides or ()), *([buffer.elem_offset] if buffer.elem_offset is not None else [])]
    return [v for e in exprs if isinstance(e, n.PrimExpr) for v in collect_vars(e)]


def _store_types_match(store: n.Store) -> bool:
    value, buffer = dtype_of(store.value.dtype), dtype_of(store.buffer.dtype)
    return value.element == buffer.element and value.lanes == store.index.lanes
