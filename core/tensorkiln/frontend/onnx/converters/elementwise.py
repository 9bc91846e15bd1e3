"""Converters for elementwise ONNX ops: activations, math, arithmetic, comparison, logic, Cast."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import from_numpy, to_numpy
from ....ir.errors import FrontendError
from ....ir.narrow_dtypes import NarrowFormat, format_of_onnx_type
from . import narrow
from ..node import OnnxNode
from ._registry import converter
from ._util import onnx_dtype, scalar
from .random import dropout_training

_UNARY = {
    "Relu": "nn.relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "Erf": "erf", "Sqrt": "sqrt", "Exp": "exp",
    "Log": "log", "Abs": "abs", "Neg": "negative", "Reciprocal": "reciprocal", "Floor": "floor", "Ceil": "ceil",
    "Round": "round", "Sign": "sign", "Sin": "sin", "Cos": "cos", "Tan": "tan", "Asin": "asin", "Acos": "acos",
    "Atan": "atan", "Sinh": "sinh", "Cosh": "cosh", "Asinh": "asinh", "Acosh": "acosh", "Atanh": "atanh",
    "Softplus": "nn.softplus", "Softsign": "nn.softsign", "Not": "logical_not", "IsNaN": "isnan",
    "BitwiseNot": "bitwise_not", "HardSwish": "nn.hard_swish", "Mish": "nn.mish",
}


@converter(*_UNARY)
def _unary(node: OnnxNode) -> Expr:
    return node.call(_UNARY[node.op_type], node.required(0))


@converter("Identity")
def _identity(node: OnnxNode) -> Expr:
    return node.required(0)


@converter("Dropout")
def _dropout(node: OnnxNode):
    data = node.required(0)
    # training_mode from a graph input is specialised on at run time (ValueNotStaticError); in training mode
    # a ratio of 0 drops nothing, any other ratio draws random numbers
    training = node.const(2, "training_mode")
    ratio = float(_or_default(node.const(1, "ratio"), 0.5)) if training is not None and bool(training) else 0.0
    if ratio != 0.0:
        return dropout_training(node, data, ratio)   # a seeded random mask (random.py)
    mask = Constant(np.ones(data.shape, dtype=bool))
    return (data, mask)


def _or_default(value, default):
    return default if value is None else value


@converter("LeakyRelu")
def _leaky_relu(node: OnnxNode) -> Expr:
    return node.call("nn.leaky_relu", node.required(0), alpha=node.attr("alpha", 0.01))


@converter("Elu")
def _elu(node: OnnxNode) -> Expr:
    return node.call("nn.elu", node.required(0), alpha=node.attr("alpha", 1.0))


@converter("Celu")
def _celu(node: OnnxNode) -> Expr:
    return node.call("nn.celu", node.required(0), alpha=node.attr("alpha", 1.0))


@converter("ThresholdedRelu")
def _thresholded_relu(node: OnnxNode) -> Expr:
    return node.call("nn.thresholded_relu", node.required(0), alpha=node.attr("alpha", 1.0))


@converter("Selu")
def _selu(node: OnnxNode) -> Expr:
    return node.call("nn.selu", node.required(0), alpha=node.attr("alpha", 1.67326319217681884765625),
                     gamma=node.attr("gamma", 1.05070102214813232421875))


@converter("HardSigmoid")
def _hard_sigmoid(node: OnnxNode) -> Expr:
    return node.call("nn.hard_sigmoid", node.required(0), alpha=node.attr("alpha", 0.2), beta=node.attr("beta", 0.5))


@converter("Gelu")
def _gelu(node: OnnxNode) -> Expr:
    return node.call("nn.gelu", node.required(0), approximate=node.attr("approximate", "none"))


@converter("IsInf")
def _isinf(node: OnnxNode) -> Expr:
    return node.call("isinf", node.required(0), detect_positive=bool(node.attr("detect_positive", 1)),
                     detect_negative=bool(node.attr("detect_negative", 1)))


@converter("Shrink")
def _shrink(node: OnnxNode) -> Expr:
    data = node.required(0)
    lambd, bias = node.attr("lambd", 0.5), node.attr("bias", 0.0)
    low = node.call("add", data, scalar(bias, data.dtype))
    high = node.call("subtract", data, scalar(bias, data.dtype))
    zero = scalar(0, data.dtype)
    inner = node.call("where", node.call("greater", data, scalar(lambd, data.dtype)), high, zero)
    return node.call("where", node.call("less", data, scalar(-lambd, data.dtype)), low, inner)


@converter("Clip")
def _clip(node: OnnxNode) -> Expr:
    data = node.required(0)
    if node.opset < 11:
        return node.call("clip", data, a_min=node.attr("min", -3.4028234663852886e38),
                         a_max=node.attr("max", 3.4028234663852886e38))
    low, high = node.input(1), node.input(2)
    if all(v is None or isinstance(v, Constant) for v in (low, high)):
        a_min = None if low is None else float(node.const(1))
        a_max = None if high is None else float(node.const(2))
        if data.dtype.startswith(("int", "uint")):
            a_min = None if a_min is None else int(node.const(1))
            a_max = None if a_max is None else int(node.const(2))
            out = data
            if a_min is not None:
                out = node.call("maximum", out, scalar(a_min, data.dtype))
            if a_max is not None:
                out = node.call("minimum", out, scalar(a_max, data.dtype))
            return out
        return node.call("clip", data, a_min=a_min, a_max=a_max)
    out = data
    if low is not None:
        out = node.call("maximum", out, low)
    if high is not None:
        out = node.call("minimum", out, high)
    return out


@converter("Cast")
def _cast(node: OnnxNode) -> Expr:
    to = node.attr("to")
    target = format_of_onnx_type(to) or onnx_dtype(to, node)
    return _cast_to(node, target)


@converter("CastLike")
def _cast_like(node: OnnxNode) -> Expr:
    return _cast_to(node, node.input_format(1) or node.required(1).dtype)


def _cast_to(node: OnnxNode, target) -> Expr:
    """Cast input 0 to `target` (a dtype, or a NarrowFormat: float8, int4, ... as its carrier; narrow.py)."""
    source = node.input_format(0)
    if source is None and not isinstance(target, NarrowFormat):
        return node.call("cast", node.required(0), dtype=target)
    return narrow.convert(node, node.required(0), source, target, saturate=bool(node.attr("saturate", 1)),
                          round_mode=_text(node.attr("round_mode", "up")))


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


_BINARY = {
    "Add": "add", "Sub": "subtract", "Mul": "multiply", "Div": "divide", "Pow": "power",
    "Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal", "And": "logical_and", "Or": "logical_or", "Xor": "logical_xor",
    "BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor",
}


@converter(*_BINARY)
def _binary(node: OnnxNode) -> Expr:
    return node.call(_BINARY[node.op_type], node.required(0), node.required(1))


@converter("PRelu")
def _prelu(node: OnnxNode) -> Expr:
    data, slope = node.required(0), node.required(1)
    if node.opset < 7 and len(slope.shape) == 1 and len(data.shape) >= 2 and slope.shape[0] == data.shape[1] != 1:
        # PRelu-6 takes one slope per channel (axis 1), as Caffe and PyTorch exports of that time do;
        # from opset 7 the slope broadcasts numpy-style from the right
        slope = node.call("reshape", slope, newshape=(slope.shape[0],) + (1,) * (len(data.shape) - 2))
    return node.call("nn.prelu", data, slope)


@converter("Mod")
def _mod(node: OnnxNode) -> Expr:
    data = node.required(0)
    if not node.attr("fmod", 0) and node.opset < 28 and data.dtype.startswith(("float", "bfloat")):
        raise FrontendError(f"ONNX node {node.name!r} (Mod, opset {node.opset}): attribute fmod=0 with "
                            f"{data.dtype} inputs; before opset 28 floating-point Mod requires fmod=1 "
                            "(onnxruntime rejects it too)")
    return node.call("fmod" if node.attr("fmod", 0) else "mod", data, node.required(1))


@converter("BitShift")
def _bit_shift(node: OnnxNode) -> Expr:
    op = "left_shift" if node.attr("direction") == "LEFT" else "right_shift"
    return node.call(op, node.required(0), node.required(1))


@converter("Sum", "Max", "Min", "Mean")
def _variadic(node: OnnxNode) -> Expr:
    op = {"Sum": "add", "Mean": "add", "Max": "maximum", "Min": "minimum"}[node.op_type]
    args = [a for a in node.inputs if a is not None]
    out = args[0]
    for arg in args[1:]:
        out = node.call(op, out, arg)
    if node.op_type == "Mean":
        out = node.call("divide", out, scalar(len(args), out.dtype))
    return out


@converter("Where")
def _where(node: OnnxNode) -> Expr:
    return node.call("where", node.required(0), node.required(1), node.required(2))
