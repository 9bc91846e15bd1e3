"""ops/nn/pooling.py: NCHW, NHWC or NCHW{x}c max/avg pooling (padding, dilation, ceil_mode, count_include_pad)
and global pooling over every spatial axis. Tags "pool" and "global_pool".
"""
from __future__ import annotations

from .. import tags
from ... import te
from .._common import accumulate_dtype, ceil_div, const_like
from ..reduction import reduce
from .conv2d import pad_spatial

__all__ = ["max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool", "pool2d", "pool2d_nchw"]


def _needed(out_size: int, stride: int, kernel: int, dilation: int) -> int:
    return (out_size - 1) * stride + (kernel - 1) * dilation + 1


def _window_count(start, kernel: int, dilation: int, low: int, high: int):
    """How many taps start + r * dilation (0 <= r < kernel) fall in [low, high): closed form."""
    first = te.max(ceil_div(low - start, dilation), 0)
    last = te.min(ceil_div(high - start, dilation), kernel)
    return te.max(last - first, 0)


def pool2d_nchw(data: te.Tensor, kind: str, out_shape, pool_size, strides, padding, dilation,
                count_include_pad: bool = False) -> te.Tensor:
    """Max or average pooling of NCHW data with an explicit output shape (the type rule decides ceil_mode)."""
    return pool2d(data, kind, out_shape, pool_size, strides, padding, dilation, count_include_pad, "NCHW")


def _named(layout: str, body):
    """body(index tuple) as a te.compute lambda whose axes are named b, c, y, x in `layout`'s order."""
    if layout == "NCHW":
        return lambda b, c, y, x: body((b, c, y, x))
    if layout.startswith("NCHW"):   # blocked NCHW{x}c: the inner channel block last
        return lambda b, c, y, x, cb: body((b, c, y, x, cb))
    return lambda b, y, x, c: body((b, y, x, c))


def pool2d(data: te.Tensor, kind: str, out_shape, pool_size, strides, padding, dilation,
           count_include_pad: bool = False, layout: str = "NCHW") -> te.Tensor:
    """Max or average pooling of `data` in `layout` (NCHW, NHWC or NCHW{x}c); the output is in `layout`.

    The anchor stage carries attrs={"layout": layout} so a target's schedule can tell the
    axes apart (NHWC vectorizes channels, NCHW the output width).
    """
    h_axis, w_axis = layout.index("H"), layout.index("W")
    height, width = data.shape[h_axis], data.shape[w_axis]
    out_h, out_w = out_shape[h_axis], out_shape[w_axis]
    (kernel_h, kernel_w), (stride_h, stride_w), (dil_h, dil_w) = pool_size, strides, dilation
    top, left, bottom, right = padding
    extra = (max(0, _needed(out_h, stride_h, kernel_h, dil_h) - (height + top + bottom)),
             max(0, _needed(out_w, stride_w, kernel_w, dil_w) - (width + left + right)))
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    attrs = {"layout": layout}

    def window(padded, index):
        """padded[...] at tap (ry, rx) of the window of output `index`."""
        at = list(index)
        at[h_axis] = index[h_axis] * stride_h + ry * dil_h
        at[w_axis] = index[w_axis] * stride_w + rx * dil_w
        return padded[tuple(at)]

    if kind == "max":
        padded = pad_spatial(data, padding, layout, value=te.min_value(data.dtype), extra=extra)
        return te.compute(tuple(out_shape), _named(layout, lambda i: te.max(window(padded, i), axis=[ry, rx])),
                          name="T_max_pool2d", tag=tags.POOL, attrs=attrs)
    accumulate = accumulate_dtype(data.dtype)
    padded = pad_spatial(data, padding, layout, extra=extra)
    total = te.compute(tuple(out_shape), _named(layout, lambda i: te.sum(te.cast(window(padded, i), accumulate),
                                                                      axis=[ry, rx])),
                       name="T_avg_pool2d_sum", tag=tags.POOL, attrs=attrs)
    # Divisor: input cells in the window, plus explicit padding when count_include_pad;
    # ceil_mode's extra end padding never counts.
    low_h, high_h = (0, height + top + bottom) if count_include_pad else (top, top + height)
    low_w, high_w = (0, width + left + right) if count_include_pad else (left, left + width)

    def average(i):
        count = (_window_count(i[h_axis] * stride_h, kernel_h, dil_h, low_h, high_h)
                 * _window_count(i[w_axis] * stride_w, kernel_w, dil_w, low_w, high_w))
        count = te.cast(te.max(count, 1), accumulate)
        return te.cast(total[i] / count, data.dtype)
    return te.compute(tuple(out_shape), _named(layout, average), name="T_avg_pool2d", tag=tags.ELEMWISE)


def max_pool2d(inputs, attrs, out_type):
    """Registry compute of nn.max_pool2d."""
    (data,) = inputs
    return pool2d(data, "max", out_type.shape, attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation,
                  layout=attrs.layout)


def avg_pool2d(inputs, attrs, out_type):
    """Registry compute of nn.avg_pool2d."""
    (data,) = inputs
    return pool2d(data, "avg", out_type.shape, attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation,
                  attrs.count_include_pad, attrs.layout)


def global_max_pool(inputs, attrs, out_type):
    """Max over every axis after (N, C), keeping them with size 1."""
    (data,) = inputs
    return reduce(data, te.max, range(2, data.ndim), True, "T_global_max_pool", tag=tags.GLOBAL_POOL)


def global_avg_pool(inputs, attrs, out_type):
    """Mean over every axis after (N, C), keeping them with size 1."""
    (data,) = inputs
    accumulate = accumulate_dtype(data.dtype)
    total = reduce(data, te.sum, range(2, data.ndim), True, "T_global_avg_pool_sum", accumulate,
                   tag=tags.GLOBAL_POOL)
    count = 1
    for size in data.shape[2:]:
        count *= size
    divisor = const_like(max(count, 1), accumulate)
    return te.compute(total.shape, lambda *i: te.cast(total[i] / divisor, data.dtype), name="T_global_avg_pool",
                      tag=tags.ELEMWISE)

