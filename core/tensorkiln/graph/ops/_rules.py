"""Helpers shared by type rules: argument checks, broadcasting, axis normalization."""
from __future__ import annotations

from ...ir.dtypes import dtype_of
from ...ir.errors import DTypeError, ShapeError
from ..types import TensorType, Type

__all__ = ["tensor_args", "broadcast_shape", "normalize_axis", "normalize_axes", "same_dtype",
           "require_float", "shape_text"]


def tensor_args(op: str, arg_types: tuple[Type, ...]) -> tuple[TensorType, ...]:
    for index, arg in enumerate(arg_types):
        if not isinstance(arg, TensorType):
            raise ShapeError(f"{op}: input {index} must be a tensor, got {arg}")
    return arg_types  # type: ignore[return-value]


def shape_text(shape: tuple[int, ...]) -> str:
    return str(tuple(shape))


def broadcast_shape(op: str, *shapes: tuple[int, ...]) -> tuple[int, ...]:
    """Numpy broadcasting of `shapes`; ShapeError names the op and every shape."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(ndim):
        dims = {s[axis - ndim + len(s)] for s in shapes if axis - ndim + len(s) >= 0}
        dims.discard(1)
        if len(dims) > 1:
            raise ShapeError(
                f"{op}: shapes {' and '.join(shape_text(s) for s in shapes)} do not broadcast "
                f"(axis {axis - ndim} has sizes {sorted(dims)}); make the sizes equal or 1")
        result.append(dims.pop() if dims else 1)
    return tuple(result)


def normalize_axis(op: str, axis: int, ndim: int, extra: int = 0) -> int:
    """Map a possibly negative axis into [0, ndim + extra)."""
    size = ndim + extra
    if not -size <= axis < size:
        raise ShapeError(f"{op}: axis {axis} is out of range for a tensor of rank {ndim}")
    return axis % size if size else 0


def normalize_axes(op: str, axes, ndim: int) -> tuple[int, ...]:
    if axes is None:
        return tuple(range(ndim))
    result = tuple(sorted({normalize_axis(op, a, ndim) for a in axes}))
    if len(result) != len(axes):
        raise ShapeError(f"{op}: axes {tuple(axes)} repeat an axis")
    return result


def same_dtype(op: str, *types: TensorType) -> str:
    dtypes = {t.dtype for t in types}
    if len(dtypes) > 1:
        raise DTypeError(
            f"{op}: inputs have different dtypes {', '.join(t.dtype for t in types)}; "
            f"insert a cast so they match")
    return types[0].dtype


def require_float(op: str, arg: TensorType) -> None:
    if not dtype_of(arg.dtype).is_float:
        raise DTypeError(f"{op}: needs a floating-point input, got {arg.dtype}; cast it first")
