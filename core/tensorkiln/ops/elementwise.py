"""ops/elementwise.py: unary math, activations, predicates, clip and cast (tag "elemwise").

Every compute here has the graph registry's signature
`compute(inputs: list[te.Tensor], attrs, out_type) -> te.Tensor` and reads one input
at the output's own index.
"""
from __future__ import annotations

import math
from typing import Callable

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from . import tags
from ._common import const_like, name_of, select

__all__ = ["UNARY_EXPRESSIONS", "ACTIVATIONS", "unary_compute", "activation_compute", "elemwise", "cast", "clip",
           "isinf", "bitwise_not"]


def elemwise(x: te.Tensor, body: Callable, name: str, dtype: str | None = None) -> te.Tensor:
    """`out[i] = body(x[i])`, tagged elemwise; `dtype` casts the result when given."""
    def value(*index):
        result = body(x[index])
        return result if dtype is None else te.cast(result, dtype)
    return te.compute(x.shape, value, name=name, tag=tags.ELEMWISE)


def _softplus(x):
    # max(x, 0) + log(1 + exp(-|x|)): no overflow for large |x|
    return te.max(x, const_like(0, x.dtype)) + te.log(1.0 + te.exp(-te.abs(x)))


def _sign(x):
    zero, one = const_like(0, x.dtype), const_like(1, x.dtype)
    return select(x > zero, one, select(x < zero, const_like(-1, x.dtype) if dtype_of(x.dtype).is_signed
                                          or dtype_of(x.dtype).is_float else zero, zero))


def _sinh(x):
    # (e^x - e^-x) / 2 cancels near 0: a Taylor polynomial there (error < 3e-15 for |x| < 0.1)
    square = x * x
    series = x * (1.0 + square * (1.0 / 6 + square * (1.0 / 120 + square * (1.0 / 5040))))
    return select(te.abs(x) < 0.1, series, (te.exp(x) - te.exp(-x)) * 0.5)


def _asinh(x):
    magnitude = te.abs(x)
    result = te.log(magnitude + te.sqrt(magnitude * magnitude + 1.0))
    return select(x < 0.0, -result, result)


UNARY_EXPRESSIONS: dict[str, Callable] = {
    "sqrt": te.sqrt, "rsqrt": te.rsqrt, "exp": te.exp, "log": te.log, "tanh": te.tanh, "sigmoid": te.sigmoid,
    "erf": te.erf, "floor": te.floor, "ceil": te.ceil, "round": te.round,
    "sin": te.sin, "cos": te.cos, "tan": te.tan, "asin": te.asin, "acos": te.acos, "atan": te.atan,
    "sinh": _sinh, "cosh": lambda x: (te.exp(x) + te.exp(-x)) * 0.5,
    "asinh": _asinh,
    "acosh": lambda x: te.log(x + te.sqrt(x * x - 1.0)),
    "atanh": lambda x: 0.5 * te.log((1.0 + x) / (1.0 - x)),
    "reciprocal": lambda x: const_like(1, x.dtype) / x,
    "nn.softplus": _softplus,
    "nn.softsign": lambda x: x / (1.0 + te.abs(x)),
    "nn.hard_swish": lambda x: x * te.min(te.max(x / 6.0 + 0.5, const_like(0, x.dtype)), const_like(1, x.dtype)),
    "nn.mish": lambda x: x * te.tanh(_softplus(x)),
    "abs": te.abs,
    "negative": lambda x: const_like(0, x.dtype) - x,
    "sign": _sign,
    "nn.relu": lambda x: te.max(x, const_like(0, x.dtype)),
    "copy": lambda x: x,
    "logical_not": lambda x: n.Not(x),
    "isnan": lambda x: n.NE(x, x),
}
"""Graph op name -> te expression builder for the attribute-free unary ops."""


def unary_compute(op_name: str) -> Callable:
    """The registry compute of the attribute-free unary op `op_name`."""
    body = UNARY_EXPRESSIONS[op_name]

    def compute(inputs, attrs, out_type):
        (x,) = inputs
        return elemwise(x, body, name_of(op_name), None if out_type.dtype == x.dtype else out_type.dtype)
    compute.__name__ = f"compute_{name_of(op_name)[2:]}"
    compute.__doc__ = f"te compute of {op_name}: elementwise, tag 'elemwise'."
    return compute


def isinf(inputs, attrs, out_type):
    """isinf with detect_positive / detect_negative."""
    (x,) = inputs

    def body(v):
        positive = v.equal(te.max_value(x.dtype))
        negative = v.equal(te.min_value(x.dtype))
        if attrs.detect_positive and attrs.detect_negative:
            return n.Or(positive, negative)
        if attrs.detect_positive:
            return positive
        if attrs.detect_negative:
            return negative
        return n.IntImm("bool", 0)
    return elemwise(x, body, "T_isinf")


def clip(inputs, attrs, out_type):
    """clip(x, a_min, a_max); integer bounds are clamped to the dtype's range first."""
    (x,) = inputs
    parsed = dtype_of(x.dtype)

    def bound(value, low: bool):
        if value is None:
            return None
        if parsed.is_float:
            return const_like(value, x.dtype)
        info_low = -(1 << (parsed.bits - 1)) if parsed.is_signed else 0
        info_high = (1 << (parsed.bits - 1)) - 1 if parsed.is_signed else (1 << parsed.bits) - 1
        # numpy clips ints against float bounds: floor for the minimum would be wrong for
        # fractional bounds, ceil(a_min) / floor(a_max) give the same integer results.
        value = math.ceil(value) if low else math.floor(value)
        return const_like(min(max(value, info_low), info_high), x.dtype)

    low, high = bound(attrs.a_min, True), bound(attrs.a_max, False)

    def body(v):
        if low is not None:
            v = te.max(v, low)
        if high is not None:
            v = te.min(v, high)
        return v
    return elemwise(x, body, "T_clip")


def cast(inputs, attrs, out_type):
    """cast: float to int truncates toward zero (C and numpy); any to bool is `!= 0`."""
    (x,) = inputs
    target = dtype_of(attrs.dtype)
    if target.is_bool:
        return elemwise(x, lambda v: n.NE(v, const_like(0, x.dtype)), "T_cast")
    return elemwise(x, lambda v: te.cast(v, attrs.dtype), "T_cast")


def _leaky_relu(x, a):
    return select(x >= 0.0, x, x * a.alpha)


def _elu(x, a):
    return select(x > 0.0, x, a.alpha * (te.exp(te.min(x, const_like(0, x.dtype))) - 1.0))


def _celu(x, a):
    zero = const_like(0, x.dtype)
    return te.max(x, zero) + te.min(zero, a.alpha * (te.exp(x / a.alpha) - 1.0))


def _selu(x, a):
    return a.gamma * select(x > 0.0, x, a.alpha * (te.exp(te.min(x, const_like(0, x.dtype))) - 1.0))


def _hard_sigmoid(x, a):
    return te.min(te.max(a.alpha * x + a.beta, const_like(0, x.dtype)), const_like(1, x.dtype))


def _thresholded_relu(x, a):
    return select(x > a.alpha, x, const_like(0, x.dtype))


def _gelu(x, a):
    if a.approximate == "tanh":
        return 0.5 * x * (1.0 + te.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    return 0.5 * x * (1.0 + te.erf(x * (1 / math.sqrt(2))))


ACTIVATIONS: dict[str, Callable] = {
    "nn.leaky_relu": _leaky_relu, "nn.elu": _elu, "nn.celu": _celu, "nn.selu": _selu,
    "nn.hard_sigmoid": _hard_sigmoid, "nn.thresholded_relu": _thresholded_relu, "nn.gelu": _gelu,
}
"""Graph op name -> `(x_expr, attrs) -> expr` for the unary ops with attributes."""


def activation_compute(op_name: str) -> Callable:
    """The registry compute of the activation `op_name` (one that takes attributes)."""
    body = ACTIVATIONS[op_name]

    def compute(inputs, attrs, out_type):
        (x,) = inputs
        if x.dtype == "bfloat16":   # arithmetic in float32, one rounding per op (as onnx's reference)
            return elemwise(x, lambda v: body(te.cast(v, "float32"), attrs), name_of(op_name), dtype="bfloat16")
        return elemwise(x, lambda v: body(v, attrs), name_of(op_name))
    compute.__name__ = f"compute_{name_of(op_name)[2:]}"
    compute.__doc__ = f"te compute of {op_name}: elementwise, tag 'elemwise'."
    return compute


def bitwise_not(inputs, attrs, out_type):
    """~x: x ^ all ones (-1 wraps to the dtype's maximum for unsigned dtypes); `not` for bool."""
    (x,) = inputs
    if dtype_of(x.dtype).is_bool:
        return elemwise(x, n.Not, "T_bitwise_not")
    ones = n.IntImm(x.dtype, (1 << dtype_of(x.dtype).bits) - 1 if not dtype_of(x.dtype).is_signed else -1)
    return elemwise(x, lambda v: n.BitXor(v, ones), "T_bitwise_not")
