"""ops/nn/pooling.py: NCHW max/avg pooling (padding, dilation, ceil_mode, count_include_pad)
and global pooling over every spatial axis. Tags "pool" and "global_pool".
"""
from __future__ import annotations

from .. import tags
from ... import te
from .._common import accumulate_dtype, ceil_div, const_like
from ..reduction import reduce
from .conv2d import pad_nchw

__all__ = ["max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool", "pool2d_nchw"]


def _needed(out_size: int, stride: int, kernel: int, dilation: int) -> int:
    return (out_size - 1) * stride + (kernel - 1) * dilation + 1


def _window_count(start, kernel: int, dilation: int, low: int, high: int):
    """How many taps start + r * dilation (0 <= r < kernel) fall in [low, high): closed form."""
    first = te.max(ceil_div(low - start, dilation), 0)
    last = te.min(ceil_div(high - start, dilation), kernel)
    return te.max(last - first, 0)


def pool2d_nchw(data: te.Tensor, kind: str, out_shape, pool_size, strides, padding, dilation,
                count_include_pad: bool = False) -> te.Tensor:
    """Max or average pooling with an explicit output shape (the type rule decides ceil_mode)."""
    batch, channels, height, width = data.shape
    out_h, out_w = out_shape[2], out_shape[3]
    (kernel_h, kernel_w), (stride_h, stride_w), (dil_h, dil_w) = pool_size, strides, dilation
    top, left, bottom, right = padding
    extra = (max(0, _needed(out_h, stride_h, kernel_h, dil_h) - (height + top + bottom)),
             max(0, _needed(out_w, stride_w, kernel_w, dil_w) - (width + left + right)))
    ry = te.reduce_axis((0, kernel_h), name="ry")
    rx = te.reduce_axis((0, kernel_w), name="rx")
    if kind == "max":
        padded = pad_nchw(data, padding, value=te.min_value(data.dtype), extra=extra)
        return te.compute((batch, channels, out_h, out_w),
                          lambda b, c, y, x: te.max(padded[b, c, y * stride_h + ry * dil_h, x * stride_w + rx * dil_w],
                                                    axis=[ry, rx]),
                          name="T_max_pool2d", tag=tags.POOL)
    accumulate = accumulate_dtype(data.dtype)
    padded = pad_nchw(data, padding, extra=extra)
    total = te.compute((batch, channels, out_h, out_w),
                       lambda b, c, y, x: te.sum(te.cast(padded[b, c, y * stride_h + ry * dil_h,
                                                                 x * stride_w + rx * dil_w], accumulate),
                                                 axis=[ry, rx]),
                       name="T_avg_pool2d_sum", tag=tags.POOL)
    # Divisor: input cells in the window, plus explicit padding when count_include_pad;
    # ceil_mode's extra end padding never counts.
    low_h, high_h = (0, height + top + bottom) if count_include_pad else (top, top + height)
    low_w, high_w = (0, width + left + right) if count_include_pad else (left, left + width)

    def average(b, c, y, x):
        count = (_window_count(y * stride_h, kernel_h, dil_h, low_h, high_h)
                 * _window_count(x * stride_w, kernel_w, dil_w, low_w, high_w))
        count = te.cast(te.max(count, 1), accumulate)
        return te.cast(total[b, c, y, x] / count, data.dtype)
    return te.compute((batch, channels, out_h, out_w), average, name="T_avg_pool2d", tag=tags.ELEMWISE)


def max_pool2d(inputs, attrs, out_type):
    """Registry compute of nn.max_pool2d."""
    (data,) = inputs
    return pool2d_nchw(data, "max", out_type.shape, attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation)


def avg_pool2d(inputs, attrs, out_type):
    """Registry compute of nn.avg_pool2d."""
    (data,) = inputs
    return pool2d_nchw(data, "avg", out_type.shape, attrs.pool_size, attrs.strides, attrs.padding, attrs.dilation,
                       attrs.count_include_pad)


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

