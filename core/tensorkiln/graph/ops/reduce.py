"""Reductions: sum, mean, max, min, prod over axes (with keepdims), argmax and argmin."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import normalize_axes, normalize_axis, shape_text, tensor_args

__all__ = ["ReduceAttrs", "ArgReduceAttrs"]


@dataclass(frozen=True, slots=True)
class ReduceAttrs(Attrs):
    """Reduce over `axis` (None: every axis); keepdims keeps reduced axes with size 1."""
    axis: tuple[int, ...] | None = None
    keepdims: bool = False


def _reduce_type(op: str):
    def rule(arg_types, attrs: ReduceAttrs) -> TensorType:
        (data,) = tensor_args(op, arg_types)
        axes = normalize_axes(op, attrs.axis, data.ndim)
        if attrs.keepdims:
            shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
        else:
            shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
        return TensorType(shape, data.dtype)
    return rule


def _reduce_reference(fn):
    def reference(x, attrs: ReduceAttrs):
        axes = None if attrs.axis is None else tuple(a % max(x.ndim, 1) for a in attrs.axis)
        compute = x.astype(np.float32) if x.dtype == np.float16 else x
        if compute.size == 0 and fn in _IDENTITY:  # max/min of nothing is the identity element (ONNX)
            return np.asarray(fn(compute, axis=axes, keepdims=attrs.keepdims, initial=_IDENTITY[fn](x.dtype)))
        return np.asarray(fn(compute, axis=axes, keepdims=attrs.keepdims)).astype(x.dtype)
    return reference


def _lowest(dtype):
    return False if dtype == np.bool_ else (-np.inf if dtype.kind == "f" else np.iinfo(dtype).min)


def _highest(dtype):
    return True if dtype == np.bool_ else (np.inf if dtype.kind == "f" else np.iinfo(dtype).max)


_IDENTITY = {np.max: _lowest, np.min: _highest}
_REDUCTIONS = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}
for _name, _fn in _REDUCTIONS.items():
    register_op(_name, attrs=ReduceAttrs, type_rule=_reduce_type(_name), reference=_reduce_reference(_fn),
                pattern=OpPattern.COMM_REDUCE, num_inputs=1, tolerance={"float16": 2e-3, "float32": 1e-5})


@dataclass(frozen=True, slots=True)
class ArgReduceAttrs(Attrs):
    """Index (int64) of the max/min along `axis`; ties take the first index unless select_last_index."""
    axis: int = 0
    keepdims: bool = True
    select_last_index: bool = False


def _arg_type(op: str):
    def rule(arg_types, attrs: ArgReduceAttrs) -> TensorType:
        (data,) = tensor_args(op, arg_types)
        axis = normalize_axis(op, attrs.axis, data.ndim)
        if data.shape[axis] == 0:
            raise ShapeError(f"{op}: axis {axis} of {shape_text(data.shape)} is empty")
        shape = tuple(1 if i == axis else d for i, d in enumerate(data.shape)) if attrs.keepdims \
            else tuple(d for i, d in enumerate(data.shape) if i != axis)
        return TensorType(shape, "int64")
    return rule


def _arg_reference(fn):
    def reference(x, attrs: ArgReduceAttrs):
        axis = attrs.axis % x.ndim
        if attrs.select_last_index:
            flipped = np.flip(x, axis)
            out = x.shape[axis] - 1 - fn(flipped, axis=axis)
        else:
            out = fn(x, axis=axis)
        if attrs.keepdims:
            out = np.expand_dims(out, axis)
        return out.astype(np.int64)
    return reference


register_op("argmax", attrs=ArgReduceAttrs, type_rule=_arg_type("argmax"), reference=_arg_reference(np.argmax),
            pattern=OpPattern.COMM_REDUCE, num_inputs=1)
register_op("argmin", attrs=ArgReduceAttrs, type_rule=_arg_type("argmin"), reference=_arg_reference(np.argmin),
            pattern=OpPattern.COMM_REDUCE, num_inputs=1)
