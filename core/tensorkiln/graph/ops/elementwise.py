"""Elementwise and broadcasting ops: unary math, activations, binary arithmetic,
comparisons, logic, where and cast."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...ir.dtypes import dtype_of, to_numpy
from ...ir.errors import DTypeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import broadcast_shape, same_dtype, tensor_args

__all__ = ["LeakyReluAttrs", "ClipAttrs", "EluAttrs", "SeluAttrs", "HardSigmoidAttrs", "GeluAttrs",
           "CastAttrs", "AlphaAttrs"]

_FLOAT_TOLERANCE = {"float16": 2e-3}


# ---- unary ---------------------------------------------------------------------------

def _unary_type(op: str, result_dtype: str | None = None, require: str | None = None):
    def rule(arg_types, attrs):
        (x,) = tensor_args(op, arg_types)
        kind = dtype_of(x.dtype)
        if require == "float" and not kind.is_float:
            raise DTypeError(f"{op}: needs a floating-point input, got {x.dtype}; cast it first")
        if require == "bool" and not kind.is_bool:
            raise DTypeError(f"{op}: needs a bool input, got {x.dtype}")
        if require == "int" and not kind.is_int:
            raise DTypeError(f"{op}: needs an integer input, got {x.dtype}")
        return TensorType(x.shape, result_dtype or x.dtype)
    return rule


def _same_dtype_result(fn):
    def reference(x, attrs):
        # bfloat16: computed in float32 and rounded once, as onnx's reference and the te computes do (a
        # chain of ml_dtypes ufuncs would round after each step: celu(-0.5, alpha=2) one ulp off)
        source = x.astype(np.float32) if x.dtype.name == "bfloat16" else x
        with np.errstate(all="ignore"):
            return np.asarray(fn(source, attrs)).astype(x.dtype, copy=False)
    return reference


def _erf(x):
    return np.vectorize(math.erf, otypes=[np.float64])(x) if x.size else x.astype(np.float64)


def _sigmoid(x):
    # Stable for large |x| in both directions.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1.0 / (1.0 + np.exp(-x[positive]))
    exp_x = np.exp(x[~positive])
    out[~positive] = exp_x / (1.0 + exp_x)
    return out


_UNARY_FLOAT = {
    "sqrt": np.sqrt, "rsqrt": lambda x: 1.0 / np.sqrt(x), "exp": np.exp, "log": np.log,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
    "tanh": np.tanh, "sigmoid": _sigmoid, "erf": _erf, "reciprocal": np.reciprocal,
    "floor": np.floor, "ceil": np.ceil, "round": np.round, "nn.softplus": lambda x: np.logaddexp(0, x),
    "nn.softsign": lambda x: x / (1 + np.abs(x)),
    "nn.hard_swish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "nn.mish": lambda x: x * np.tanh(np.logaddexp(0, x)),
}
_UNARY_ANY = {"abs": np.abs, "negative": np.negative, "sign": np.sign, "nn.relu": lambda x: np.maximum(x, 0),
              "copy": np.copy}

for _name, _fn in _UNARY_FLOAT.items():
    register_op(_name, type_rule=_unary_type(_name, require="float"),
                reference=_same_dtype_result(lambda x, attrs, f=_fn: f(x)),
                pattern=OpPattern.ELEMWISE, num_inputs=1, tolerance=_FLOAT_TOLERANCE)
for _name, _fn in _UNARY_ANY.items():
    register_op(_name, type_rule=_unary_type(_name), reference=_same_dtype_result(lambda x, attrs, f=_fn: f(x)),
                pattern=OpPattern.ELEMWISE, num_inputs=1)

register_op("logical_not", type_rule=_unary_type("logical_not", require="bool"),
            reference=lambda x, attrs: np.logical_not(x), pattern=OpPattern.ELEMWISE, num_inputs=1)
register_op("bitwise_not", type_rule=_unary_type("bitwise_not", require="int"),
            reference=lambda x, attrs: np.invert(x), pattern=OpPattern.ELEMWISE, num_inputs=1)
register_op("isnan", type_rule=_unary_type("isnan", "bool", require="float"),
            reference=lambda x, attrs: np.isnan(x), pattern=OpPattern.ELEMWISE, num_inputs=1)


@dataclass(frozen=True, slots=True)
class IsInfAttrs(Attrs):
    detect_positive: bool = True
    detect_negative: bool = True


register_op("isinf", attrs=IsInfAttrs, type_rule=_unary_type("isinf", "bool", require="float"),
            reference=lambda x, a: (np.isposinf(x) & a.detect_positive) | (np.isneginf(x) & a.detect_negative),
            pattern=OpPattern.ELEMWISE, num_inputs=1)


# ---- unary with attributes -------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class AlphaAttrs(Attrs):
    """One scalar parameter (elu, celu, thresholded_relu)."""
    alpha: float = 1.0


@dataclass(frozen=True, slots=True)
class LeakyReluAttrs(Attrs):
    alpha: float = 0.01


@dataclass(frozen=True, slots=True)
class ClipAttrs(Attrs):
    """clip(x, a_min, a_max); None means unbounded on that side."""
    a_min: float | None = None
    a_max: float | None = None


@dataclass(frozen=True, slots=True)
class EluAttrs(Attrs):
    alpha: float = 1.0


@dataclass(frozen=True, slots=True)
class SeluAttrs(Attrs):
    alpha: float = 1.6732632423543772
    gamma: float = 1.0507009873554805


@dataclass(frozen=True, slots=True)
class HardSigmoidAttrs(Attrs):
    alpha: float = 0.2
    beta: float = 0.5


@dataclass(frozen=True, slots=True)
class GeluAttrs(Attrs):
    approximate: str = "none"
    _choices = {"approximate": ("none", "tanh")}


def _clip(x, a):
    low = -np.inf if a.a_min is None else a.a_min
    high = np.inf if a.a_max is None else a.a_max
    if x.dtype.kind in "iu":
        info = np.iinfo(x.dtype)
        low, high = max(low, info.min), min(high, info.max)
    return np.clip(x, low, high)


def _gelu(x, a):
    if a.approximate == "tanh":
        return 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    return 0.5 * x * (1 + _erf(x / np.sqrt(2)))


_UNARY_WITH_ATTRS = {
    "nn.leaky_relu": (LeakyReluAttrs, lambda x, a: np.where(x >= 0, x, x * a.alpha), None),
    "clip": (ClipAttrs, _clip, "any"),
    "nn.elu": (EluAttrs, lambda x, a: np.where(x > 0, x, a.alpha * (np.exp(np.minimum(x, 0)) - 1)), None),
    "nn.celu": (AlphaAttrs, lambda x, a: np.maximum(x, 0) + np.minimum(0, a.alpha * (np.exp(x / a.alpha) - 1)), None),
    "nn.selu": (SeluAttrs, lambda x, a: a.gamma * np.where(x > 0, x, a.alpha * (np.exp(np.minimum(x, 0)) - 1)), None),
    "nn.hard_sigmoid": (HardSigmoidAttrs, lambda x, a: np.clip(a.alpha * x + a.beta, 0, 1), None),
    "nn.thresholded_relu": (AlphaAttrs, lambda x, a: np.where(x > a.alpha, x, 0), None),
    "nn.gelu": (GeluAttrs, _gelu, None),
}
for _name, (_attrs, _fn, _kind) in _UNARY_WITH_ATTRS.items():
    register_op(_name, attrs=_attrs, type_rule=_unary_type(_name, require=None if _kind else "float"),
                reference=_same_dtype_result(_fn), pattern=OpPattern.ELEMWISE, num_inputs=1,
                tolerance=_FLOAT_TOLERANCE)


@dataclass(frozen=True, slots=True)
class CastAttrs(Attrs):
    dtype: str = "float32"

    def _check(self) -> None:
        dtype_of(self.dtype)


def _cast(x, a):
    target = to_numpy(a.dtype)
    if np.issubdtype(target, np.integer) and x.dtype.kind == "f":
        with np.errstate(all="ignore"):
            return np.trunc(x).astype(target)
    return x.astype(target)


register_op("cast", attrs=CastAttrs,
            type_rule=lambda arg_types, a: TensorType(tensor_args("cast", arg_types)[0].shape, a.dtype),
            reference=_cast, pattern=OpPattern.ELEMWISE, num_inputs=1)


# ---- binary (numpy broadcasting) -------------------------------------------------------

def _binary_type(op: str, result_dtype: str | None = None, require_bool: bool = False,
                 mixed_dtypes: bool = False):
    def rule(arg_types, attrs):
        lhs, rhs = tensor_args(op, arg_types)
        shape = broadcast_shape(op, lhs.shape, rhs.shape)
        dtype = lhs.dtype if mixed_dtypes else same_dtype(op, lhs, rhs)
        if require_bool and dtype != "bool":
            raise DTypeError(f"{op}: needs bool inputs, got {dtype}")
        return TensorType(shape, result_dtype or dtype)
    return rule


def _int_divide(x, y):
    """ONNX Div: integers truncate toward zero. Documented edge cases (numpy's, never a trap):
    x / 0 == 0 and INT_MIN / -1 == INT_MIN (wraparound); mod and fmod by 0 give 0 too."""
    if x.dtype.kind in "iu":
        # Truncate toward zero, as C and ONNX do.
        with np.errstate(all="ignore"):
            q = np.floor_divide(x, y)
            adjust = (np.remainder(x, y) != 0) & ((x < 0) ^ (y < 0))
        return q + adjust.astype(q.dtype)
    return np.divide(x, y)


_BINARY = {
    "add": np.add, "subtract": np.subtract, "multiply": np.multiply, "divide": _int_divide,
    "maximum": np.maximum, "minimum": np.minimum, "mod": np.mod, "fmod": np.fmod,
    "bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
    "left_shift": np.left_shift, "right_shift": np.right_shift,
    "nn.prelu": lambda x, slope: np.where(x < 0, x * slope, x),
}
_COMPARE = {"equal": np.equal, "not_equal": np.not_equal, "less": np.less, "less_equal": np.less_equal,
            "greater": np.greater, "greater_equal": np.greater_equal}
_LOGIC = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}


def _binary_reference(fn):
    def reference(x, y, attrs):
        with np.errstate(all="ignore"):
            return np.asarray(fn(x, y)).astype(x.dtype, copy=False)
    return reference


for _name, _fn in _BINARY.items():
    register_op(_name, type_rule=_binary_type(_name), reference=_binary_reference(_fn),
                pattern=OpPattern.BROADCAST, num_inputs=2, tolerance=_FLOAT_TOLERANCE)
register_op("power", type_rule=_binary_type("power", mixed_dtypes=True),
            reference=_binary_reference(np.power), pattern=OpPattern.BROADCAST, num_inputs=2,
            tolerance=_FLOAT_TOLERANCE)
for _name, _fn in _COMPARE.items():
    register_op(_name, type_rule=_binary_type(_name, "bool"),
                reference=lambda x, y, attrs, f=_fn: f(x, y), pattern=OpPattern.BROADCAST, num_inputs=2)
for _name, _fn in _LOGIC.items():
    register_op(_name, type_rule=_binary_type(_name, "bool", require_bool=True),
                reference=lambda x, y, attrs, f=_fn: f(x, y), pattern=OpPattern.BROADCAST, num_inputs=2)


def _where_type(arg_types, attrs):
    condition, x, y = tensor_args("where", arg_types)
    if condition.dtype != "bool":
        raise DTypeError(f"where: the condition must be bool, got {condition.dtype}")
    dtype = same_dtype("where", x, y)
    return TensorType(broadcast_shape("where", condition.shape, x.shape, y.shape), dtype)


register_op("where", type_rule=_where_type, reference=lambda c, x, y, attrs: np.where(c, x, y),
            pattern=OpPattern.BROADCAST, num_inputs=3)
