"""ops/nn/norm.py: batch_norm (inference, injective), layer_norm and lrn (reductions).

    layer_norm:  mean (T_layer_norm_mean), variance of x - mean (T_layer_norm_var), both
                 "comm_reduce", then the normalized output (tag "norm").
    lrn:         windowed sum of squares along `axis` (T_lrn_sqsum, "comm_reduce"), then
                 x / (bias + alpha / size * sum) ** beta (tag "norm").
"""
from __future__ import annotations

from .. import tags
from ... import te
from ...tir import nodes as n
from .._common import accumulate_dtype, broadcast_indices, const_like, normalize_axis, select

__all__ = ["batch_norm", "layer_norm", "lrn"]


def batch_norm(inputs, attrs, out_type):
    """(x - mean) * gamma / sqrt(var + epsilon) + beta along `axis`: one injective stage."""
    data, gamma, beta, mean, var = inputs
    axis = normalize_axis(attrs.axis, data.ndim)
    accumulate = accumulate_dtype(data.dtype)

    def body(*i):
        c = i[axis]

        def cast(v):
            return te.cast(v, accumulate)
        scale = cast(gamma[c]) / te.sqrt(cast(var[c]) + attrs.epsilon)
        return te.cast((cast(data[i]) - cast(mean[c])) * scale + cast(beta[c]), data.dtype)
    return te.compute(data.shape, body, name="T_batch_norm", tag=tags.BROADCAST)


def layer_norm(inputs, attrs, out_type):
    """Normalize over axes [axis, ndim), then * gamma + beta (broadcast to those axes)."""
    data, gamma, beta = inputs
    axis = normalize_axis(attrs.axis, data.ndim)
    accumulate = accumulate_dtype(data.dtype)
    normalized = data.shape[axis:]
    count = 1
    for size in normalized:
        count *= size
    outer = data.shape[:axis]

    def reduce_axes(name):
        return [te.reduce_axis((0, size), name=f"{name}{a}") for a, size in enumerate(normalized)]

    r1, r2 = reduce_axes("r"), reduce_axes("s")
    inverse = const_like(1.0 / count, accumulate)

    def value(index):
        return te.cast(data[index], accumulate)
    mean = te.compute(outer, lambda *i: te.sum(value(tuple(i) + tuple(r1)) * inverse, axis=r1),
                      name="T_layer_norm_mean", tag=tags.COMM_REDUCE)

    def variance(*i):
        centered = value(tuple(i) + tuple(r2)) - mean[i]
        return te.sum(centered * centered * inverse, axis=r2)
    var = te.compute(outer, variance, name="T_layer_norm_var", tag=tags.COMM_REDUCE)

    def body(*i):
        head, tail = i[:axis], i[axis:]
        scale = te.cast(gamma[broadcast_indices(tail, gamma.shape, normalized)], accumulate)
        shift = te.cast(beta[broadcast_indices(tail, beta.shape, normalized)], accumulate)
        normal = (value(i) - mean[head]) / te.sqrt(var[head] + attrs.epsilon)
        return te.cast(normal * scale + shift, data.dtype)
    return te.compute(data.shape, body, name="T_layer_norm", tag=tags.NORM)


def lrn(inputs, attrs, out_type):
    """Local response normalization across `axis` with a window of `size` (ONNX LRN)."""
    (data,) = inputs
    axis = normalize_axis(attrs.axis, data.ndim)
    accumulate = accumulate_dtype(data.dtype)
    before = (attrs.size - 1) // 2
    channels = data.shape[axis]
    r = te.reduce_axis((0, attrs.size), name="r")

    def sqsum(*i):
        position = i[axis] + r - before
        index = list(i)
        index[axis] = te.min(te.max(position, 0), channels - 1)
        v = te.cast(data[tuple(index)], accumulate)
        inside = n.And(position >= 0, position < channels)
        return te.sum(select(inside, v * v, const_like(0, accumulate)), axis=r)
    total = te.compute(data.shape, sqsum, name="T_lrn_sqsum", tag=tags.COMM_REDUCE)

    def body(*i):
        denominator = power(attrs.bias + (attrs.alpha / attrs.size) * total[i], attrs.beta, accumulate)
        return te.cast(te.cast(data[i], accumulate) / denominator, data.dtype)
    return te.compute(data.shape, body, name="T_lrn", tag=tags.NORM)


def power(base, exponent: float, dtype: str):
    """base ** exponent for a constant exponent, with square roots where the exponent allows.

    LRN's beta is 0.75 in every model we have seen; pow has no vector instruction and
    becomes one libm call per lane (inception_v1's two LRNs took 5-7 ms of 30), while
    sqrt(b) * sqrt(sqrt(b)) is three vector square roots and a multiply, within 2 ulp.
    """
    if exponent == 1.0:
        return base
    if exponent == 0.5:
        return te.sqrt(base)
    if exponent == 0.75:
        root = te.sqrt(base)
        return root * te.sqrt(root)
    return te.pow(base, const_like(exponent, dtype))
