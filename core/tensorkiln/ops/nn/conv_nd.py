"""ops/nn/conv_nd.py: te compute of nn.conv (graph/ops/conv_nd.py), the convolution of any spatial rank.

One reduction over a group's input channels and the kernel taps, tagged "comm_reduce" so every
target schedules it with its generic reduction schedule; 1-D and 2-D convolutions keep nn.conv2d's
computes and tuned schedules (ops/nn/conv2d.py).
"""
from __future__ import annotations

from ... import te
from .. import tags
from .._common import accumulate_dtype
from .window_nd import _pad

__all__ = ["conv"]


def conv(inputs, attrs, out_type):
    """Registry compute of nn.conv: out[b, o, p...] = sum_{c, t...} padded[b, g(o) * C/groups + c,
    p * stride + t * dilation...] * weight[o, c, t...]; float16 / bfloat16 accumulate in float32 and
    cast back after it."""
    data, weight = inputs
    out_shape = tuple(out_type.shape)
    rank = len(attrs.strides)
    per_group_in, kernel = int(weight.shape[1]), tuple(int(k) for k in weight.shape[2:])
    per_group_out = int(weight.shape[0]) // attrs.groups
    accumulate = accumulate_dtype(data.dtype)
    padded = _pad(data, attrs.padding[:rank], attrs.padding[rank:], 0)
    rc = te.reduce_axis((0, per_group_in), name="rc")
    taps = [te.reduce_axis((0, k), name=f"r{a}") for a, k in enumerate(kernel)]

    def body(b, o, *position):
        channel = (o // per_group_out) * per_group_in + rc if attrs.groups != 1 else rc
        source = (b, channel, *(position[a] * attrs.strides[a] + taps[a] * attrs.dilation[a] for a in range(rank)))
        return te.sum(te.cast(padded[source], accumulate) * te.cast(weight[(o, rc, *taps)], accumulate),
                      axis=[rc, *taps])
    result = te.compute(out_shape, body, name="T_conv_nd", tag=tags.COMM_REDUCE)
    if accumulate != data.dtype:
        return te.compute(out_shape, lambda *i: te.cast(result[i], data.dtype), name="T_conv_nd_cast",
                          tag=tags.ELEMWISE)
    return result
