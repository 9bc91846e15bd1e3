"""Text form of graph IR, SSA style:

    fn main(%x: float32(1, 3, 224, 224)) -> float32(1, 64, 112, 112) {
      %0 = nn.conv2d(%x, const(float32(64, 3, 7, 7)), strides=(2, 2), padding=(3, 3, 3, 3))  # float32(1, 64, 112, 112)
      %1 = nn.relu(%0)  # float32(1, 64, 112, 112)
      %1
    }
"""
from __future__ import annotations

import re

import numpy as np

from .expr import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, Var

__all__ = ["print_module", "print_expr", "summarize", "workload_text"]

_INLINE_ELEMENTS = 8


def print_module(mod: Module) -> str:
    return "\n".join(_print_function(name, function) for name, function in mod)


def print_expr(expr: Expr) -> str:
    if isinstance(expr, Function):
        return _print_function("", expr)
    return _print_function("", expr, as_body=True)


def summarize(expr: Expr) -> str:
    """One line for error messages: `%out = nn.conv2d(%a: float32(1, 3, 8, 8), ...)`."""
    if isinstance(expr, Call):
        args = ", ".join(_operand_summary(a) for a in expr.args)
        attrs = _attrs_text(expr)
        origin = f"  (from ONNX node {expr.span!r})" if expr.span else ""
        return f"{_op_name(expr)}({args}{attrs}){origin}"
    if isinstance(expr, Var):
        return f"%{expr.name}: {expr.checked_type}"
    if isinstance(expr, Constant):
        return _constant_text(expr)
    if isinstance(expr, TupleGetItem):
        return f"{_operand_summary(expr.tuple_value)}.{expr.index}"
    if isinstance(expr, Tuple):
        return f"({', '.join(_operand_summary(f) for f in expr.fields)})"
    return type(expr).__name__


def _operand_summary(expr: Expr) -> str:
    if isinstance(expr, Var):
        return f"%{expr.name}: {expr.checked_type}"
    if isinstance(expr, Constant):
        return _constant_text(expr)
    text = getattr(expr, "checked_type", None)
    kind = _op_name(expr) if isinstance(expr, Call) else type(expr).__name__
    return f"<{kind}: {text}>"


def _print_function(name: str, function: Expr, as_body: bool = False) -> str:
    from .traversal import post_order
    names: dict[int, str] = {}
    lines: list[str] = []
    counter = 0
    body = function if as_body else function.body
    if not as_body:
        for param in function.params:
            names[id(param)] = f"%{param.name}"
    for node in post_order(body):
        if id(node) in names:
            continue
        if isinstance(node, Var):
            names[id(node)] = f"%{node.name}"
            continue
        if isinstance(node, Constant):
            names[id(node)] = _constant_text(node)
            continue
        if isinstance(node, Function):
            text = _print_function("", node).replace("\n", "\n  ")
            names[id(node)] = f"%{counter}"
            lines.append(f"  %{counter} = {text}")
            counter += 1
            continue
        if isinstance(node, Call):
            args = ", ".join(names[id(a)] for a in node.args)
            op = names[id(node.op)] if isinstance(node.op, Function) else node.op.name
            text = f"{op}({args}{_attrs_text(node)})"
        elif isinstance(node, Tuple):
            text = f"({', '.join(names[id(f)] for f in node.fields)}{',' if len(node.fields) == 1 else ''})"
        elif isinstance(node, TupleGetItem):
            text = f"{names[id(node.tuple_value)]}.{node.index}"
        else:
            text = type(node).__name__
        names[id(node)] = f"%{counter}"
        lines.append(f"  %{counter} = {text}  # {node.checked_type}")
        counter += 1
    lines.append(f"  {names[id(body)]}")
    if as_body:
        return "\n".join(line[2:] for line in lines)
    params = ", ".join(f"%{p.name}: {p.checked_type}" for p in function.params)
    attrs = "".join(f" {k}={v!r}" for k, v in function.attrs)
    header = f"fn {name}({params}) -> {function.ret_type}{attrs} {{" if name else f"fn ({params}) -> {function.ret_type}{attrs} {{"
    return "\n".join([header, *lines, "}"])


def _op_name(call: Call) -> str:
    return call.op.name if not isinstance(call.op, Function) else "fn"


def _attrs_text(call: Call) -> str:
    items = call.attrs.non_default_items()
    return "".join(f", {k}={_value_text(v)}" for k, v in items)


def _value_text(value) -> str:
    if isinstance(value, tuple):
        inner = ", ".join(_value_text(v) for v in value)
        return f"({inner}{',' if len(value) == 1 else ''})"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, Function):   # a control-flow body (if, loop, scan), printed nested
        return _print_function("", value).replace("\n", "\n  ")
    return repr(value)


def _constant_text(const: Constant) -> str:
    value = const.value
    if value.size <= _INLINE_ELEMENTS:
        if value.ndim == 0:
            return f"{value.item()!r}{_suffix(value.dtype)}"
        body = np.array2string(value, separator=", ").replace("\n", "")
        return f"const({body}, {const.checked_type.dtype})"
    return f"const({const.checked_type})"


def _suffix(dtype: np.dtype) -> str:
    return {"float32": "f", "float64": "f64", "float16": "f16", "int64": "i64", "int32": "i32",
            "bool": ""}.get(np.dtype(dtype).name, f"_{np.dtype(dtype).name}")


def workload_text(function: Function) -> str:
    """A group function's text with its parameters named %__p0, %__p1, ... by position (names differ between
    models): what a tuning record and a lowered group are keyed by (tune/workload.py, compiler/lowering_cache.py)."""
    text = print_expr(function)
    for index, param in enumerate(function.params):
        text = re.sub(rf"%{re.escape(param.name)}\b", f"%__p{index}", text)
    return text
