"""ops/nn/conv2d_nchwc.py: conv2d of blocked NCHW{x}c data (TVM's conv2d_NCHWc), groups 1.

Data (N, C/x, H, W, x), weight OIHW{x}i{x}o (O/x, C/x, KH, KW, x, x) or any other layout
nn.conv2d accepts, output (N, O/x, OH, OW, x):

    out[b, oc, y, x, ob] = sum_{rco, ry, rx, rci} pad(data)[b, rco, y*sh + ry*dh, x*sw + rx*dw, rci]
                                                  * w[oc*x + ob, rco*x + rci, ry, rx]

With NCHW data and out_layout NCHW{x}c (a first conv whose 3 input channels do not divide x) the
data is read as one block of all C channels: rco has extent 1, rci runs over C, weight OIHW{C}i{x}o.

The reduction runs over (rco, ry, rx, rci), TVM's order: a target's schedule keeps the
output-channel block `ob` innermost (one vector), unrolls a few output columns `x` (one
register each) and streams rci, so each step is one broadcast input and one weight vector
per column. Tag "conv2d_NCHWc"; any target runs it with the naive default schedule.
Grouped and depthwise convs have no blocked compute (nn.conv2d's attributes refuse them).
"""
from __future__ import annotations

from .. import tags
from ... import te
from ...graph.ops.layout import layout_index, primal_sizes
from ...graph.ops.nn import data_layout_block
from ...ir.errors import UnsupportedOpError
from .._common import accumulate_dtype
from ._accumulate import multiply_sum
from . import conv2d as _conv2d
from .conv2d import conv_output_size, pad_spatial

__all__ = ["conv2d_nchwc", "conv2d"]


def _weight_reader(weight: te.Tensor, kernel_layout: str, in_block: int, block: int):
    """read(oc, ob, rco, rci, ry, rx) -> w[oc*x + ob, rco*in_block + rci, ry, rx] in `kernel_layout`."""
    if kernel_layout == f"OIHW{in_block}i{block}o":   # direct: no index to simplify back
        return lambda oc, ob, rco, rci, ry, rx: weight[oc, rco, ry, rx, rci, ob]
    return lambda oc, ob, rco, rci, ry, rx: weight[layout_index(
        kernel_layout, {"O": oc * block + ob, "I": rco * in_block + rci, "H": ry, "W": rx})]


def conv2d_nchwc(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                 data_layout: str = "NCHW8c", kernel_layout: str = "OIHW8i8o",
                 out_dtype: str | None = None, out_layout: str = "") -> te.Tensor:
    """conv2d of `data` in `data_layout` ("NCHW{x}c", or "NCHW" with `out_layout` "NCHW{x}c") with `weight` in
    `kernel_layout`; output in `out_layout` (default: `data_layout`)."""
    out_layout = out_layout or data_layout
    block = data_layout_block(out_layout)
    if not block or data_layout not in ("NCHW", out_layout):
        raise UnsupportedOpError(f"nn.conv2d: conv2d_nchwc computes NCHW{{x}}c or NCHW data into NCHW{{x}}c output, "
                                 f"got {data_layout!r} into {out_layout!r}")
    if data_layout == "NCHW":   # one block of every input channel
        batch, in_block, height, width = (int(d) for d in data.shape)
        outer = 1
    else:
        batch, outer, height, width, in_block = (int(d) for d in data.shape)
    sizes = primal_sizes(tuple(int(d) for d in weight.shape), kernel_layout)
    out_channels, in_channels, kernel_h, kernel_w = (sizes[a] for a in "OIHW")
    if in_channels != outer * in_block or out_channels % block:
        raise UnsupportedOpError(
            f"nn.conv2d: {data_layout} data {tuple(data.shape)} and {kernel_layout} weight {tuple(weight.shape)} "
            f"need input channels {outer * in_block} and output channels divisible by {block}")
    (stride_h, stride_w), (dil_h, dil_w) = strides, dilation
    out_h, out_w = conv_output_size((height, width), (kernel_h, kernel_w), strides, padding, dilation)
    accumulate = out_dtype or accumulate_dtype(data.dtype)
    padded = pad_spatial(data, padding, data_layout)
    read_weight = _weight_reader(weight, kernel_layout, in_block, block)
    rco = te.reduce_axis((0, outer), name="rco")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    rci = te.reduce_axis((0, in_block), name="rci")
    if data_layout == "NCHW":
        read_data = lambda b, row, column: padded[b, rci, row, column]  # noqa: E731
    else:
        read_data = lambda b, row, column: padded[b, rco, row, column, rci]  # noqa: E731

    def body(b, oc, y, x, ob):
        row = (y * stride_h if stride_h != 1 else y) + (ry * dil_h if dil_h != 1 else ry)
        column = (x * stride_w if stride_w != 1 else x) + (rx * dil_w if dil_w != 1 else rx)
        value = te.cast(read_data(b, row, column), accumulate) * \
            te.cast(read_weight(oc, ob, rco, rci, ry, rx), accumulate)
        return multiply_sum(value, axis=[rco, ry, rx, rci])

    conv = te.compute((batch, out_channels // block, out_h, out_w, block), body, name="T_conv2d",
                      tag=tags.CONV2D_NCHWC,
                      attrs={"strides": tuple(strides), "dilation": tuple(dilation), "groups": 1,
                             "data_layout": data_layout, "kernel_layout": kernel_layout, "block": block,
                             "out_layout": out_layout})
    if out_dtype is None and accumulate != data.dtype:
        return te.compute(conv.shape, lambda *i: te.cast(conv[i], data.dtype), name="T_conv2d_cast",
                          tag=tags.ELEMWISE)
    return conv


def conv2d(inputs, attrs, out_type):
    """Registry compute of nn.conv2d: blocked NCHW{x}c data here, every other layout pair in ops/nn/conv2d.py."""
    if not data_layout_block(attrs.out_layout or attrs.data_layout):
        return _conv2d.conv2d(inputs, attrs, out_type)
    data, weight = inputs
    return conv2d_nchwc(data, weight, attrs.strides, attrs.padding, attrs.dilation, attrs.data_layout,
                        attrs.kernel_layout, attrs.out_dtype or None, attrs.out_layout)
