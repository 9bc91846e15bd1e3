"""ops/sampling.py: te compute of image.grid_sample (tag "injective": every output element gathers
a fixed number of input elements). The arithmetic is graph/ops/sampling.py's, run on te expressions."""
from __future__ import annotations

from functools import reduce

from .. import te
from ..graph.ops.sampling import ArrayMath, axis_coordinate, coordinate_taps, tap_products
from ..tir import nodes as n
from . import tags
from ._common import select
from .scan import stored_stage

__all__ = ["grid_sample"]

_COORDINATES = "float32"   # as onnx's reference: coordinates in float32 whatever the data type
COORDINATES_TAG = "grid_coordinates"

TE_MATH = ArrayMath(
    floor=te.floor, rint=te.round, where=select, to_int=lambda v: te.cast(v, "int32"),
    to_float=lambda v: te.cast(v, _COORDINATES), all_of=lambda conds: reduce(n.And, conds),
    less=lambda a, b: a < b, greater=lambda a, b: a > b)


def grid_sample(inputs, attrs, out_type):
    """Registry compute of image.grid_sample: one stage per axis holds the sampling position
    (tag "grid_coordinates", kept out of the main stage: the taps read it up to 16 times each),
    then each output element sums its taps."""
    data, grid = inputs
    spatial = data.ndim - 2
    accumulate = "float64" if data.dtype == "float64" else "float32"
    points = tuple(grid.shape[:-1])

    def position_stage(axis):
        size = int(data.shape[2 + axis])

        def body(batch, *where):
            g = te.cast(grid[(batch, *where, spatial - 1 - axis)], _COORDINATES)
            return axis_coordinate(TE_MATH, g, size, attrs)
        return stored_stage(points, body, f"T_grid_sample_position{axis}", COORDINATES_TAG)
    positions = [position_stage(axis) for axis in range(spatial)]

    def body(batch, channel, *where):
        per_axis = [coordinate_taps(TE_MATH, positions[axis][(batch, *where)], int(data.shape[2 + axis]), attrs)
                    for axis in range(spatial)]
        total = None
        for indices, weight, conditions in tap_products(per_axis):
            value = te.cast(data[(batch, channel, *indices)], accumulate)
            if weight is not None:
                value = value * te.cast(weight, accumulate)
            if conditions:
                value = select(TE_MATH.all_of(conditions), value, n.const(0.0, accumulate))
            total = value if total is None else total + value
        return te.cast(total, data.dtype)
    return te.compute(out_type.shape, body, name="T_grid_sample", tag=tags.INJECTIVE)
