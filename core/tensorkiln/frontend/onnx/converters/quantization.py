"""Converters for ONNX quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear,
ConvInteger, MatMulInteger, QLinearConv and QLinearMatMul.

QuantizeLinear / DequantizeLinear become the graph expressions of
`tensorkiln.passes.fold_qdq` (round half to even, saturate; per-tensor or per-axis), so a
QDQ-format model's dequantize -> conv -> quantize chains fold into integer convs at compile
time; a dequantized constant stays unfolded here for that reason. The integer ops accumulate
exactly in int32 after subtracting the zero points, and QLinear* requantize as the ONNX
reference does: the int32 result times x_scale * w_scale / y_scale (a float32 product applied
in float64, as numpy promotes int32 * float32), plus the output zero point, rounded half to
even and saturated.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.narrow_dtypes import format_of_onnx_type
from ....passes.fold_qdq import QUANTIZED_RANGES, _along, dequantize, quantize
from . import narrow
from ..node import OnnxNode
from ._registry import converter
from ._util import auto_pad, onnx_dtype, scalar
from .nn import _pads4, _pairs, _spatial_rank, _to_2d

_DEFAULT_QUANTIZED = "uint8"


def _axis(node: OnnxNode, scale: Expr, data: Expr) -> int | None:
    """The axis of a per-axis (1-D) scale, None for a per-tensor (0-D) or blocked (as many dims as
    the data) one; ONNX's default axis is 1."""
    if scale.ndim == 0 or node.attr("block_size", 0) or scale.shape == (1,):
        return None
    axis = node.attr("axis", 1)
    if scale.ndim != 1 or not -data.ndim <= axis < data.ndim or scale.shape[0] != data.shape[axis]:
        raise node.unsupported(f"scale of shape {scale.shape} fits neither per-tensor nor axis {axis} of an input "
                               f"of shape {data.shape}")
    return axis % data.ndim


def _quantized_dtype(node: OnnxNode, zero_point: Expr | None) -> str:
    if zero_point is not None:
        dtype = zero_point.dtype
    elif node.attr("output_dtype", 0):
        dtype = onnx_dtype(node.attr("output_dtype"), node)
    else:
        dtype = _DEFAULT_QUANTIZED
    if dtype not in QUANTIZED_RANGES:
        raise node.unsupported(f"quantizing to {dtype} is not supported; use one of {', '.join(QUANTIZED_RANGES)}")
    return dtype


def _blocks(node: OnnxNode, data: Expr, scale: Expr, zero_point: Expr | None) -> tuple[Expr, Expr | None]:
    """Blocked quantization (block_size > 0): scale[..., i // block_size, ...] along `axis`, repeated to
    the data's shape; otherwise scale and zero point as they are (a one-element 1-D one as a scalar)."""
    block = node.attr("block_size", 0)
    if not block:
        if scale.ndim == 1 and scale.shape[0] == 1:   # one element: per-tensor, as onnxruntime reads it
            return tuple(None if v is None else node.call("reshape", v, newshape=()) for v in (scale, zero_point))
        return scale, zero_point
    axis = node.attr("axis", 1) % data.ndim
    blocks = -(-data.shape[axis] // block)
    if scale.ndim != data.ndim or scale.shape[axis] != blocks or any(
            s != d for i, (s, d) in enumerate(zip(scale.shape, data.shape)) if i != axis):
        raise node.unsupported(f"blocked scale of shape {scale.shape} does not fit data {data.shape} with "
                               f"block_size={block} along axis {axis}")
    index = Constant(np.arange(data.shape[axis], dtype=np.int64) // block)

    def repeat(value):
        return None if value is None else node.call("take", value, index, axis=axis)
    return repeat(scale), repeat(zero_point)


def _narrow_output(node: OnnxNode):
    """The NarrowFormat QuantizeLinear produces (its zero point's, or output_dtype's), None for a plain dtype."""
    return node.input_format(2) or format_of_onnx_type(node.attr("output_dtype", 0))


@converter("QuantizeLinear")
def _quantize_linear(node: OnnxNode) -> Expr:
    data, scale, zero_point = node.required(0), node.required(1), node.input(2)
    fmt = _narrow_output(node)
    if fmt is not None:
        return _quantize_narrow(node, fmt, data, scale, zero_point)
    if node.attr("saturate", 1) != 1:
        raise node.unsupported("saturate=0 applies to float8 outputs only")
    dtype = _quantized_dtype(node, zero_point)
    axis = _axis(node, scale, data)
    scale, zero_point = _blocks(node, data, scale, zero_point)
    return quantize(data, scale, zero_point, dtype, axis, call=node.call)


def _quantize_narrow(node: OnnxNode, fmt, data: Expr, scale: Expr, zero_point: Expr | None) -> Expr:
    """QuantizeLinear to int4/uint4/int2/uint2 (quantized in the carrier, then saturated to the format's
    range) or to a float format (x / scale, rounded to nearest even; saturate as the attribute says, as
    onnx's reference does), as the format's carrier."""
    axis = _axis(node, scale, data)
    scale, zero_point = _blocks(node, data, scale, zero_point)
    if not fmt.is_float:
        low, high = fmt.int_range
        value = quantize(data, scale, zero_point, fmt.carrier, axis, call=node.call)
        return node.call("minimum", node.call("maximum", value, scalar(low, fmt.carrier)), scalar(high, fmt.carrier))
    value = node.call("divide", data, _along(scale, axis, data.ndim, node.call))
    # onnx requires a zero zero point for float8 and its reference leaves it out (-0.0 + 0.0 would be +0.0);
    # float4's is added, as the reference does
    if zero_point is not None and fmt.name == "float4_e2m1fn":
        zero = node.call("cast", narrow.decode(node, zero_point, fmt), dtype=value.dtype)
        value = node.call("add", value, _along(zero, axis, data.ndim, node.call))
    return narrow.encode(node, value, fmt, saturate=bool(node.attr("saturate", 1)))


@converter("DequantizeLinear")
def _dequantize_linear(node: OnnxNode) -> Expr:
    data, scale, zero_point = node.required(0), node.required(1), node.input(2)
    fmt = node.input_format(0)
    if fmt is not None and fmt.is_float:   # float8 / float4: decoded to float32 first (narrow.py)
        data = narrow.decode(node, data, fmt)
        zero_point = None if zero_point is None else narrow.decode(node, zero_point, fmt)
    if data.dtype not in QUANTIZED_RANGES and fmt is None:
        raise node.unsupported(f"dequantizing {data.dtype} is not supported; use one of {', '.join(QUANTIZED_RANGES)}")
    axis = _axis(node, scale, data)
    scale, zero_point = _blocks(node, data, scale, zero_point)
    # a constant (a weight) stays unfolded so that fold_qdq can run its consumer on the integers
    return dequantize(data, scale, zero_point, axis, call=_unfolded(node) if isinstance(data, Constant) else node.call)


def _unfolded(node: OnnxNode):
    from ....graph import call

    return lambda op_name, *args, **attrs: call(op_name, *args, span=node.name or None, **attrs)


@converter("DynamicQuantizeLinear")
def _dynamic_quantize_linear(node: OnnxNode) -> tuple[Expr, Expr, Expr]:
    data = node.required(0)
    low, high = QUANTIZED_RANGES["uint8"]
    zero = scalar(0.0, data.dtype)
    # the range always includes 0, so that 0 is exact (ONNX DynamicQuantizeLinear)
    lowest = node.call("minimum", node.call("min", data, axis=None, keepdims=False), zero)
    highest = node.call("maximum", node.call("max", data, axis=None, keepdims=False), zero)
    scale = node.call("divide", node.call("subtract", highest, lowest), scalar(float(high - low), data.dtype))
    zero_point = node.call("subtract", scalar(float(low), data.dtype), node.call("divide", lowest, scale))
    zero_point = node.call("cast", node.call("clip", node.call("round", zero_point), a_min=float(low),
                                             a_max=float(high)), dtype="uint8")
    return quantize(data, scale, zero_point, "uint8", call=node.call), scale, zero_point


def _centered(node: OnnxNode, value: Expr, zero_point: Expr | None, axis: int | None) -> Expr:
    """int32(value) - zero_point, the zero point per-tensor or along `axis` (a row of A, a column of B,
    an output channel of W)."""
    value = node.call("cast", value, dtype="int32")
    if zero_point is None:
        return value
    zero = node.call("cast", zero_point, dtype="int32")
    if zero.ndim == 1 and zero.shape[0] != 1 and axis is not None:
        shape = [1] * value.ndim
        shape[axis] = -1
        zero = node.call("reshape", zero, newshape=tuple(shape))
    elif zero.ndim == 1:
        zero = node.call("reshape", zero, newshape=())
    return node.call("subtract", value, zero)


def _integer_conv(node: OnnxNode, data: Expr, data_zero: Expr | None, weight: Expr, weight_zero: Expr | None,
                  bias: Expr | None = None) -> Expr:
    """int32 conv of the zero-point-centered operands (ONNX Conv attributes), plus an int32 bias."""
    rank = _spatial_rank(node, data)
    kernel = list(node.attr("kernel_shape", weight.shape[2:]))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = auto_pad(node, data.shape[2:], kernel, strides, dilations)
    data, weight = _centered(node, data, data_zero, None), _centered(node, weight, weight_zero, 0)
    if rank == 1:
        data, weight = _to_2d(node, data), _to_2d(node, weight)
    out = node.call("nn.conv2d", data, weight, strides=_pairs(strides, rank, 1), padding=_pads4(pads, rank),
                    dilation=_pairs(dilations, rank, 1), groups=node.attr("group", 1))
    if bias is not None:
        out = node.call("nn.bias_add", out, node.call("cast", bias, dtype="int32"), axis=1)
    return node.call("squeeze", out, axis=(2,)) if rank == 1 else out


@converter("ConvInteger")
def _conv_integer(node: OnnxNode) -> Expr:
    return _integer_conv(node, node.required(0), node.input(2), node.required(1), node.input(3))


def _integer_matmul(node: OnnxNode, a: Expr, a_zero: Expr | None, b: Expr, b_zero: Expr | None) -> Expr:
    # A's zero point is per row (axis -2 of A), B's per column (its last axis)
    lhs = _centered(node, a, a_zero, a.ndim - 2 if a.ndim >= 2 else None)
    rhs = _centered(node, b, b_zero, b.ndim - 1)
    return node.call("nn.matmul", lhs, rhs)


@converter("MatMulInteger")
def _matmul_integer(node: OnnxNode) -> Expr:
    return _integer_matmul(node, node.required(0), node.input(2), node.required(1), node.input(3))


def _requantize(node: OnnxNode, accumulated: Expr, multiplier: Expr, zero_point: Expr | None, dtype: str,
                channel_axis: int | None) -> Expr:
    """saturate(round(accumulated * multiplier + zero_point)) as `dtype`, in float64 (the reference's precision)."""
    if multiplier.ndim == 1 and multiplier.shape[0] != 1 and channel_axis is not None:
        shape = [1] * accumulated.ndim
        shape[channel_axis] = -1
        multiplier = node.call("reshape", multiplier, newshape=tuple(shape))
    value = node.call("multiply", node.call("cast", accumulated, dtype="float64"),
                      node.call("cast", multiplier, dtype="float64"))
    if zero_point is not None:
        value = node.call("add", value, node.call("cast", zero_point, dtype="float64"))
    low, high = QUANTIZED_RANGES[dtype]
    return node.call("cast", node.call("clip", node.call("round", value), a_min=float(low), a_max=float(high)),
                     dtype=dtype)


def _multiplier(node: OnnxNode, in_scale: Expr, weight_scale: Expr, out_scale: Expr) -> Expr:
    return node.call("divide", node.call("multiply", in_scale, weight_scale), out_scale)


@converter("QLinearConv")
def _qlinear_conv(node: OnnxNode) -> Expr:
    data, data_scale, data_zero = node.required(0), node.required(1), node.input(2)
    weight, weight_scale, weight_zero = node.required(3), node.required(4), node.input(5)
    out_scale, out_zero, bias = node.required(6), node.input(7), node.input(8)
    accumulated = _integer_conv(node, data, data_zero, weight, weight_zero, bias)
    dtype = out_zero.dtype if out_zero is not None else data.dtype
    return _requantize(node, accumulated, _multiplier(node, data_scale, weight_scale, out_scale), out_zero, dtype, 1)


@converter("QLinearMatMul")
def _qlinear_matmul(node: OnnxNode) -> Expr:
    a, a_scale, a_zero = node.required(0), node.required(1), node.required(2)
    b, b_scale, b_zero = node.required(3), node.required(4), node.required(5)
    out_scale, out_zero = node.required(6), node.required(7)
    accumulated = _integer_matmul(node, a, a_zero, b, b_zero)
    return _requantize(node, accumulated, _multiplier(node, a_scale, b_scale, out_scale), out_zero, out_zero.dtype,
                       accumulated.ndim - 1)
