"""ops/nn/conv2d.py: NCHW conv2d (strides, padding, dilation, groups, depthwise) and
conv2d_transpose.

    conv2d:  pad (tag "injective.pad", inlined or computed at the conv's tile)
             -> conv (tag "conv2d_nchw" / "group_conv2d_nchw" / "depthwise_conv2d_nchw")
    float16 accumulates in float32 and a cast stage (tag "elemwise") follows, as the
    numpy reference does.
"""
from __future__ import annotations

from .. import tags
from ... import te
from ...tir import nodes as n
from .._common import accumulate_dtype, const_like, select

__all__ = ["pad_nchw", "conv2d_nchw", "conv2d", "conv2d_transpose_nchw", "conv2d_transpose"]

PAD_TAG = "injective.pad"


def pad_nchw(data: te.Tensor, padding: tuple[int, int, int, int], name: str = "T_pad_data",
             value=0, extra: tuple[int, int] = (0, 0)) -> te.Tensor:
    """Zero-pad (or `value`-pad) H and W of NCHW `data`; padding is (top, left, bottom, right).

    `extra` adds rows/columns at the bottom/right (pooling's ceil_mode). No padding: `data` itself.
    """
    top, left, bottom, right = padding
    bottom, right = bottom + extra[0], right + extra[1]
    if not any((top, left, bottom, right)):
        return data
    batch, channels, height, width = data.shape
    fill = const_like(value, data.dtype) if not isinstance(value, n.PrimExpr) else value

    def body(b, c, y, x):
        checks = []
        if top:
            checks.append(y >= top)
        if bottom:
            checks.append(y < top + height)
        if left:
            checks.append(x >= left)
        if right:
            checks.append(x < left + width)
        inside = checks[0]
        for check in checks[1:]:
            inside = n.And(inside, check)
        yy = te.min(te.max(y - top, 0), height - 1) if (top or bottom) else y
        xx = te.min(te.max(x - left, 0), width - 1) if (left or right) else x
        return select(inside, data[b, c, yy, xx], fill)
    shape = (batch, channels, height + top + bottom, width + left + right)
    return te.compute(shape, body, name=name, tag=PAD_TAG)


def conv2d_nchw(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                groups: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """out[b, o, y, x] = sum_{c, ry, rx} pad(data)[b, g*C/G + c, y*sh + ry*dh, x*sw + rx*dw] * w[o, c, ry, rx].

    `g = o // (O/G)` is o's group; depthwise is groups == C == O. Tagged by kind:
    conv2d_nchw (groups 1), depthwise_conv2d_nchw, group_conv2d_nchw.
    """
    batch, channels, height, width = data.shape
    out_channels, group_channels, kernel_h, kernel_w = weight.shape
    (stride_h, stride_w), (dil_h, dil_w) = strides, dilation
    top, left, bottom, right = padding
    out_h = (height + top + bottom - ((kernel_h - 1) * dil_h + 1)) // stride_h + 1
    out_w = (width + left + right - ((kernel_w - 1) * dil_w + 1)) // stride_w + 1
    accumulate = out_dtype or accumulate_dtype(data.dtype)
    padded = pad_nchw(data, padding)
    rc = te.reduce_axis((0, group_channels), name="rc")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    per_group_out = out_channels // groups
    if groups == 1:
        tag = tags.CONV2D_NCHW
    elif groups == channels and out_channels == channels:
        tag = tags.DEPTHWISE_CONV2D_NCHW
    else:
        tag = tags.GROUP_CONV2D_NCHW

    def body(b, o, y, x):
        channel = rc if groups == 1 else (o // per_group_out) * group_channels + rc
        value = padded[b, channel, y * stride_h + ry * dil_h, x * stride_w + rx * dil_w]
        return te.sum(te.cast(value, accumulate) * te.cast(weight[o, rc, ry, rx], accumulate), axis=[rc, ry, rx])
    conv = te.compute((batch, out_channels, out_h, out_w), body, name="T_conv2d", tag=tag,
                      attrs={"strides": tuple(strides), "dilation": tuple(dilation), "groups": groups})
    if out_dtype is None and accumulate != data.dtype:
        return te.compute(conv.shape, lambda *i: te.cast(conv[i], data.dtype), name="T_conv2d_cast",
                          tag=tags.ELEMWISE)
    return conv


def conv2d(inputs, attrs, out_type):
    """Registry compute of nn.conv2d (Conv2DAttrs)."""
    data, weight = inputs
    return conv2d_nchw(data, weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups)


def conv2d_transpose_nchw(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0),
                          dilation=(1, 1), groups: int = 1, output_padding=(0, 0)) -> te.Tensor:
    """Transposed conv as a gather: each output reads the inputs that scatter onto it.

    out[b, o, y, x] = sum_{c, ry, rx} data[b, g*C/G + c, iy, ix] * w[g*C/G + c, o % (O/G), ry, rx]
    over the taps with iy * sh + ry * dh == y + top (and likewise for x); taps whose
    input row is fractional or outside the input are masked out.
    """
    batch, channels, height, width = data.shape
    in_channels, per_group_out, kernel_h, kernel_w = weight.shape
    (stride_h, stride_w), (dil_h, dil_w) = strides, dilation
    top, left, bottom, right = padding
    full_h = (height - 1) * stride_h + (kernel_h - 1) * dil_h + 1 + output_padding[0]
    full_w = (width - 1) * stride_w + (kernel_w - 1) * dil_w + 1 + output_padding[1]
    out_h, out_w = full_h - top - bottom, full_w - left - right
    per_group_in = channels // groups
    accumulate = accumulate_dtype(data.dtype)
    rc = te.reduce_axis((0, per_group_in), name="rc")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")

    def source(position, kernel_index, begin, dil, stride, size):
        offset = position + begin - kernel_index * dil
        index = offset // stride if stride != 1 else offset
        valid = n.And(offset >= 0, index < size)
        if stride != 1:
            valid = n.And(valid, (offset % stride).equal(0))
        return te.min(te.max(index, 0), size - 1), valid

    def body(b, o, y, x):
        channel = (o // per_group_out) * per_group_in + rc if groups != 1 else rc
        iy, valid_y = source(y, ry, top, dil_h, stride_h, height)
        ix, valid_x = source(x, rx, left, dil_w, stride_w, width)
        value = te.cast(data[b, channel, iy, ix], accumulate) * \
            te.cast(weight[channel, o % per_group_out if groups != 1 else o, ry, rx], accumulate)
        return te.sum(select(n.And(valid_y, valid_x), value, const_like(0, accumulate)), axis=[rc, ry, rx])
    conv = te.compute((batch, per_group_out * groups, out_h, out_w), body, name="T_conv2d_transpose",
                      tag=tags.CONV2D_TRANSPOSE_NCHW)
    if accumulate != data.dtype:
        return te.compute(conv.shape, lambda *i: te.cast(conv[i], data.dtype), name="T_conv2d_transpose_cast",
                          tag=tags.ELEMWISE)
    return conv


def conv2d_transpose(inputs, attrs, out_type):
    """Registry compute of nn.conv2d_transpose (Conv2DTransposeAttrs, IOHW weight)."""
    data, weight = inputs
    return conv2d_transpose_nchw(data, weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                                 attrs.output_padding)
