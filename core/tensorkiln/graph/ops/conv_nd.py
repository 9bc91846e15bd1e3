"""nn.conv: convolution of (N, C, spatial...) data of any spatial rank (ONNX Conv on 3-D volumes and
beyond), with groups (depthwise included), strides, dilations and ONNX (begins..., ends...) padding.

1-D and 2-D convolutions keep nn.conv2d, its layouts and its tuned schedules; this op covers the
other ranks. The bias stays a separate nn.bias_add, as after nn.conv2d.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import require_float, same_dtype, shape_text, tensor_args
from .nn import _accumulate

__all__ = ["ConvAttrs", "conv_output_shape"]

_TOLERANCE = {"float16": 2e-3, "float32": 1e-4}


@dataclass(frozen=True, slots=True)
class ConvAttrs(Attrs):
    """(N, C, spatial...) data, (O, C / groups, k...) weight; padding is (begins..., ends...)."""
    strides: tuple[int, ...] = (1,)
    padding: tuple[int, ...] = (0, 0)
    dilation: tuple[int, ...] = (1,)
    groups: int = 1

    def _check(self) -> None:
        rank = len(self.strides)
        if len(self.dilation) != rank or len(self.padding) != 2 * rank:
            self.fail(f"strides {self.strides}, dilation {self.dilation} and padding {self.padding} must have 1, 1 "
                      f"and 2 entries per spatial axis")
        if any(v < 1 for v in self.strides + self.dilation):
            self.fail(f"strides {self.strides} and dilation {self.dilation} must be positive")
        if any(p < 0 for p in self.padding):
            self.fail(f"padding {self.padding} must be non-negative")
        if self.groups < 1:
            self.fail(f"groups must be positive, got {self.groups}")


def conv_output_shape(data_shape, weight_shape, attrs: ConvAttrs) -> tuple[int, ...]:
    """(N, O, out...) of nn.conv (ShapeError naming the shapes when they do not fit)."""
    op, rank = "nn.conv", len(attrs.strides)
    if len(data_shape) != rank + 2 or len(weight_shape) != rank + 2:
        raise ShapeError(f"{op}: data {shape_text(data_shape)} and weight {shape_text(weight_shape)} must both have "
                         f"2 + {rank} axes (N, C, spatial...) and (O, C/groups, k...), from strides {attrs.strides}")
    channels, out_channels, groups = data_shape[1], weight_shape[0], attrs.groups
    if channels % groups or channels // groups != weight_shape[1]:
        raise ShapeError(f"{op}: data {shape_text(data_shape)} has {channels} channels but weight "
                         f"{shape_text(weight_shape)} (O, C/groups, k...) expects {weight_shape[1]} * groups "
                         f"({groups}) = {weight_shape[1] * groups}")
    if out_channels % groups:
        raise ShapeError(f"{op}: weight {shape_text(weight_shape)} has {out_channels} output channels, not a "
                         f"multiple of groups ({groups})")
    sizes = []
    for a in range(rank):
        padded = data_shape[2 + a] + attrs.padding[a] + attrs.padding[rank + a]
        effective = (weight_shape[2 + a] - 1) * attrs.dilation[a] + 1
        if padded < effective:
            raise ShapeError(f"{op}: kernel {weight_shape[2 + a]} (dilation {attrs.dilation[a]}) on spatial axis {a} "
                             f"spans {effective}, more than the padded input {padded} of data {shape_text(data_shape)}")
        sizes.append((padded - effective) // attrs.strides[a] + 1)
    return (data_shape[0], out_channels, *sizes)


def _conv_type(arg_types, attrs: ConvAttrs) -> TensorType:
    data, weight = tensor_args("nn.conv", arg_types)
    dtype = same_dtype("nn.conv", data, weight)
    require_float("nn.conv", data)
    return TensorType(conv_output_shape(data.shape, weight.shape, attrs), dtype)


def _conv_reference(data, weight, attrs: ConvAttrs):
    """Tap by tap: each kernel tap adds (its strided, dilated view of the padded input) x (its weights)."""
    out_shape = conv_output_shape(data.shape, weight.shape, attrs)
    x, w = _accumulate(data), _accumulate(weight)
    rank, groups = len(attrs.strides), attrs.groups
    x = np.pad(x, [(0, 0), (0, 0)] + [(attrs.padding[a], attrs.padding[rank + a]) for a in range(rank)])
    per_group_in, per_group_out = w.shape[1], w.shape[0] // groups
    out = np.zeros(out_shape, dtype=x.dtype)
    for tap in itertools.product(*(range(k) for k in w.shape[2:])):
        window = x[(slice(None), slice(None), *(slice(t * d, t * d + (o - 1) * s + 1, s) for t, d, s, o in
                                                 zip(tap, attrs.dilation, attrs.strides, out_shape[2:])))]
        for g in range(groups):
            xg = window[:, g * per_group_in:(g + 1) * per_group_in]
            wg = w[(slice(g * per_group_out, (g + 1) * per_group_out), slice(None), *tap)]
            out[:, g * per_group_out:(g + 1) * per_group_out] += np.moveaxis(
                np.tensordot(xg, wg, axes=([1], [1])), -1, 1)
    return out.astype(data.dtype)


register_op("nn.conv", attrs=ConvAttrs, type_rule=_conv_type, reference=_conv_reference,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, tolerance=_TOLERANCE,
            doc="Convolution of any spatial rank, (N, C, spatial...) data and (O, C/groups, k...) weight.")
