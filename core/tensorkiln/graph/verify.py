"""Well-formedness checks for graph IR, run by the pass manager after each pass (verify=True).

`verify_module(mod)` raises InternalError (a pass produced bad IR) naming the
function, the problem and the IR; it returns None when the module is sound.
"""
from __future__ import annotations

from ..ir.errors import InternalError
from .expr import Call, Function, Module, Var
from .registry import Op, get_op
from .traversal import free_vars, post_order

__all__ = ["verify_module"]


def verify_module(mod: Module) -> None:
    """Check every function: no free variables, unique parameters, registered ops, types consistent."""
    if not isinstance(mod, Module):
        raise InternalError(f"expected a graph Module, got {type(mod).__name__}")
    if "main" not in mod:
        raise InternalError(f"module has no 'main' function:\n{mod}")
    for name, function in mod:
        _verify_function(name, function, mod)


def _verify_function(name: str, function: Function, mod: Module) -> None:
    params = function.params
    if len({id(p) for p in params}) != len(params):
        raise InternalError(f"function {name!r} lists a parameter twice:\n{mod}")
    unbound = free_vars(function)
    if unbound:
        raise InternalError(f"function {name!r} uses unbound variables {[v.name for v in unbound]}; a pass "
                            f"dropped or replaced a parameter:\n{mod}")
    for node in post_order(function, into_functions=True):
        if isinstance(node, Call) and isinstance(node.op, Op):
            if get_op(node.op.name) is not node.op:
                raise InternalError(f"function {name!r} calls an unregistered op record {node.op.name!r}:\n{mod}")
            expected = node.op.type_rule(tuple(a.checked_type for a in node.args), node.attrs)
            if expected != node.checked_type:
                raise InternalError(f"function {name!r}: {node.summary()} has type {node.checked_type}, but its "
                                    f"type rule now gives {expected}:\n{mod}")
