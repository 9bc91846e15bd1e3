"""image.roi_align: ONNX RoiAlign (avg or max of bilinear samples per output bin of each region).

Inputs: data (N, C, H, W), rois (R, 4) as (x1, y1, x2, y2) in input coordinates times spatial_scale,
batch_indices (R,) integers; output (R, C, output_height, output_width). Everything about the
regions is a run-time value: with sampling_ratio 0 each bin takes ceil(bin size) samples per axis,
decided by the region's size when the model runs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.dtypes import dtype_of
from ...ir.errors import DTypeError, ShapeError
from ..attrs import Attrs
from ..registry import IndexBounds, OpPattern, register_op
from ..types import TensorType
from ._rules import require_float, shape_text, tensor_args

__all__ = ["RoiAlignAttrs", "roi_sample_bound"]


@dataclass(frozen=True, slots=True)
class RoiAlignAttrs(Attrs):
    """ONNX RoiAlign's attributes; `half_pixel` is coordinate_transformation_mode "half_pixel" (the
    regions shift by -0.5 and keep their size) rather than "output_half_pixel" (no shift, at least 1x1)."""
    mode: str = "avg"
    output_height: int = 1
    output_width: int = 1
    sampling_ratio: int = 0
    spatial_scale: float = 1.0
    half_pixel: bool = True
    _choices = {"mode": ("avg", "max")}

    def _check(self) -> None:
        if self.output_height < 1 or self.output_width < 1:
            self.fail(f"output_height {self.output_height} and output_width {self.output_width} must be positive")
        if self.sampling_ratio < 0:
            self.fail(f"sampling_ratio {self.sampling_ratio} must be >= 0 (0: adaptive)")


def roi_sample_bound(size: int, sampling_ratio: int) -> int:
    """Samples per bin and axis that a kernel visits: sampling_ratio itself, or for the adaptive grid
    (ceil(bin) samples, spaced more than 0.5 apart) the most that fall in [-1, size], where a sample
    can touch the input; the others contribute exactly 0."""
    return sampling_ratio if sampling_ratio > 0 else 2 * size + 3


def _roi_align_type(arg_types, attrs: RoiAlignAttrs) -> TensorType:
    data, rois, batch_indices = tensor_args("image.roi_align", arg_types)
    require_float("image.roi_align", data)
    if data.ndim != 4:
        raise ShapeError(f"image.roi_align: data {shape_text(data.shape)} must be 4-D (N, C, H, W)")
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise ShapeError(f"image.roi_align: rois {shape_text(rois.shape)} must be (num_rois, 4) as (x1, y1, x2, y2)")
    if batch_indices.shape != (rois.shape[0],):
        raise ShapeError(f"image.roi_align: batch_indices {shape_text(batch_indices.shape)} must be "
                         f"({rois.shape[0]},), one per region of rois {shape_text(rois.shape)}")
    require_float("image.roi_align", rois)
    if not dtype_of(batch_indices.dtype).is_int:
        raise DTypeError(f"image.roi_align: batch_indices must be integers, got {batch_indices.dtype}")
    return TensorType((rois.shape[0], data.shape[1], attrs.output_height, attrs.output_width), data.dtype)


def _axis_samples(start: float, bin_size: float, grid: int, bins: int, size: int):
    """Per bin and sample along one axis: (low, high, weight of low, weight of high, inside) arrays of
    shape (bins, grid), as ONNX's bilinear pre-calculation clamps them."""
    position = start + np.arange(bins)[:, None] * bin_size + (np.arange(grid)[None, :] + 0.5) * bin_size / grid
    inside = (position >= -1.0) & (position <= size)
    position = np.maximum(position, 0.0)
    low = np.floor(position).astype(np.int64)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    position = np.where(at_end, low, position)
    fraction = position - low
    return low, high, np.where(inside, 1.0 - fraction, 0.0), np.where(inside, fraction, 0.0), inside


def _batch_bounds(arg_types, attrs) -> IndexBounds:
    """batch_indices pick images of data: the executor checks them before a launch."""
    return IndexBounds(2, (arg_types[0].shape[0],))


def _roi_align_reference(data, rois, batch_indices, attrs: RoiAlignAttrs):
    batch, channels, height, width = data.shape
    outside = (batch_indices < -batch) | (batch_indices >= batch)
    if outside.any():
        raise ShapeError(f"image.roi_align: batch_indices {batch_indices[outside][:4].tolist()} are out of range "
                         f"for data {shape_text(data.shape)} with {batch} images")
    out = np.zeros((rois.shape[0], channels, attrs.output_height, attrs.output_width), dtype=np.float64)
    offset = 0.5 if attrs.half_pixel else 0.0
    for r, (x1, y1, x2, y2) in enumerate(rois.astype(np.float64) * attrs.spatial_scale - offset):
        roi_w, roi_h = x2 - x1, y2 - y1
        if not attrs.half_pixel:
            roi_w, roi_h = max(roi_w, 1.0), max(roi_h, 1.0)
        bin_h, bin_w = roi_h / attrs.output_height, roi_w / attrs.output_width
        grid_h = attrs.sampling_ratio or max(int(math.ceil(bin_h)), 0)
        grid_w = attrs.sampling_ratio or max(int(math.ceil(bin_w)), 0)
        if grid_h == 0 or grid_w == 0:
            continue
        image = data[int(batch_indices[r])].astype(np.float64)
        ylow, yhigh, wyl, wyh, _ = _axis_samples(y1, bin_h, grid_h, attrs.output_height, height)
        xlow, xhigh, wxl, wxh, _ = _axis_samples(x1, bin_w, grid_w, attrs.output_width, width)
        # corners[c, ph, iy, pw, ix] for each of the four (row, column) pairs, with its weight
        corners = [(image[:, ry[:, :, None, None], rx[None, None]],
                    wy[:, :, None, None] * wx[None, None])
                   for ry, wy in ((ylow, wyl), (yhigh, wyh)) for rx, wx in ((xlow, wxl), (xhigh, wxh))]
        if attrs.mode == "avg":
            total = sum(value * weight for value, weight in corners)
            out[r] = total.sum(axis=(2, 4)) / (grid_h * grid_w)
        else:
            weighted = np.max(np.stack([value * weight for value, weight in corners]), axis=0)
            out[r] = weighted.max(axis=(2, 4))
    return out.astype(data.dtype)


register_op("image.roi_align", attrs=RoiAlignAttrs, type_rule=_roi_align_type, reference=_roi_align_reference,
            pattern=OpPattern.OPAQUE, num_inputs=3, tolerance={"float16": 5e-3, "float32": 1e-4}, index_bounds=_batch_bounds,
            doc="ONNX RoiAlign: data (N, C, H, W), rois (R, 4), batch_indices (R,) -> (R, C, oh, ow).")
