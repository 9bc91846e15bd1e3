"""Converters for ONNX sampling ops: GridSample, DeformConv, RoiAlign."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


@converter("GridSample")
def _grid_sample(node: OnnxNode) -> Expr:
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    if mode not in _MODES:
        raise node.unsupported(f"mode {mode!r}; use one of {', '.join(_MODES)}")
    return node.call("image.grid_sample", node.required(0), node.required(1), mode=_MODES[mode],
                     padding_mode=node.attr("padding_mode", "zeros"),
                     align_corners=bool(node.attr("align_corners", 0)))


def _slice(node: OnnxNode, value: Expr, axis: int, start: int, stop: int) -> Expr:
    return node.call("strided_slice", value, begin=(start,), end=(stop,), axes=(axis,))


@converter("DeformConv")
def _deform_conv(node: OnnxNode) -> Expr:
    """Sample the input at every kernel tap moved by its offset (GridSample, bilinear, zeros outside,
    align_corners: the normalisation onnx's reference uses too), scale by the mask, then a grouped
    matrix product with the weights. 2-D only."""
    data, weight, offset = node.required(0), node.required(1), node.required(2)
    bias, mask = node.input(3), node.input(4)
    if len(data.shape) != 4:
        raise node.unsupported(f"only 2-D DeformConv is supported; the input has shape {tuple(data.shape)}")
    n, channels, height, width = data.shape
    out_channels, kh, kw = weight.shape[0], weight.shape[2], weight.shape[3]
    oh, ow = offset.shape[2:]
    group, offset_group = node.attr("group", 1), node.attr("offset_group", 1)
    sh, sw = node.attr("strides", [1, 1])
    dh, dw = node.attr("dilations", [1, 1])
    top, left = node.attr("pads", [0, 0, 0, 0])[:2]
    taps = kh * kw
    dtype = data.dtype
    offset = node.call("reshape", offset, newshape=(n, offset_group, kh, kw, 2, oh, ow))
    base_h = (-top + sh * np.arange(oh))[None, :] + dh * np.arange(kh)[:, None]        # (kh, oh)
    base_w = (-left + sw * np.arange(ow))[None, :] + dw * np.arange(kw)[:, None]       # (kw, ow)
    rows = node.call("add", Constant(base_h.reshape(1, 1, kh, 1, oh, 1).astype(to_numpy(dtype))),
                     node.call("squeeze", _slice(node, offset, 4, 0, 1), axis=(4,)))
    cols = node.call("add", Constant(base_w.reshape(1, 1, 1, kw, 1, ow).astype(to_numpy(dtype))),
                     node.call("squeeze", _slice(node, offset, 4, 1, 2), axis=(4,)))

    def normalized(position: Expr, size: int) -> Expr:   # pixel -> [-1, 1] with align_corners
        scaled = node.call("multiply", position, scalar(2.0 / max(size - 1, 1), dtype))
        return node.call("subtract", scaled, scalar(1.0, dtype))
    grid = node.call("concatenate", node.call("expand_dims", normalized(cols, width), axis=6),
                     node.call("expand_dims", normalized(rows, height), axis=6), axis=6)   # (n, og, kh, kw, oh, ow, 2)
    per_group = channels // offset_group
    sampled = []
    for g in range(offset_group):
        grid_g = node.call("reshape", _slice(node, grid, 1, g, g + 1), newshape=(n, taps * oh, ow, 2))
        values = node.call("image.grid_sample", _slice(node, data, 1, g * per_group, (g + 1) * per_group), grid_g,
                           mode="linear", padding_mode="zeros", align_corners=True)
        values = node.call("reshape", values, newshape=(n, per_group, taps, oh, ow))
        if mask is not None:
            mask_g = _slice(node, node.call("reshape", mask, newshape=(n, offset_group, taps, oh, ow)), 1, g, g + 1)
            values = node.call("multiply", values, mask_g)
        sampled.append(values)
    columns = sampled[0] if offset_group == 1 else node.call("concatenate", *sampled, axis=1)
    columns = node.call("reshape", columns, newshape=(n, group, channels // group * taps, oh * ow))
    kernel = node.call("reshape", weight, newshape=(group, out_channels // group, channels // group * taps))
    out = node.call("reshape", node.call("nn.matmul", kernel, columns), newshape=(n, out_channels, oh, ow))
    return out if bias is None else node.call("nn.bias_add", out, bias, axis=1)


@converter("RoiAlign")
def _roi_align(node: OnnxNode) -> Expr:
    mode = node.attr("coordinate_transformation_mode", "half_pixel" if node.opset >= 16 else "output_half_pixel")
    if mode not in ("half_pixel", "output_half_pixel"):
        raise node.unsupported(f"coordinate_transformation_mode {mode!r}; use half_pixel or output_half_pixel")
    return node.call("image.roi_align", node.required(0), node.required(1), node.required(2),
                     mode=node.attr("mode", "avg"), output_height=int(node.attr("output_height", 1)),
                     output_width=int(node.attr("output_width", 1)), sampling_ratio=int(node.attr("sampling_ratio", 0)),
                     spatial_scale=float(node.attr("spatial_scale", 1.0)), half_pixel=mode == "half_pixel")
