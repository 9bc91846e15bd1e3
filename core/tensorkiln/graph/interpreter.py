"""Numpy reference interpreter: runs each op's `reference` in topological order.

    outputs = graph.evaluate(mod, {"x": x})   # one ndarray, or a list for a tuple result

This is the living spec every backend is compared with; it checks that each
reference result has the shape and dtype the type rule promised.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.dtypes import to_numpy
from ..ir.errors import DTypeError, InternalError, RuntimeLaunchError, ShapeError
from .expr import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, Var
from .traversal import count_users, free_vars, operands, post_order
from .types import TensorType, TupleType

__all__ = ["evaluate", "evaluate_call"]


def evaluate(mod_or_expr: Module | Expr, inputs: Mapping[str, Any] | None = None) -> Any:
    """Run `mod_or_expr` ("main" of a Module, a Function, or an expression over free vars).

    `inputs` maps variable names to arrays. Returns one ndarray for a tensor
    result, a list of ndarrays for a tuple result.
    """
    inputs = dict(inputs or {})
    if isinstance(mod_or_expr, Module):
        mod_or_expr = mod_or_expr.main
    if isinstance(mod_or_expr, Function):
        params, body = list(mod_or_expr.params), mod_or_expr.body
    else:
        params, body = free_vars(mod_or_expr), mod_or_expr
    bindings = {id(p): _check_input(p, inputs) for p in params}
    unknown = set(inputs) - {p.name for p in params}
    if unknown:
        raise RuntimeLaunchError(f"evaluate: unknown inputs {sorted(unknown)}; the inputs are "
                                 f"{[p.name for p in params]}")
    result = _run(body, bindings)
    return list(_flatten(result)) if isinstance(body.checked_type, TupleType) else result


def evaluate_call(call: Call, arg_values: list[Any]) -> Any:
    """Evaluate one Call on concrete argument values (used by constant folding)."""
    if isinstance(call.op, Function):
        bindings = {id(p): v for p, v in zip(call.op.params, arg_values)}
        return _run(call.op.body, bindings)
    try:
        with np.errstate(all="ignore"):
            value = call.op.reference(*arg_values, call.attrs)
    except (ShapeError, DTypeError):
        raise
    except Exception as error:  # a reference that crashes is our bug, shown with its node
        raise InternalError(f"reference of {call.op.name} failed: {type(error).__name__}: {error}\n"
                            f"  in {call.summary()}") from error
    return _conform(value, call.checked_type, call)


def _run(body: Expr, bindings: dict[int, Any]) -> Any:
    users = count_users(body)
    values: dict[int, Any] = dict(bindings)
    for node in post_order(body):
        if id(node) in values:
            continue
        if isinstance(node, Var):
            raise RuntimeLaunchError(f"evaluate: variable %{node.name} has no value")
        if isinstance(node, Constant):
            values[id(node)] = node.value
        elif isinstance(node, Call):
            values[id(node)] = evaluate_call(node, [values[id(a)] for a in node.args])
        elif isinstance(node, Tuple):
            values[id(node)] = tuple(values[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            values[id(node)] = values[id(node.tuple_value)][node.index]
        elif isinstance(node, Function):
            values[id(node)] = node
        else:
            raise InternalError(f"evaluate: unknown node {type(node).__name__}")
        for child in operands(node, into_functions=False):
            users[id(child)] -= 1
            if users[id(child)] == 0 and child is not body and id(child) not in bindings:
                values.pop(id(child), None)  # free intermediates as soon as their last user ran
    return values[id(body)]


def _check_input(param: Var, inputs: Mapping[str, Any]) -> np.ndarray:
    if param.name not in inputs:
        raise RuntimeLaunchError(f"evaluate: missing input {param.name!r} of type {param.checked_type}")
    value = np.asarray(inputs[param.name])
    expected = param.checked_type
    if not isinstance(expected, TensorType):
        return value
    if value.shape != expected.shape:
        raise ShapeError(f"evaluate: input {param.name!r} has shape {value.shape}, expected {expected.shape}")
    if value.dtype != to_numpy(expected.dtype):
        raise DTypeError(f"evaluate: input {param.name!r} has dtype {value.dtype}, expected {expected.dtype}")
    return value


def _conform(value: Any, expected, call: Call) -> Any:
    if isinstance(expected, TupleType):
        return tuple(_conform(v, t, call) for v, t in zip(value, expected.fields))
    array = np.asarray(value)
    if array.shape != expected.shape:
        raise InternalError(f"reference of {call.op.name} returned shape {array.shape}, but its type rule "
                            f"says {expected}\n  in {call.summary()}")
    dtype = to_numpy(expected.dtype)
    return array if array.dtype == dtype else array.astype(dtype)


def _flatten(value: Any):
    if isinstance(value, tuple):
        for item in value:
            yield from _flatten(item)
    else:
        yield value
