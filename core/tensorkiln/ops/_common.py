"""ops/_common.py: helpers shared by the compute definitions.

Index arithmetic for broadcasting, axis normalization, accumulation dtypes and a
few expression builders (`select`, `math_call`) that every op family uses.
"""
from __future__ import annotations

from typing import Sequence

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n

__all__ = ["broadcast_indices", "normalize_axis", "accumulate_dtype", "select", "math_call", "const_like",
           "as_index", "ceil_div", "unravel", "ravel", "name_of", "is_float"]


def is_float(dtype: str) -> bool:
    return dtype_of(dtype).is_float


def name_of(op_name: str) -> str:
    """The te stage name for graph op `op_name`: "nn.conv2d" -> "T_conv2d"."""
    return "T_" + op_name.split(".")[-1]


def normalize_axis(axis: int, ndim: int) -> int:
    """Map a possibly negative axis into [0, ndim); the graph type rule already checked the range."""
    return axis % ndim if ndim else 0


def broadcast_indices(out_indices: Sequence, in_shape: Sequence[int], out_shape: Sequence[int]) -> tuple:
    """Indices into a tensor of `in_shape` that numpy-broadcasts to `out_shape`.

    Trailing axes line up; an input axis of size 1 against a larger output axis reads index 0.
    """
    offset = len(out_shape) - len(in_shape)
    result = []
    for axis, size in enumerate(in_shape):
        out_size = out_shape[axis + offset]
        result.append(0 if size == 1 and out_size != 1 else out_indices[axis + offset])
    return tuple(result)


def accumulate_dtype(dtype: str) -> str:
    """The dtype reductions accumulate in, as the numpy references do: float16 and bfloat16 in float32.

    Integer sums wrap identically in their own width (modular arithmetic), so they keep it.
    """
    return "float32" if dtype in ("float16", "bfloat16") else dtype


def const_like(value, dtype: str) -> n.PrimExpr:
    """An immediate of the element type of `dtype` (bool stays bool)."""
    parsed = dtype_of(dtype)
    if parsed.is_bool:
        return n.IntImm("bool", int(bool(value)))
    return n.const(float(value) if parsed.is_float else int(value), parsed.element)


def select(condition, true_value, false_value) -> n.PrimExpr:
    """`condition ? true_value : false_value` with Python numbers promoted to the other side's dtype."""
    return te.if_then_else(condition, true_value, false_value)


def as_index(expr) -> n.PrimExpr:
    """An int32 index expression (tensor indices are int32 loop variables)."""
    expr = n.as_expr(expr, "int32")
    return expr if expr.dtype == "int32" else n.Cast("int32", expr)


def ceil_div(a, b: int) -> n.PrimExpr:
    """Integer ceil(a / b) for any sign of a, b > 0, built from floor division."""
    return -((-n.as_expr(a, "int32")) // b) if isinstance(a, n.PrimExpr) else -((-a) // b)


def unravel(flat, shape: Sequence[int]) -> tuple:
    """Row-major multi-index of a flat index into `shape`."""
    indices = []
    for size in reversed(shape):
        indices.append(flat % size if size != 1 else 0)
        flat = flat // size if size != 1 else flat
    return tuple(reversed(indices))


def ravel(indices: Sequence, shape: Sequence[int]):
    """Row-major flat index of `indices` into `shape`."""
    flat = 0
    for index, size in zip(indices, shape):
        flat = flat * size + index if not (isinstance(flat, int) and flat == 0) else index
    return flat


def math_call(name: str, x) -> n.PrimExpr:
    """`name(x)` for a float expression: te's function when it has one, else tir.Call(name).

    Names outside te.MATH_FUNCTIONS are built as tir.Call directly; only emitters that know
    the name by themselves can compile them, and the tir interpreter cannot run them.
    """
    function = getattr(te, name, None) if name in te.MATH_FUNCTIONS else None
    if function is not None:
        return function(x)
    x = n.as_expr(x, "float32")
    return n.Call(x.dtype, name, (x,))
