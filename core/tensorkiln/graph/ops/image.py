"""image.resize: ONNX Resize semantics, separable per axis (nearest, linear, cubic)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import require_float, shape_text, tensor_args

__all__ = ["ResizeAttrs"]


@dataclass(frozen=True, slots=True)
class ResizeAttrs(Attrs):
    """Resize every axis to `size`; `scales` (one per axis) drive the coordinate transform.

    roi holds (starts..., ends...) per axis, used by tf_crop_and_resize only.
    """
    size: tuple[int, ...] = ()
    scales: tuple[float, ...] = ()
    method: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False
    extrapolation_value: float = 0.0
    roi: tuple[float, ...] | None = None
    antialias: bool = False   # linear / cubic: widen the kernel by 1 / scale where an axis shrinks
    _choices = {
        "method": ("nearest", "linear", "cubic"),
        "coordinate_transformation_mode": ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel",
                                           "align_corners", "asymmetric", "tf_crop_and_resize"),
        "nearest_mode": ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"),
    }

    def _check(self) -> None:
        if self.antialias and self.method == "nearest":
            self.fail("antialias applies to the linear and cubic methods, not nearest")
        if len(self.scales) != len(self.size):
            self.fail(f"scales {self.scales} must have one entry per axis of size {self.size}")
        if any(s <= 0 for s in self.scales):
            self.fail(f"scales {self.scales} must be positive")


def _resize_type(arg_types, attrs: ResizeAttrs) -> TensorType:
    (data,) = tensor_args("image.resize", arg_types)
    if len(attrs.size) != data.ndim:
        raise ShapeError(f"image.resize: size {attrs.size} must have one entry per axis of {shape_text(data.shape)}")
    if attrs.method != "nearest":
        require_float("image.resize", data)
    return TensorType(attrs.size, data.dtype)


def _nearest_coeffs(ratio: np.ndarray, mode: str) -> np.ndarray:
    is_integer = ratio == 1.0
    if mode == "round_prefer_floor":
        upper = ratio > 0.5
    elif mode == "round_prefer_ceil":
        upper = ratio >= 0.5
    elif mode == "floor":
        upper = np.zeros_like(ratio, dtype=bool)
    else:
        upper = np.ones_like(ratio, dtype=bool)
    upper = upper | is_integer
    return np.stack([~upper, upper], axis=-1).astype(np.float64)


def _cubic_coeffs(ratio: np.ndarray, a: float) -> np.ndarray:
    r, q = ratio, 1 - ratio
    return np.stack([
        ((a * (r + 1) - 5 * a) * (r + 1) + 8 * a) * (r + 1) - 4 * a,
        ((a + 2) * r - (a + 3)) * r * r + 1,
        ((a + 2) * q - (a + 3)) * q * q + 1,
        ((a * (q + 1) - 5 * a) * (q + 1) + 8 * a) * (q + 1) - 4 * a,
    ], axis=-1)


def antialias_taps(method: str, scale: float) -> tuple[int, int]:
    """(first tap offset, taps) of an antialiased kernel on an axis scaled by `scale` (ONNX's
    reference: the kernel stretched by 1 / scale when shrinking; plain linear / cubic otherwise)."""
    scale = min(scale, 1.0)
    start = int(math.floor((-1.0 if method == "linear" else -2.0) / scale) + 1)
    return start, 2 - 2 * start


def antialias_weight(method: str, distance: np.ndarray, a: float) -> np.ndarray:
    """The unnormalized antialiased weight of a tap at `distance` * min(scale, 1) from the point."""
    x = np.abs(distance)
    if method == "linear":
        return np.maximum(1.0 - x, 0.0)
    near = ((a + 2) * x - (a + 3)) * x * x + 1.0
    far = ((a * x - 5 * a) * x + 8 * a) * x - 4 * a
    return np.where(x <= 1.0, near, np.where(x < 2.0, far, 0.0))


def _antialias_coeffs(ratio: np.ndarray, scale: float, attrs) -> tuple[np.ndarray, int]:
    start, taps = antialias_taps(attrs.method, scale)
    distance = (np.arange(start, start + taps)[None, :] - ratio[:, None]) * min(scale, 1.0)
    return antialias_weight(attrs.method, distance, attrs.cubic_coeff_a), start


def _source_coordinates(mode: str, out_size: int, in_size: int, scale: float, roi) -> tuple[np.ndarray, np.ndarray | None]:
    y = np.arange(out_size, dtype=np.float64)
    length = scale * in_size
    if mode == "align_corners":
        return (np.zeros(out_size) if length == 1 else y * (in_size - 1) / (length - 1)), None
    if mode == "asymmetric":
        return y / scale, None
    if mode == "tf_crop_and_resize":
        start, end = roi
        x = np.full(out_size, (end - start) * (in_size - 1) / 2) if length == 1 else \
            y * (end - start) * (in_size - 1) / (length - 1)
        x = x + start * (in_size - 1)
        return x, (x < 0) | (x > in_size - 1)
    if mode == "pytorch_half_pixel":
        return (np.full(out_size, -0.5) if length == 1 else (y + 0.5) / scale - 0.5), None
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return offset + (y + 0.5) / scale - 0.5, None
    return (y + 0.5) / scale - 0.5, None


def _resize_axis(data: np.ndarray, axis: int, out_size: int, scale: float, roi, attrs: ResizeAttrs) -> np.ndarray:
    in_size = data.shape[axis]
    x, extrapolated = _source_coordinates(attrs.coordinate_transformation_mode, out_size, in_size, scale, roi)
    floor = np.floor(x)
    ratio = np.where(x == floor, 1.0, x - floor)
    if attrs.antialias:
        return _resize_axis_antialias(data, axis, out_size, x, floor, ratio, scale, extrapolated, attrs)
    if attrs.method == "nearest":
        coeffs = _nearest_coeffs(ratio, attrs.nearest_mode)
    elif attrs.method == "linear":
        coeffs = np.stack([1 - ratio, ratio], axis=-1)
    else:
        coeffs = _cubic_coeffs(ratio, attrs.cubic_coeff_a)
    taps = coeffs.shape[1]
    pad = int(math.ceil(taps / 2))
    padded = x + pad
    base = np.floor(padded)
    fraction = padded - base
    if taps % 2 == 0:
        offset = np.where(fraction == 0, -(taps // 2), -(taps // 2) + 1)
    else:
        offset = np.where(fraction <= 0.5, -((taps - 1) // 2), -((taps - 1) // 2) + 1)
    neighbors = (base.astype(np.int64) + offset)[:, None] + np.arange(taps)[None, :] - pad
    if attrs.exclude_outside:
        coeffs = np.where((neighbors < 0) | (neighbors >= in_size), 0.0, coeffs)
        total = coeffs.sum(axis=-1, keepdims=True)
        coeffs = coeffs / np.where(total == 0, 1.0, total)
    gathered = np.take(data, np.clip(neighbors, 0, in_size - 1), axis=axis)
    weights = coeffs.reshape((1,) * axis + coeffs.shape + (1,) * (data.ndim - axis - 1))
    result = (gathered * weights).sum(axis=axis + 1)
    if extrapolated is not None and extrapolated.any():
        mask = extrapolated.reshape((1,) * axis + (out_size,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, attrs.extrapolation_value, result)
    return result


def _resize_axis_antialias(data, axis, out_size, x, floor, ratio, scale, extrapolated, attrs) -> np.ndarray:
    """The taps around each point, normalized to sum 1 (over the taps inside the input with
    exclude_outside), the input's edge repeated past its ends."""
    in_size = data.shape[axis]
    coeffs, start = _antialias_coeffs(ratio, scale, attrs)
    # the left neighbour: floor(x), or x - 1 when x is a whole number (ratio 1)
    left = np.where(x == floor, floor - 1, floor).astype(np.int64)
    neighbors = left[:, None] + start + np.arange(coeffs.shape[1])[None, :]
    if attrs.exclude_outside:
        coeffs = np.where((neighbors < 0) | (neighbors >= in_size), 0.0, coeffs)
    total = coeffs.sum(axis=-1, keepdims=True)
    coeffs = coeffs / np.where(total == 0, 1.0, total)
    gathered = np.take(data, np.clip(neighbors, 0, in_size - 1), axis=axis)
    weights = coeffs.reshape((1,) * axis + coeffs.shape + (1,) * (data.ndim - axis - 1))
    result = (gathered * weights).sum(axis=axis + 1)
    if extrapolated is not None and extrapolated.any():
        mask = extrapolated.reshape((1,) * axis + (out_size,) + (1,) * (data.ndim - axis - 1))
        result = np.where(mask, attrs.extrapolation_value, result)
    return result


def _resize_reference(x: np.ndarray, attrs: ResizeAttrs) -> np.ndarray:
    result = x.astype(np.float64)
    rank = x.ndim
    for axis in range(rank):
        roi = None if attrs.roi is None else (attrs.roi[axis], attrs.roi[axis + rank])
        unchanged = math.isclose(attrs.scales[axis], 1.0) and attrs.size[axis] == x.shape[axis] and (
            roi is None or (math.isclose(roi[0], 0.0) and math.isclose(roi[1], 1.0)))
        if unchanged or attrs.size[axis] == 0:
            if attrs.size[axis] == 0:
                result = np.take(result, np.arange(0), axis=axis)
            continue
        result = _resize_axis(result, axis, attrs.size[axis], attrs.scales[axis], roi, attrs)
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        result = np.clip(np.round(result), info.min, info.max)
    return result.astype(x.dtype)


register_op("image.resize", attrs=ResizeAttrs, type_rule=_resize_type, reference=_resize_reference,
            pattern=OpPattern.INJECTIVE, num_inputs=1, tolerance={"float16": 2e-3, "float32": 1e-5})
