"""ops/nn/conv2d.py: conv2d in every layout nn.conv2d accepts (data NCHW or NHWC; weight
OIHW, HWIO, OHWI or blocked such as OHWI16o), with strides, padding, dilation, groups and depthwise; and
conv2d_transpose (NCHW / IOHW).

    conv2d:  pad (tag "injective.pad", materialized by the schedule; for an NCHW conv with a
             column stride, split into column phases as well: T_pad_phases, same tag)
             -> conv (tag "conv2d_nchw" / "group_conv2d_nchw" / "depthwise_conv2d_nchw" for NCHW
                      data, "conv2d_nhwc" for NHWC data, whatever the weight layout)
    float16 accumulates in float32 and a cast stage (tag "elemwise") follows, as the
    numpy reference does.

The NHWC compute reduces over (ry, rx, rc) and the NCHW one over (rc, ry, rx): the
schedules in ops/schedule/anchors.py rely on that order.
"""
from __future__ import annotations

from .. import tags
from ... import te
from ...graph.ops.layout import layout_index, primal_sizes
from ...graph.ops.nn import KERNEL_LAYOUTS, is_blocked_kernel_layout
from ...ir.errors import UnsupportedOpError
from ...tir import nodes as n
from .._common import accumulate_dtype, const_like, select
from ._accumulate import multiply_sum

__all__ = ["pad_nchw", "pad_spatial", "conv2d_nchw", "conv2d_nhwc", "conv2d_layout", "conv2d",
           "conv2d_transpose_nchw", "conv2d_transpose", "DATA_LAYOUTS", "KERNEL_LAYOUTS"]

PAD_TAG = "injective.pad"
DATA_LAYOUTS = ("NCHW", "NHWC")
PHASE_MIN_OUTPUTS_PER_INPUT = 8
"""A strided NCHW conv reads its input split into column phases (one more pass over the input)
when each input channel feeds at least this many output channels; a depthwise conv reads each
input a few times only, and gathering costs it less than the extra pass."""


def pad_spatial(data: te.Tensor, padding: tuple[int, int, int, int], layout: str = "NCHW",
                name: str = "T_pad_data", value=0, extra: tuple[int, int] = (0, 0)) -> te.Tensor:
    """Zero-pad (or `value`-pad) the H and W axes of `data` in `layout`; padding is (top, left, bottom, right).

    `extra` adds rows/columns at the bottom/right (pooling's ceil_mode). No padding: `data` itself.
    """
    top, left, bottom, right = padding
    bottom, right = bottom + extra[0], right + extra[1]
    if not any((top, left, bottom, right)):
        return data
    h_axis, w_axis = layout.index("H"), layout.index("W")
    height, width = data.shape[h_axis], data.shape[w_axis]
    fill = const_like(value, data.dtype) if not isinstance(value, n.PrimExpr) else value

    def body(*index):
        y, x = index[h_axis], index[w_axis]
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
        source = list(index)
        source[h_axis] = te.min(te.max(y - top, 0), height - 1) if (top or bottom) else y
        source[w_axis] = te.min(te.max(x - left, 0), width - 1) if (left or right) else x
        return select(inside, data[tuple(source)], fill)
    shape = list(data.shape)
    shape[h_axis] = height + top + bottom
    shape[w_axis] = width + left + right
    return te.compute(tuple(shape), body, name=name, tag=PAD_TAG)


def conv_output_size(size: tuple[int, int], kernel: tuple[int, int], strides, padding, dilation) -> tuple[int, int]:
    """(out_h, out_w) of a conv or pool window over `size` (h, w); padding is (top, left, bottom, right)."""
    (height, width), (kernel_h, kernel_w) = size, kernel
    (stride_h, stride_w), (dil_h, dil_w) = strides, dilation
    top, left, bottom, right = padding
    return ((height + top + bottom - ((kernel_h - 1) * dil_h + 1)) // stride_h + 1,
            (width + left + right - ((kernel_w - 1) * dil_w + 1)) // stride_w + 1)


def pad_nchw(data: te.Tensor, padding: tuple[int, int, int, int], name: str = "T_pad_data",
             value=0, extra: tuple[int, int] = (0, 0)) -> te.Tensor:
    """`pad_spatial` of NCHW data (pooling and the NCHW conv use it)."""
    return pad_spatial(data, padding, "NCHW", name=name, value=value, extra=extra)


def _reader(tensor: te.Tensor, layout: str, logical: str):
    """read(*logical_index) -> tensor[index in `layout`]: read("NCHW" indices) of an NHWC tensor."""
    order = [logical.index(axis) for axis in layout]
    return lambda *index: tensor[tuple(index[p] for p in order)]


def _weight_reader(weight: te.Tensor, kernel_layout: str):
    """read(o, i, h, w) -> the weight element, in a plain or a blocked layout ("OHWI16o": weight[o // 16, h, w, i, o % 16])."""
    if kernel_layout in KERNEL_LAYOUTS:
        return _reader(weight, kernel_layout, "OIHW")
    return lambda o, i, h, w: weight[layout_index(kernel_layout, {"O": o, "I": i, "H": h, "W": w})]


def _check_layouts(data_layout: str, kernel_layout: str) -> None:
    if data_layout not in DATA_LAYOUTS or (kernel_layout not in KERNEL_LAYOUTS
                                           and not is_blocked_kernel_layout(kernel_layout)):
        raise UnsupportedOpError(
            f"nn.conv2d: data layout {data_layout!r} with kernel layout {kernel_layout!r} has no te compute; "
            f"data must be one of {DATA_LAYOUTS} and the weight one of {KERNEL_LAYOUTS} or blocked (OHWI16o) "
            "(insert a layout_transform before the conv)")


def conv2d_layout(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                  groups: int = 1, data_layout: str = "NCHW", kernel_layout: str = "OIHW",
                  out_dtype: str | None = None) -> te.Tensor:
    """conv2d of `data` in `data_layout` with `weight` in `kernel_layout`; the output is in `data_layout`.

    out[b, o, y, x] = sum_{c, ry, rx} pad(data)[b, g*C/G + c, y*sh + ry*dh, x*sw + rx*dw] * w[o, c, ry, rx]
    (indices written NCHW / OIHW; each tensor is read in its own layout). `g = o // (O/G)` is
    o's group; depthwise is groups == C == O.
    """
    _check_layouts(data_layout, kernel_layout)
    logical_data = dict(zip(data_layout, data.shape))
    logical_weight = primal_sizes(tuple(int(d) for d in weight.shape), kernel_layout)
    batch, channels, height, width = (logical_data[a] for a in "NCHW")
    out_channels, group_channels, kernel_h, kernel_w = (logical_weight[a] for a in "OIHW")
    (stride_h, stride_w), (dil_h, dil_w) = strides, dilation
    out_h, out_w = conv_output_size((height, width), (kernel_h, kernel_w), strides, padding, dilation)
    accumulate = out_dtype or accumulate_dtype(data.dtype)
    padded_tensor = pad_spatial(data, padding, data_layout)
    phased = None
    if data_layout == "NCHW" and stride_w > 1 and out_channels // groups >= PHASE_MIN_OUTPUTS_PER_INPUT:
        phased = _split_width_phases(padded_tensor, stride_w)
    else:
        padded = _reader(padded_tensor, data_layout, "NCHW")
    read_weight = _weight_reader(weight, kernel_layout)
    rc = te.reduce_axis((0, group_channels), name="rc")
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    per_group_out = out_channels // groups
    is_nhwc = data_layout == "NHWC"
    if is_nhwc:
        tag = tags.CONV2D_NHWC
    elif groups == 1:
        tag = tags.CONV2D_NCHW
    elif groups == channels and out_channels == channels:
        tag = tags.DEPTHWISE_CONV2D_NCHW
    else:
        tag = tags.GROUP_CONV2D_NCHW

    def value(b, o, y, x):
        if groups == 1:
            channel = rc
        elif group_channels == 1:
            channel = o // per_group_out  # depthwise (multiplier per_group_out): no rc term to simplify away
        else:
            channel = (o // per_group_out) * group_channels + rc
        if phased is not None:  # column x * sw + rx * dw is phase (rx * dw) % sw, x + (rx * dw) // sw
            offset = _scaled(rx, dil_w)
            data_value = phased[b, channel, _scaled(y, stride_h) + _scaled(ry, dil_h), offset % stride_w,
                                x + offset // stride_w]
        else:
            data_value = padded(b, channel, _scaled(y, stride_h) + _scaled(ry, dil_h),
                                _scaled(x, stride_w) + _scaled(rx, dil_w))
        return te.cast(data_value, accumulate) * te.cast(read_weight(o, rc, ry, rx), accumulate)

    if is_nhwc:
        shape = (batch, out_h, out_w, out_channels)
        body = lambda b, y, x, o: multiply_sum(value(b, o, y, x), axis=[ry, rx, rc])  # noqa: E731
    else:
        shape = (batch, out_channels, out_h, out_w)
        body = lambda b, o, y, x: multiply_sum(value(b, o, y, x), axis=[rc, ry, rx])  # noqa: E731
    conv = te.compute(shape, body, name="T_conv2d", tag=tag,
                      attrs={"strides": tuple(strides), "dilation": tuple(dilation), "groups": groups,
                             "data_layout": data_layout, "kernel_layout": kernel_layout})
    if out_dtype is None and accumulate != data.dtype:
        return te.compute(conv.shape, lambda *i: te.cast(conv[i], data.dtype), name="T_conv2d_cast",
                          tag=tags.ELEMWISE)
    return conv


def _scaled(index, factor: int):
    """index * factor, without the multiplication when factor is 1: a stride-1 conv reads data[y + ry],
    which tensorize matches as a row offset (see te/tensorize.py)."""
    return index if factor == 1 else index * factor


def _split_width_phases(padded: te.Tensor, stride: int) -> te.Tensor:
    """phases[b, c, y, p, q] = padded[b, c, y, q * stride + p] (0 past the right edge), tag "injective.pad".

    A strided NCHW conv reads columns x * stride + rx: split into `stride` phases, the
    columns an output row reads are contiguous in x, so the width-vectorized schedule
    loads vectors instead of gathering. Materialized once, like the padding.
    """
    batch, channels, height, width = padded.shape
    columns = -(-int(width) // stride)

    def body(b, c, y, phase, q):
        column = q * stride + phase
        if int(width) % stride == 0:
            return padded[b, c, y, column]
        return select(column < width, padded[b, c, y, te.min(column, width - 1)], const_like(0, padded.dtype))
    return te.compute((batch, channels, height, stride, columns), body, name="T_pad_phases", tag=PAD_TAG)


def conv2d_nchw(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                groups: int = 1, out_dtype: str | None = None) -> te.Tensor:
    """NCHW data, OIHW weight (see `conv2d_layout`). Tagged by kind: conv2d_nchw (groups 1),
    depthwise_conv2d_nchw, group_conv2d_nchw."""
    return conv2d_layout(data, weight, strides, padding, dilation, groups, "NCHW", "OIHW", out_dtype)


def conv2d_nhwc(data: te.Tensor, weight: te.Tensor, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                groups: int = 1, kernel_layout: str = "HWIO", out_dtype: str | None = None) -> te.Tensor:
    """NHWC data, HWIO (or OHWI, OIHW) weight, NHWC output (see `conv2d_layout`); tag conv2d_nhwc."""
    return conv2d_layout(data, weight, strides, padding, dilation, groups, "NHWC", kernel_layout, out_dtype)


def conv2d(inputs, attrs, out_type):
    """Registry compute of nn.conv2d (Conv2DAttrs): every data / kernel layout pair the op accepts."""
    data, weight = inputs
    return conv2d_layout(data, weight, attrs.strides, attrs.padding, attrs.dilation, attrs.groups,
                         attrs.data_layout, attrs.kernel_layout, attrs.out_dtype or None)


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
