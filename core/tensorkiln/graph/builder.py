"""Builder API for graph IR, in the spirit of TVM relay:

    x = graph.var("x", shape=(1, 3, 224, 224), dtype="float32")
    y = graph.nn.relu(graph.nn.conv2d(x, graph.const(w), strides=(2, 2), padding=(3, 3)))
    mod = graph.Module.from_expr(y)

Each function builds one typed Call; keyword arguments become the op's attrs.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..ir.dtypes import from_numpy, to_numpy
from .attrs import Attrs
from .expr import Call, Constant, Expr, Tuple, TupleGetItem, Var
from .registry import get_op
from .types import TensorType

__all__ = [
    "var", "const", "call", "tuple_", "add", "subtract", "multiply", "divide", "power", "maximum", "minimum",
    "mod", "fmod", "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
    "logical_or", "logical_xor", "logical_not", "where", "cast", "sqrt", "rsqrt", "exp", "log", "abs", "negative",
    "floor", "ceil", "round", "sign", "reciprocal", "sigmoid", "tanh", "erf", "sin", "cos", "clip",
    "sum", "mean", "max", "min", "prod", "argmax", "argmin", "concatenate", "split", "reshape", "transpose",
    "squeeze", "expand_dims", "strided_slice", "take", "gather_elements", "gather_nd", "broadcast_to", "tile",
    "reverse", "cumsum", "shape_of", "topk", "resize",
]


def var(name: str, shape: Sequence[int] = (), dtype: str = "float32", type_annotation=None) -> Var:
    """A graph input: var("x", shape=(1, 3, 224, 224), dtype="float32")."""
    return Var(name, type_annotation or TensorType(tuple(shape), dtype))


def const(value: Any, dtype: str | None = None) -> Constant:
    """A constant from a numpy array, list or scalar; Python floats become float32 unless `dtype` says otherwise."""
    if isinstance(value, np.ndarray):
        array = value if dtype is None else value.astype(to_numpy(dtype))
    else:
        array = np.asarray(value)
        if dtype is not None:
            array = array.astype(to_numpy(dtype))
        elif array.dtype == np.float64:
            array = array.astype(np.float32)
    from_numpy(array.dtype)
    return Constant(array)


def call(op_name: str, *args: Expr, attrs: Attrs | None = None, span: str | None = None, **kwargs: Any) -> Call:
    """Build a Call of registered op `op_name`; keyword arguments become its attrs."""
    op = get_op(op_name)
    return Call(op, tuple(args), op.make_attrs(attrs, **kwargs), span)


def tuple_(*fields: Expr) -> Tuple:
    return Tuple(tuple(fields))


def _binary(name: str):
    def build(lhs: Expr, rhs: Expr) -> Call:
        return call(name, *_as_exprs(lhs, rhs))
    build.__name__ = name
    build.__doc__ = f"{name}(lhs, rhs) with numpy broadcasting."
    return build


def _as_exprs(lhs: Any, rhs: Any) -> tuple[Expr, Expr]:
    if not isinstance(lhs, Expr):
        lhs = const(np.asarray(lhs, dtype=to_numpy(rhs.dtype)))
    if not isinstance(rhs, Expr):
        rhs = const(np.asarray(rhs, dtype=to_numpy(lhs.dtype)))
    return lhs, rhs


def _unary(name: str):
    def build(data: Expr) -> Call:
        return call(name, data)
    build.__name__ = name.split(".")[-1]
    build.__doc__ = f"{name}(data), elementwise."
    return build


add, subtract, multiply, divide = _binary("add"), _binary("subtract"), _binary("multiply"), _binary("divide")
power, maximum, minimum, mod, fmod = _binary("power"), _binary("maximum"), _binary("minimum"), _binary("mod"), _binary("fmod")
equal, not_equal, less, less_equal = _binary("equal"), _binary("not_equal"), _binary("less"), _binary("less_equal")
greater, greater_equal = _binary("greater"), _binary("greater_equal")
logical_and, logical_or, logical_xor = _binary("logical_and"), _binary("logical_or"), _binary("logical_xor")
logical_not = _unary("logical_not")
sqrt, rsqrt, exp, log, abs = _unary("sqrt"), _unary("rsqrt"), _unary("exp"), _unary("log"), _unary("abs")
negative, floor, ceil, round, sign = _unary("negative"), _unary("floor"), _unary("ceil"), _unary("round"), _unary("sign")
reciprocal, sigmoid, tanh, erf = _unary("reciprocal"), _unary("sigmoid"), _unary("tanh"), _unary("erf")
sin, cos = _unary("sin"), _unary("cos")


def where(condition: Expr, x: Expr, y: Expr) -> Call:
    return call("where", condition, x, y)


def cast(data: Expr, dtype: str) -> Call:
    return call("cast", data, dtype=dtype)


def clip(data: Expr, a_min: float | None = None, a_max: float | None = None) -> Call:
    return call("clip", data, a_min=a_min, a_max=a_max)


def _reduce(name: str):
    def build(data: Expr, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Call:
        axes = (axis,) if isinstance(axis, int) else (None if axis is None else tuple(axis))
        return call(name, data, axis=axes, keepdims=keepdims)
    build.__name__ = name
    build.__doc__ = f"{name} over `axis` (None: all axes)."
    return build


sum, mean, max, min, prod = _reduce("sum"), _reduce("mean"), _reduce("max"), _reduce("min"), _reduce("prod")


def argmax(data: Expr, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> Call:
    return call("argmax", data, axis=axis, keepdims=keepdims, select_last_index=select_last_index)


def argmin(data: Expr, axis: int = 0, keepdims: bool = True, select_last_index: bool = False) -> Call:
    return call("argmin", data, axis=axis, keepdims=keepdims, select_last_index=select_last_index)


def concatenate(data: Sequence[Expr], axis: int = 0) -> Call:
    return call("concatenate", *data, axis=axis)


def split(data: Expr, indices_or_sections: int | Sequence[int], axis: int = 0) -> Tuple:
    """Split into parts; returns a Tuple of TupleGetItems (index it, or use it as a tuple)."""
    sections = indices_or_sections if isinstance(indices_or_sections, int) else tuple(indices_or_sections)
    result = call("split", data, indices_or_sections=sections, axis=axis)
    return Tuple(tuple(TupleGetItem(result, i) for i in range(len(result.checked_type.fields))))


def reshape(data: Expr, newshape: Sequence[int]) -> Call:
    return call("reshape", data, newshape=tuple(newshape))


def transpose(data: Expr, axes: Sequence[int] | None = None) -> Call:
    return call("transpose", data, axes=None if axes is None else tuple(axes))


def squeeze(data: Expr, axis: Sequence[int] | None = None) -> Call:
    return call("squeeze", data, axis=None if axis is None else tuple(axis))


def expand_dims(data: Expr, axis: int, num_newaxis: int = 1) -> Call:
    return call("expand_dims", data, axis=axis, num_newaxis=num_newaxis)


def strided_slice(data: Expr, begin: Sequence[int], end: Sequence[int], strides: Sequence[int] | None = None,
                  axes: Sequence[int] | None = None) -> Call:
    return call("strided_slice", data, begin=tuple(begin), end=tuple(end),
                strides=None if strides is None else tuple(strides), axes=None if axes is None else tuple(axes))


def take(data: Expr, indices: Expr, axis: int = 0) -> Call:
    return call("take", data, indices, axis=axis)


def gather_elements(data: Expr, indices: Expr, axis: int = 0) -> Call:
    return call("gather_elements", data, indices, axis=axis)


def gather_nd(data: Expr, indices: Expr, batch_dims: int = 0) -> Call:
    return call("gather_nd", data, indices, batch_dims=batch_dims)


def broadcast_to(data: Expr, shape: Sequence[int]) -> Call:
    return call("broadcast_to", data, shape=tuple(shape))


def tile(data: Expr, reps: Sequence[int]) -> Call:
    return call("tile", data, reps=tuple(reps))


def reverse(data: Expr, axis: int | Sequence[int]) -> Call:
    return call("reverse", data, axis=(axis,) if isinstance(axis, int) else tuple(axis))


def cumsum(data: Expr, axis: int = 0, exclusive: bool = False, reverse: bool = False) -> Call:
    return call("cumsum", data, axis=axis, exclusive=exclusive, reverse=reverse)


def shape_of(data: Expr, dtype: str = "int64") -> Call:
    return call("shape_of", data, dtype=dtype)


def topk(data: Expr, k: int, axis: int = -1, largest: bool = True, sorted: bool = True) -> Call:
    """A tuple-typed call: index 0 the values, index 1 the int64 indices."""
    return call("topk", data, k=k, axis=axis, largest=largest, sorted=sorted)


def resize(data: Expr, size: Sequence[int], method: str = "nearest", scales: Sequence[float] | None = None,
           **kwargs: Any) -> Call:
    """Resize to `size` (every axis); scales default to size / input size."""
    if scales is None:
        scales = tuple(o / i if i else 1.0 for o, i in zip(size, data.shape))
    return call("image.resize", data, size=tuple(size), scales=tuple(scales), method=method, **kwargs)
