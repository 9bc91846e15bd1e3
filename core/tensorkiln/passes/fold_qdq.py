"""passes/fold_qdq.py: quantize / dequantize as graph ops, and folding Q/DQ pairs into integer convs and dense.

A quantized value is an 8-bit tensor with a scale and a zero point. The graph has no
quantized type: `dequantize(q, scale, zp)` is the float expression

    multiply(subtract(cast(q, "float32"), zp), scale)             # (q - zp) * scale

and `quantize(x, scale, zp, dtype)` is `cast(clip(round(x / scale) + zp, qmin, qmax), dtype)`
(ONNX QuantizeLinear: round half to even, saturate). Both are built here, by the ONNX
importer (QuantizeLinear, DequantizeLinear, QDQ models) and by post-training quantization
(`tensorkiln.quantize`), so every quantized graph has the same shape, and one pass folds it:

    %x = dequantize(%xq, sx, zx)                     %a = nn.conv2d(%xq, Wq, out_dtype="int32")
    %w = dequantize(const(Wq), sw[O], 0)      ->     %b = subtract(%a, zx * sum(Wq) per channel)  (zx != 0)
    nn.conv2d(%x, %w)                                multiply(cast(%b, "float32"), sx * sw[O])

The int32 accumulation is exact, so the folded conv equals the float one up to float32
rounding; whatever follows (bias, relu, the next quantize) stays float elementwise and
fuses into the integer conv's epilogue: requantization happens in registers, and only
8-bit tensors travel between layers. A zero point on the data is honoured by padding
with it (so padded taps contribute nothing) and subtracting its product with the weight
sums. What does not match (non-constant or asymmetric weights, per-channel data scales,
other ops between dequantize and quantize) runs as it is: in float, between its
dequantize and quantize, and fold_constants later folds the dequantized constant weights.

Dequantized constants are built without folding so that this pass, first in the
pipeline, still sees the integer weights.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..graph import Call, Constant, Expr, Module, rewrite
from ..graph import call as graph_call
from ..graph.registry import Op
from ..ir.dtypes import to_numpy
from ..ir.errors import DTypeError
from .manager import register_pass

__all__ = ["QUANTIZED_RANGES", "quantize", "dequantize", "match_dequantize", "Dequantized", "fold_qdq"]

QUANTIZED_RANGES = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "uint16": (0, 65535),
                    "int32": (-2 ** 31, 2 ** 31 - 1)}
"""dtype -> (qmin, qmax) of the integer dtypes a quantized tensor may have."""
_EIGHT_BIT = ("int8", "uint8")


def _along(value: Expr, axis: int | None, ndim: int, call) -> Expr:
    """A per-axis (C,) scale or zero point shaped to broadcast along `axis` of an `ndim`-D tensor
    (a scalar, or one already shaped like the tensor, as it is)."""
    if axis is None or value.ndim == 0 or ndim == 0 or value.ndim == ndim:
        return value
    if value.ndim != 1:
        raise DTypeError(f"a per-axis scale or zero point must be 1-D, got shape {value.shape}")
    shape = [1] * ndim
    shape[axis % ndim] = -1
    return call("reshape", value, newshape=tuple(shape))


def quantize(x: Expr, scale: Expr, zero_point: Expr | None, dtype: str, axis: int | None = None,
             call=graph_call) -> Expr:
    """`x` quantized to `dtype`: saturate(round_half_even(x / scale) + zero_point).

    scale / zero_point are scalars or 1-D along `axis`; `call` builds each op (the ONNX importer
    passes its folding `node.call`).
    """
    if dtype not in QUANTIZED_RANGES:
        raise DTypeError(f"cannot quantize to {dtype}; use one of {', '.join(QUANTIZED_RANGES)}")
    low, high = QUANTIZED_RANGES[dtype]
    value = call("round", call("divide", x, _along(scale, axis, x.ndim, call)))
    if zero_point is not None:
        value = call("add", value, _along(call("cast", zero_point, dtype=x.dtype), axis, x.ndim, call))
    return call("cast", call("clip", value, a_min=float(low), a_max=float(high)), dtype=dtype)


def dequantize(q: Expr, scale: Expr, zero_point: Expr | None, axis: int | None = None, call=graph_call) -> Expr:
    """(q - zero_point) * scale in scale's dtype. Built unfolded by default, so fold_qdq sees constant weights."""
    dtype = scale.dtype
    value = call("cast", q, dtype=dtype)
    zero = zero_point if zero_point is not None else Constant(np.zeros((), to_numpy(q.dtype)))
    value = call("subtract", value, _along(call("cast", zero, dtype=dtype), axis, q.ndim, call))
    return call("multiply", value, _along(scale, axis, q.ndim, call))


@dataclass(frozen=True)
class Dequantized:
    """What a dequantize expression dequantizes: the integer tensor, and its float32 scale and
    integer zero point as arrays broadcastable against it."""

    quantized: Expr
    scale: np.ndarray
    zero_point: np.ndarray


def _constant(expr: Expr) -> np.ndarray | None:
    """The value of a constant, looking through the (unfolded) reshape and cast dequantize builds."""
    if isinstance(expr, Constant):
        return expr.value
    if isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name in ("reshape", "cast"):
        inner = _constant(expr.args[0])
        if inner is None:
            return None
        if expr.op.name == "cast":
            return inner.astype(to_numpy(expr.attrs.dtype))
        return inner.reshape(expr.checked_type.shape)
    return None


def _is(expr: Expr, name: str) -> bool:
    return isinstance(expr, Call) and isinstance(expr.op, Op) and expr.op.name == name


def match_dequantize(expr: Expr) -> Dequantized | None:
    """The parts of `dequantize(q, scale, zp)` when `expr` is one with constant scale and zero point."""
    if not (_is(expr, "multiply") and _is(expr.args[0], "subtract") and _is(expr.args[0].args[0], "cast")):
        return None
    quantized = expr.args[0].args[0].args[0]
    if quantized.dtype not in QUANTIZED_RANGES or expr.dtype != "float32":
        return None
    scale, zero = _constant(expr.args[1]), _constant(expr.args[0].args[1])
    if scale is None or zero is None:
        return None
    return Dequantized(quantized, scale.astype(np.float32), np.rint(zero).astype(np.int64))


def _per_tensor(value: np.ndarray) -> bool:
    return value.size == 1


def _output_channels(value: np.ndarray, channels: int, axis: int, ndim: int) -> np.ndarray | None:
    """`value` (a weight's scale) as a (channels,) vector when it is per-tensor or per-`axis`."""
    if value.size == 1:
        return np.full(channels, value.reshape(()), value.dtype)
    shape = (1,) * (ndim - value.ndim) + value.shape
    if shape[axis] == channels and value.size == channels:
        return value.reshape(channels)
    return None


def _integer_weight(weight: Expr, out_axis: int) -> tuple[np.ndarray, np.ndarray] | None:
    """(Wq int8, per-output-channel scale) of a dequantized constant symmetric int8 weight."""
    parts = match_dequantize(weight)
    if parts is None or parts.quantized.dtype != "int8" or np.any(parts.zero_point != 0):
        return None
    values = _constant(parts.quantized)
    if values is None:
        return None
    scale = _output_channels(parts.scale, values.shape[out_axis], out_axis, values.ndim)
    return (values, scale) if scale is not None else None


def _integer_data(data: Expr) -> Dequantized | None:
    parts = match_dequantize(data)
    if parts is None or parts.quantized.dtype not in _EIGHT_BIT:
        return None
    if not (_per_tensor(parts.scale) and _per_tensor(parts.zero_point)):
        return None
    return parts


def _rescale(accumulated: Expr, data: Dequantized, weight_sums: np.ndarray, scale: np.ndarray,
             channel_shape: tuple[int, ...]) -> Expr:
    """float32 (accumulated - zx * sum(W)) * sx * sw: the float result of the integer op."""
    zero = int(data.zero_point.reshape(()))
    if zero:
        correction = (zero * weight_sums).astype(np.int32).reshape(channel_shape)
        accumulated = graph_call("subtract", accumulated, Constant(correction))
    factor = (data.scale.reshape(()).astype(np.float64) * scale.astype(np.float64)).astype(np.float32)
    return graph_call("multiply", graph_call("cast", accumulated, dtype="float32"),
                      Constant(factor.reshape(channel_shape)))


def _fold_conv2d(node: Call) -> Expr | None:
    attrs = node.attrs
    if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") or attrs.out_dtype:
        return None
    data, weight = _integer_data(node.args[0]), _integer_weight(node.args[1], 0)
    if data is None or weight is None:
        return None
    values, scale = weight
    quantized, padding = data.quantized, attrs.padding
    zero = int(data.zero_point.reshape(()))
    if zero and any(padding):   # pad with the zero point: padded taps then contribute (zp - zp) * w = 0
        top, left, bottom, right = padding
        quantized = graph_call("nn.pad", quantized, pad_width=((0, 0), (0, 0), (top, bottom), (left, right)),
                               pad_value=float(zero))
        padding = (0, 0, 0, 0)
    accumulated = graph_call("nn.conv2d", quantized, Constant(values), strides=attrs.strides, padding=padding,
                             dilation=attrs.dilation, groups=attrs.groups, out_dtype="int32")
    sums = values.astype(np.int64).sum(axis=(1, 2, 3))
    return _rescale(accumulated, data, sums, scale, (1, values.shape[0], 1, 1))


def _dense_weight(weight: Expr, transposed: bool) -> tuple[np.ndarray, np.ndarray] | None:
    """(Wq[N, K], scale[N]) from dequantize(W[N, K]) or, with `transposed`, from dequantize(W[K, N])."""
    if _is(weight, "transpose") and tuple(weight.attrs.axes or (1, 0)) == (1, 0):
        return _dense_weight(weight.args[0], not transposed)
    found = _integer_weight(weight, 1 if transposed else 0)
    if found is None or found[0].ndim != 2:
        return None
    values, scale = found
    return (np.ascontiguousarray(values.T) if transposed else values), scale


def _fold_dense(node: Call) -> Expr | None:
    if node.op.name == "nn.dense" and getattr(node.attrs, "out_dtype", ""):
        return None
    if node.op.name == "nn.matmul" and (node.args[1].ndim != 2 or node.args[0].ndim < 2):
        return None
    data = _integer_data(node.args[0])
    weight = _dense_weight(node.args[1], transposed=node.op.name == "nn.matmul")
    if data is None or weight is None:
        return None
    values, scale = weight
    accumulated = graph_call("nn.dense", data.quantized, Constant(values), out_dtype="int32")
    channel_shape = (1,) * (node.ndim - 1) + (values.shape[0],)
    return _rescale(accumulated, data, values.astype(np.int64).sum(axis=1), scale, channel_shape)


_FOLDS = {"nn.conv2d": _fold_conv2d, "nn.dense": _fold_dense, "nn.matmul": _fold_dense}


@register_pass("fold_qdq", opt_level=1)
def fold_qdq(mod: Module) -> Module:
    """Run conv2d / dense / matmul between dequantized 8-bit tensors as integer ops with int32 accumulation."""
    def visit(node: Expr):
        if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name in _FOLDS:
            return _FOLDS[node.op.name](node)
        return None
    return rewrite(mod, visit)
