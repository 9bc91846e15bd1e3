"""ops/nn/softmax.py: numerically stable softmax and log_softmax along any axis.

    max  = max_k x[.., k, ..]                      (T_softmax_max, comm_reduce)
    sum  = sum_k exp(x[.., k, ..] - max)           (T_softmax_expsum, comm_reduce)
    out  = exp(x - max) / sum                      (T_softmax, tag "softmax_output")
    log  = x - max - log(sum)                      (T_log_softmax, tag "log_softmax_output")

float16 computes in float32 and casts the result, as the numpy reference does.
"""
from __future__ import annotations

from .. import tags
from ... import te
from .._common import accumulate_dtype, normalize_axis

__all__ = ["softmax", "log_softmax", "softmax_stages"]


def softmax_stages(x: te.Tensor, axis: int, log: bool) -> te.Tensor:
    """The three stages above; the result is the last one."""
    axis = normalize_axis(axis, x.ndim)
    accumulate = accumulate_dtype(x.dtype)
    reduced_shape = tuple(d for a, d in enumerate(x.shape) if a != axis)

    def along(i, position):
        """Input index from a reduced index `i` plus `position` on `axis`."""
        return tuple(i[:axis]) + (position,) + tuple(i[axis:])

    k1 = te.reduce_axis((0, x.shape[axis]), name="k1")
    k2 = te.reduce_axis((0, x.shape[axis]), name="k2")

    def value(index):
        return te.cast(x[index], accumulate)
    maximum = te.compute(reduced_shape, lambda *i: te.max(value(along(i, k1)), axis=k1),
                         name="T_softmax_max", tag=tags.COMM_REDUCE)
    expsum = te.compute(reduced_shape, lambda *i: te.sum(te.exp(value(along(i, k2)) - maximum[i]), axis=k2),
                        name="T_softmax_expsum", tag=tags.COMM_REDUCE)

    def reduced(i):
        return tuple(i[:axis]) + tuple(i[axis + 1:])
    if log:
        return te.compute(x.shape, lambda *i: te.cast(value(i) - maximum[reduced(i)] - te.log(expsum[reduced(i)]),
                                                      x.dtype),
                          name="T_log_softmax", tag=tags.LOG_SOFTMAX, attrs={"axis": axis})
    return te.compute(x.shape, lambda *i: te.cast(te.exp(value(i) - maximum[reduced(i)]) / expsum[reduced(i)],
                                                  x.dtype),
                      name="T_softmax", tag=tags.SOFTMAX, attrs={"axis": axis})


def softmax(inputs, attrs, out_type):
    """Registry compute of nn.softmax."""
    (x,) = inputs
    return softmax_stages(x, attrs.axis, log=False)


def log_softmax(inputs, attrs, out_type):
    """Registry compute of nn.log_softmax."""
    (x,) = inputs
    return softmax_stages(x, attrs.axis, log=True)
