"""image.grid_sample: ONNX GridSample (N-D, nearest / linear / cubic, zeros / border / reflection padding).

The sampling arithmetic is written once, against a small namespace of array functions
(`ArrayMath`): numpy runs it for the reference, and ops/sampling.py runs the same
functions on te expressions. Interpolation is separable, so an output element is the
sum over the tensor product of per-axis taps (1 for nearest, 2 for linear, 4 for cubic)
of the product of per-axis weights times the input there (0 outside, with zeros padding).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import require_float, shape_text, tensor_args

__all__ = ["GridSampleAttrs", "ArrayMath", "axis_coordinate", "coordinate_taps", "tap_products", "NUMPY_MATH"]

_CUBIC_ALPHA = -0.75


@dataclass(frozen=True, slots=True)
class GridSampleAttrs(Attrs):
    mode: str = "linear"
    padding_mode: str = "zeros"
    align_corners: bool = False
    _choices = {"mode": ("nearest", "linear", "cubic"), "padding_mode": ("zeros", "border", "reflection")}


@dataclass(frozen=True)
class ArrayMath:
    """The operations the sampling arithmetic needs, on numpy arrays or te expressions."""
    floor: Callable
    rint: Callable            # round half to even
    where: Callable           # where(condition, a, b)
    to_int: Callable          # truncate toward zero to int32
    to_float: Callable        # int32 -> the computation's float type
    all_of: Callable          # logical and of a list of conditions
    less: Callable
    greater: Callable


NUMPY_MATH = ArrayMath(
    floor=np.floor, rint=np.rint, where=np.where, to_int=lambda v: np.trunc(v).astype(np.int32),
    to_float=lambda v: v.astype(np.float32), all_of=lambda conds: np.logical_and.reduce(conds),
    less=np.less, greater=np.greater)


def _borders(size: int, align_corners: bool) -> tuple[float, float]:
    return (0.0, size - 1.0) if align_corners else (-0.5, size - 0.5)


def _reflect(m: ArrayMath, x, low: float, high: float):
    """Fold x into [low, high] by reflecting at the borders (ONNX's _gs_reflect)."""
    span = high - low
    if span == 0:
        return m.where(m.less(x, low), low + 0 * x, m.where(m.greater(x, high), high + 0 * x, x))
    below, above = low - x, x - high
    folds_below, folds_above = m.floor(below / span), m.floor(above / span)
    rest_below, rest_above = below - folds_below * span, above - folds_above * span
    even_below = m.less(folds_below - 2 * m.floor(folds_below / 2), 0.5)
    even_above = m.less(folds_above - 2 * m.floor(folds_above / 2), 0.5)
    from_below = m.where(even_below, low + rest_below, high - rest_below)
    from_above = m.where(even_above, high - rest_above, low + rest_above)
    return m.where(m.less(x, low), from_below, m.where(m.greater(x, high), from_above, x))


def _cubic_weights(t) -> list:
    a = _CUBIC_ALPHA
    outer = lambda d: ((a * d - 5 * a) * d + 8 * a) * d - 4 * a  # noqa: E731  (1 < |d| < 2)
    inner = lambda d: ((a + 2) * d - (a + 3)) * d * d + 1         # noqa: E731  (|d| <= 1)
    return [outer(t + 1), inner(t), inner(1 - t), outer(2 - t)]


def axis_coordinate(m: ArrayMath, g, size: int, attrs: GridSampleAttrs):
    """The input position along one axis for normalized coordinates `g`, after rounding (nearest)
    and the padding mode's move of points past the borders."""
    low, high = _borders(size, attrs.align_corners)
    if attrs.align_corners:
        x = (g + 1) / 2 * (size - 1)
    else:
        x = ((g + 1) * size - 1) / 2
    if attrs.mode == "nearest":
        x = m.rint(x)
    if attrs.padding_mode == "border" and attrs.mode != "cubic":
        # only points past the borders move (onto the edge pixels); the indices are clamped below.
        # Cubic pads each tap only, as onnxruntime and PyTorch do (onnx's Python reference moves the
        # point first, which differs within 1.5 pixels of a border; no node test covers it)
        x = m.where(m.less(x, low), 0 * x, m.where(m.greater(x, high), 0 * x + (size - 1), x))
    elif attrs.padding_mode == "reflection":
        x = _reflect(m, x, low, high)
    return x


def coordinate_taps(m: ArrayMath, x, size: int, attrs: GridSampleAttrs) -> list[tuple[Any, Any, Any]]:
    """Taps around position `x` (from axis_coordinate): [(index, weight or None, in_range or None)].

    `index` is a valid int32 position (padding applied); `in_range` is False where zeros padding
    makes the tap 0.
    """
    low, high = _borders(size, attrs.align_corners)
    if attrs.mode == "nearest":
        positions, weights = [x], [None]
    else:
        start = m.floor(x)
        t = x - start
        if attrs.mode == "linear":
            positions, weights = [start, start + 1], [1 - t, t]
        else:
            positions, weights = [start - 1, start, start + 1, start + 2], _cubic_weights(t)
    taps = []
    for position, weight in zip(positions, weights):
        if attrs.padding_mode == "reflection":
            position = m.to_int(_reflect(m, position, low, high))
            in_range = None
        else:
            position = m.to_int(position)
            in_range = None if attrs.padding_mode == "border" else \
                m.all_of([m.greater(position, -1), m.less(position, size)])
        # clamp what padding did not settle, so every index stays inside the input
        position = m.where(m.less(position, 0), 0 * position, m.where(m.greater(position, size - 1),
                                                                    0 * position + (size - 1), position))
        taps.append((position, weight, in_range))
    return taps


def tap_products(per_axis: list[list[tuple]]) -> list[tuple[tuple, Any, list]]:
    """(indices, weight product or None, range conditions) for every combination of per-axis taps."""
    result = []
    for choice in itertools.product(*per_axis):
        weight, conditions = None, []
        for _, w, in_range in choice:
            if w is not None:
                weight = w if weight is None else weight * w
            if in_range is not None:
                conditions.append(in_range)
        result.append((tuple(c[0] for c in choice), weight, conditions))
    return result


def _grid_sample_type(arg_types, attrs: GridSampleAttrs) -> TensorType:
    data, grid = tensor_args("image.grid_sample", arg_types)
    require_float("image.grid_sample", data)
    require_float("image.grid_sample", grid)
    spatial = data.ndim - 2
    if spatial < 1 or grid.ndim != data.ndim or grid.shape[0] != data.shape[0] or grid.shape[-1] != spatial:
        raise ShapeError(f"image.grid_sample: data {shape_text(data.shape)} (N, C, D1..Dk) needs a grid of shape "
                         f"(N, H1..Hk, k) with k = {spatial}, got {shape_text(grid.shape)}")
    if attrs.mode == "cubic" and spatial != 2:
        raise ShapeError(f"image.grid_sample: cubic mode samples 2-D data only (ONNX), got {spatial}-D")
    return TensorType((data.shape[0], data.shape[1], *grid.shape[1:-1]), data.dtype)


def _grid_sample(data, grid, attrs: GridSampleAttrs):
    spatial = data.ndim - 2
    coords = grid.astype(np.float32)
    per_axis = []
    for axis in range(spatial):
        size = data.shape[2 + axis]
        x = axis_coordinate(NUMPY_MATH, coords[..., spatial - 1 - axis], size, attrs)
        per_axis.append(coordinate_taps(NUMPY_MATH, x, size, attrs))
    out = np.zeros((data.shape[0], data.shape[1], *grid.shape[1:-1]), dtype=np.float64)
    batch = np.arange(data.shape[0]).reshape((-1,) + (1,) * (grid.ndim - 2))
    for indices, weight, conditions in tap_products(per_axis):
        values = data[batch, :, *indices]            # (N, H..., C)
        values = np.moveaxis(values, -1, 1).astype(np.float64)
        factor = np.ones(grid.shape[:-1]) if weight is None else weight.astype(np.float64)
        if conditions:
            factor = np.where(NUMPY_MATH.all_of(conditions), factor, 0.0)
        out += values * factor[:, None]
    return out.astype(data.dtype)


register_op("image.grid_sample", attrs=GridSampleAttrs, type_rule=_grid_sample_type, reference=_grid_sample,
            pattern=OpPattern.INJECTIVE, num_inputs=2, tolerance={"float16": 2e-3},
            doc="ONNX GridSample: sample data (N, C, D...) at normalized grid points (N, H..., k).")
