"""ops/roi_align.py: image.roi_align (ONNX RoiAlign), tag "comm_reduce" over the samples of a bin.

The region, its bins and (with sampling_ratio 0) the samples per bin are run-time values, while a
reduction axis has a static extent: each axis visits `roi_sample_bound` samples starting at the
first that can touch the input (the samples before it, and past the bound, contribute exactly 0),
masked by the bin's own sample count. Coordinates and weights are float64, like the reference.
"""
from __future__ import annotations

from .. import te
from ..graph.ops.roi_align import roi_sample_bound
from ..tir import nodes as n
from . import tags
from ._common import select

__all__ = ["roi_align"]

_F64 = "float64"


def _f(value) -> n.PrimExpr:
    return n.const(float(value), _F64)


def _int(value) -> n.PrimExpr:
    return n.const(int(value), "int32")


class _Axis:
    """One axis (rows or columns) of a region's bins: where sample k of bin `index` lies, how many
    samples a bin has, and the bilinear taps of a sample."""

    def __init__(self, start, end, bins: int, size: int, attrs):
        extent = end - start
        if not attrs.half_pixel:
            extent = te.max(extent, _f(1.0))
        self.bin = extent / _f(bins)
        if attrs.sampling_ratio > 0:
            self.grid = _int(attrs.sampling_ratio)
        else:
            self.grid = te.max(te.cast(te.ceil(self.bin), "int32"), _int(0))
        self.start, self.size = start, size

    def position(self, index, k):
        grid = te.cast(te.max(self.grid, _int(1)), _F64)
        return self.start + te.cast(index, _F64) * self.bin + (te.cast(k, _F64) + 0.5) * self.bin / grid

    def first(self, index):
        """The first sample that can touch the input ([-1, size]), less one against rounding; 0 when
        every sample is visited anyway."""
        grid = te.cast(te.max(self.grid, _int(1)), _F64)
        spacing = te.max(self.bin / grid, _f(1e-30))
        base = self.start + te.cast(index, _F64) * self.bin
        k = te.cast(te.floor((_f(-1.0) - base) / spacing - 0.5), "int32")
        return te.max(k, _int(0))

    def outside(self, position):
        return n.Or(position < -1.0, position > float(self.size))

    def taps(self, position):
        """(low, high, weight of low, weight of high): ONNX's clamping at the borders."""
        position = te.max(position, _f(0.0))
        low = te.cast(te.floor(position), "int32")
        at_end = low >= self.size - 1
        low = select(at_end, _int(self.size - 1), low)
        high = select(at_end, _int(self.size - 1), low + 1)
        fraction = select(at_end, _f(0.0), position - te.cast(low, _F64))
        return low, high, 1.0 - fraction, fraction


def roi_align(inputs, attrs, out_type):
    """Registry compute of image.roi_align."""
    data, rois, batch_indices = inputs
    _, channels, height, width = (int(s) for s in data.shape)
    out_shape = tuple(out_type.shape)
    bound_h = roi_sample_bound(height, attrs.sampling_ratio)
    bound_w = roi_sample_bound(width, attrs.sampling_ratio)
    ty = te.reduce_axis((0, bound_h), name="ty")
    tx = te.reduce_axis((0, bound_w), name="tx")
    offset = 0.5 if attrs.half_pixel else 0.0
    adaptive = attrs.sampling_ratio == 0

    def corner(r, i):
        return te.cast(rois[r, i], _F64) * _f(attrs.spatial_scale) - offset

    def axes(r):
        rows = _Axis(corner(r, 1), corner(r, 3), attrs.output_height, height, attrs)
        columns = _Axis(corner(r, 0), corner(r, 2), attrs.output_width, width, attrs)
        return rows, columns

    def sample(r, c, ph, pw):
        """(counted, inside, the four weighted corner values) of the sample at (ty, tx)."""
        rows, columns = axes(r)
        ky = (rows.first(ph) + ty) if adaptive else ty
        kx = (columns.first(pw) + tx) if adaptive else tx
        y, x = rows.position(ph, ky), columns.position(pw, kx)
        counted = n.And(ky < rows.grid, kx < columns.grid)
        inside = n.And(n.Not(rows.outside(y)), n.Not(columns.outside(x)))
        # the executor checked batch_indices against [-N, N) (IndexBounds); negatives count from the end
        batch = te.cast(batch_indices[r], "int32")
        batch = te.min(te.max(select(batch < 0, batch + int(data.shape[0]), batch), _int(0)), _int(int(data.shape[0]) - 1))
        y_low, y_high, wy_low, wy_high = rows.taps(y)
        x_low, x_high, wx_low, wx_high = columns.taps(x)
        values = [te.cast(data[batch, c, yy, xx], _F64) * (wy * wx)
                  for yy, wy in ((y_low, wy_low), (y_high, wy_high)) for xx, wx in ((x_low, wx_low), (x_high, wx_high))]
        return counted, inside, values

    # One reduction whose result is the output: an elementwise stage after it (the division, the
    # cast) would make a target's reduce schedule parallelize only its inner loops. The samples are
    # float64; float32 / float64 data accumulate in their own type, half types cast back after.
    accumulate = data.dtype if data.dtype in ("float32", "float64") else "float32"

    def grids(r):
        rows, columns = axes(r)
        return rows, columns, n.Or(rows.grid <= 0, columns.grid <= 0)

    if attrs.mode == "avg":
        def average(r, c, ph, pw):
            rows, columns, _ = grids(r)
            counted, inside, values = sample(r, c, ph, pw)
            scale = 1.0 / te.cast(te.max(rows.grid * columns.grid, _int(1)), _F64)
            value = (values[0] + values[1] + values[2] + values[3]) * scale
            return te.sum(te.cast(select(n.And(counted, inside), value, _f(0.0)), accumulate), axis=[ty, tx])
        result = te.compute(out_shape, average, name="T_roi_align", tag=tags.COMM_REDUCE)
    else:
        def largest(r, c, ph, pw):
            rows, columns, empty = grids(r)
            counted, inside, values = sample(r, c, ph, pw)
            value = te.max(te.max(values[0], values[1]), te.max(values[2], values[3]))
            # a counted sample outside the input is worth exactly 0 (all its weights are 0); so is an
            # empty bin, and (adaptive grids) any sample past the visited ones, all outside the input
            value = select(counted, select(inside, value, _f(0.0)), te.min_value(_F64))
            floor = empty
            if adaptive:
                first_y, last_y = rows.position(ph, _int(0)), rows.position(ph, rows.grid - 1)
                first_x, last_x = columns.position(pw, _int(0)), columns.position(pw, columns.grid - 1)
                floor = n.Or(floor, n.Or(n.Or(rows.outside(first_y), rows.outside(last_y)),
                                         n.Or(columns.outside(first_x), columns.outside(last_x))))
            value = te.max(value, select(floor, _f(0.0), te.min_value(_F64)))
            return te.max(te.cast(value, accumulate), axis=[ty, tx])
        result = te.compute(out_shape, largest, name="T_roi_align", tag=tags.COMM_REDUCE)
    if accumulate == data.dtype:
        return result
    return te.compute(out_shape, lambda *i: te.cast(result[i], data.dtype), name="T_roi_align_cast",
                      tag=tags.ELEMWISE)
