"""Converters for ONNX neural-network ops: Conv, ConvTranspose, pooling, Gemm/MatMul,
normalizations and softmax. 1-D convolution and pooling run as 2-D with a unit height."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ..node import OnnxNode
from ._registry import converter
from ._util import auto_pad, ints, scalar


def _spatial_rank(node: OnnxNode, data: Expr, any_rank: bool = False) -> int:
    """1 or 2 (any rank >= 1 with `any_rank`: the op has an N-d graph op, graph/ops/window_nd.py)."""
    rank = data.ndim - 2
    if rank < 1 or (rank > 2 and not any_rank):
        supported = "1-D or higher" if any_rank else "only 1-D and 2-D"
        raise node.unsupported(f"{supported} {node.op_type} are supported; the input has shape {data.shape}")
    return rank


def _to_2d(node: OnnxNode, value: Expr) -> Expr:
    """(N, C, L) -> (N, C, 1, L)."""
    return node.call("expand_dims", value, axis=2)


def _pairs(values, rank: int, fill: int) -> tuple[int, int]:
    values = list(values) if values else [fill] * rank
    return (fill, values[0]) if rank == 1 else (values[0], values[1])


def _pads4(pads, rank: int) -> tuple[int, int, int, int]:
    """ONNX (begins..., ends...) -> (top, left, bottom, right)."""
    if rank == 1:
        return (0, pads[0], 0, pads[1])
    return (pads[0], pads[1], pads[2], pads[3])


@converter("Conv")
def _conv(node: OnnxNode) -> Expr:
    data, weight, bias = node.required(0), node.required(1), node.input(2)
    rank = _spatial_rank(node, data, any_rank=True)
    kernel = list(node.attr("kernel_shape", weight.shape[2:]))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = auto_pad(node, data.shape[2:], kernel, strides, dilations)
    if rank > 2:   # 3-D volumes and beyond: the N-d op (graph/ops/conv_nd.py)
        out = node.call("nn.conv", data, weight, strides=tuple(strides), padding=tuple(pads),
                        dilation=tuple(dilations), groups=node.attr("group", 1))
        return out if bias is None else node.call("nn.bias_add", out, bias, axis=1)
    if rank == 1:
        data, weight = _to_2d(node, data), _to_2d(node, weight)
    out = node.call("nn.conv2d", data, weight, strides=_pairs(strides, rank, 1), padding=_pads4(pads, rank),
                    dilation=_pairs(dilations, rank, 1), groups=node.attr("group", 1))
    if bias is not None:
        out = node.call("nn.bias_add", out, bias, axis=1)
    return node.call("squeeze", out, axis=(2,)) if rank == 1 else out


@converter("ConvTranspose")
def _conv_transpose(node: OnnxNode) -> Expr:
    data, weight, bias = node.required(0), node.required(1), node.input(2)
    rank = _spatial_rank(node, data, any_rank=True)
    kernel = list(node.attr("kernel_shape", weight.shape[2:]))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    output_padding = list(node.attr("output_padding", [0] * rank))
    output_shape = node.attr("output_shape")
    mode = node.attr("auto_pad", "NOTSET")
    if output_shape is not None or mode in ("SAME_UPPER", "SAME_LOWER"):
        sizes = list(output_shape)[-rank:] if output_shape is not None else [d * s for d, s in zip(data.shape[2:], strides)]
        begins, ends = [], []
        for i in range(rank):
            total = (strides[i] * (data.shape[2 + i] - 1) + output_padding[i] + (kernel[i] - 1) * dilations[i] + 1
                     - sizes[i])
            if mode == "SAME_UPPER":
                begin, end = total // 2, total - total // 2
            else:   # SAME_LOWER, and NOTSET with output_shape: ONNX (and onnxruntime) crop more at the start
                begin, end = total - total // 2, total // 2
            if begin + end < 0:  # a negative crop grows the output at its end: that is output padding
                output_padding[i] += -(begin + end)
                begin = end = 0
            begins.append(begin)
            ends.append(end)
        pads = begins + ends
    elif mode == "VALID":
        pads = [0] * (2 * rank)
    else:
        pads = list(node.attr("pads", [0] * (2 * rank)))
    if rank > 2:
        out = node.call("nn.conv_transpose", data, weight, strides=tuple(strides), padding=tuple(pads),
                        dilation=tuple(dilations), groups=node.attr("group", 1), output_padding=tuple(output_padding))
        return out if bias is None else node.call("nn.bias_add", out, bias, axis=1)
    if rank == 1:
        data, weight = _to_2d(node, data), _to_2d(node, weight)
    out = node.call("nn.conv2d_transpose", data, weight, strides=_pairs(strides, rank, 1),
                    padding=_pads4(pads, rank), dilation=_pairs(dilations, rank, 1), groups=node.attr("group", 1),
                    output_padding=_pairs(output_padding, rank, 0))
    if bias is not None:
        out = node.call("nn.bias_add", out, bias, axis=1)
    return node.call("squeeze", out, axis=(2,)) if rank == 1 else out


_POOL_ND = {"nn.max_pool2d": "nn.max_pool", "nn.avg_pool2d": "nn.avg_pool"}


def _window_attrs(node: OnnxNode, data: Expr) -> dict:
    """kernel, strides, dilations and ONNX (begins..., ends...) pads of a pooling node."""
    rank = data.ndim - 2
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = auto_pad(node, data.shape[2:], kernel, strides, dilations)
    return {"pool_size": tuple(kernel), "strides": tuple(strides), "padding": tuple(pads),
            "dilation": tuple(dilations), "ceil_mode": bool(node.attr("ceil_mode", 0))}


def _pool(node: OnnxNode, op: str, **extra) -> Expr:
    """A 2-D pool op (1-D as 2-D with a unit height); other ranks use the N-d op."""
    data = node.required(0)
    rank = _spatial_rank(node, data, any_rank=True)
    if rank > 2:
        return node.call(_POOL_ND[op], data, **_window_attrs(node, data), **extra)
    kernel = list(node.attr("kernel_shape"))
    strides = list(node.attr("strides", [1] * rank))
    dilations = list(node.attr("dilations", [1] * rank))
    pads = auto_pad(node, data.shape[2:], kernel, strides, dilations)
    if rank == 1:
        data = _to_2d(node, data)
    out = node.call(op, data, pool_size=_pairs(kernel, rank, 1), strides=_pairs(strides, rank, 1),
                    padding=_pads4(pads, rank), dilation=_pairs(dilations, rank, 1),
                    ceil_mode=bool(node.attr("ceil_mode", 0)), **extra)
    return node.call("squeeze", out, axis=(2,)) if rank == 1 else out


@converter("MaxPool")
def _max_pool(node: OnnxNode):
    out = _pool(node, "nn.max_pool2d")
    if node.num_outputs < 2 or not node.output_names[1]:
        return (out, None)
    data = node.required(0)
    indices = node.call("nn.max_pool_indices", data, **_window_attrs(node, data),
                        storage_order=int(node.attr("storage_order", 0)))
    return (out, indices)


@converter("AveragePool")
def _avg_pool(node: OnnxNode) -> Expr:
    return _pool(node, "nn.avg_pool2d", count_include_pad=bool(node.attr("count_include_pad", 0)))


@converter("GlobalAveragePool")
def _global_avg_pool(node: OnnxNode) -> Expr:
    return node.call("nn.global_avg_pool2d", node.required(0))


@converter("GlobalMaxPool")
def _global_max_pool(node: OnnxNode) -> Expr:
    return node.call("nn.global_max_pool2d", node.required(0))


@converter("LRN")
def _lrn(node: OnnxNode) -> Expr:
    return node.call("nn.lrn", node.required(0), size=node.attr("size"), axis=1, alpha=node.attr("alpha", 1e-4),
                     beta=node.attr("beta", 0.75), bias=node.attr("bias", 1.0))


@converter("Gemm")
def _gemm(node: OnnxNode) -> Expr:
    a, b, c = node.required(0), node.required(1), node.input(2)
    alpha, beta = node.attr("alpha", 1.0), node.attr("beta", 1.0)
    if node.attr("transA", 0):
        a = node.call("transpose", a, axes=(1, 0))
    if not node.attr("transB", 0):
        b = node.call("transpose", b, axes=(1, 0))
    out = node.call("nn.dense", a, b)
    if alpha != 1.0:
        out = node.call("multiply", out, scalar(alpha, out.dtype))
    if c is not None and beta != 0.0:
        if beta != 1.0:
            c = node.call("multiply", c, scalar(beta, c.dtype))
        out = node.call("add", out, c)
    return out


@converter("MatMul")
def _matmul(node: OnnxNode) -> Expr:
    return node.call("nn.matmul", node.required(0), node.required(1))


@converter("BatchNormalization")
def _batch_norm(node: OnnxNode):
    data, scale, bias, mean, var = (node.required(i) for i in range(5))
    epsilon = node.attr("epsilon", 1e-5)
    if node.attr("training_mode", 0):
        return _batch_norm_training(node, data, scale, bias, mean, var, epsilon)
    out = node.call("nn.batch_norm", data, scale, bias, mean, var, axis=1, epsilon=epsilon)
    return (out, mean, var, mean, var)


def _batch_norm_training(node: OnnxNode, data, scale, bias, mean, var, epsilon):
    """Normalize with the batch's own statistics (population variance, over every axis but 1) and
    return them blended into the running ones: running * momentum + batch * (1 - momentum)."""
    axes = tuple(i for i in range(data.ndim) if i != 1)
    batch_mean = node.call("mean", data, axis=axes)
    centered = node.call("subtract", data, node.call("reshape", batch_mean, newshape=(-1,) + (1,) * (data.ndim - 2)))
    batch_var = node.call("mean", node.call("multiply", centered, centered), axis=axes)
    out = node.call("nn.batch_norm", data, scale, bias, batch_mean, batch_var, axis=1, epsilon=epsilon)
    momentum = node.attr("momentum", 0.9)

    def blend(running, batch):
        return node.call("add", node.call("multiply", running, scalar(momentum, running.dtype)),
                         node.call("multiply", node.call("cast", batch, dtype=running.dtype),
                                   scalar(1.0 - momentum, running.dtype)))
    return (out, blend(mean, batch_mean), blend(var, batch_var))


@converter("InstanceNormalization")
def _instance_norm(node: OnnxNode) -> Expr:
    data, scale, bias = node.required(0), node.required(1), node.required(2)
    axes = tuple(range(2, data.ndim))
    mean = node.call("mean", data, axis=axes, keepdims=True)
    centered = node.call("subtract", data, mean)
    var = node.call("mean", node.call("multiply", centered, centered), axis=axes, keepdims=True)
    eps = scalar(node.attr("epsilon", 1e-5), data.dtype)
    normalized = node.call("divide", centered, node.call("sqrt", node.call("add", var, eps)))
    shape = (-1,) + (1,) * (data.ndim - 2)
    scale = node.call("reshape", scale, newshape=shape)
    bias = node.call("reshape", bias, newshape=shape)
    return node.call("add", node.call("multiply", normalized, scale), bias)


@converter("MeanVarianceNormalization")
def _mean_variance_norm(node: OnnxNode) -> Expr:
    data = node.required(0)
    axes = tuple(node.attr("axes", [0, 2, 3]))
    mean = node.call("mean", data, axis=axes, keepdims=True)
    centered = node.call("subtract", data, mean)
    var = node.call("mean", node.call("multiply", centered, centered), axis=axes, keepdims=True)
    return node.call("divide", centered, node.call("sqrt", var))


@converter("LayerNormalization")
def _layer_norm(node: OnnxNode):
    data, scale, bias = node.required(0), node.required(1), node.input(2)
    axis = node.attr("axis", -1)
    epsilon = node.attr("epsilon", 1e-5)
    if bias is None:
        bias = Constant(np.zeros(scale.shape, dtype=to_numpy(scale.dtype)))
    out = node.call("nn.layer_norm", data, scale, bias, axis=axis, epsilon=epsilon)
    if node.num_outputs == 1:
        return out
    axes = tuple(range(axis % data.ndim, data.ndim))
    mean = node.call("mean", data, axis=axes, keepdims=True)
    centered = node.call("subtract", data, mean)
    var = node.call("mean", node.call("multiply", centered, centered), axis=axes, keepdims=True)
    inv_std = node.call("rsqrt", node.call("add", var, scalar(epsilon, data.dtype)))
    return (out, mean, inv_std)


def _coerce_2d(node: OnnxNode, data: Expr, axis: int):
    axis %= max(data.ndim, 1)
    rows = int(np.prod(data.shape[:axis], dtype=np.int64))
    return node.call("reshape", data, newshape=(rows, -1))


@converter("Softmax", "LogSoftmax", "Hardmax")
def _softmax(node: OnnxNode) -> Expr:
    data = node.required(0)
    old = node.opset < 13
    axis = node.attr("axis", 1 if old else -1)
    if old:
        flat = _coerce_2d(node, data, axis)
        out = _softmax_along(node, flat, 1)
        return node.call("reshape", out, newshape=data.shape)
    return _softmax_along(node, data, axis)


def _softmax_along(node: OnnxNode, data: Expr, axis: int) -> Expr:
    if node.op_type == "Softmax":
        return node.call("nn.softmax", data, axis=axis)
    if node.op_type == "LogSoftmax":
        return node.call("nn.log_softmax", data, axis=axis)
    axis %= data.ndim
    index = node.call("argmax", data, axis=axis, keepdims=True)
    iota_shape = [1] * data.ndim
    iota_shape[axis] = data.shape[axis]
    iota = Constant(np.arange(data.shape[axis], dtype=np.int64).reshape(iota_shape))
    return node.call("cast", node.call("equal", iota, index), dtype=data.dtype)


@converter("LpNormalization")
def _lp_normalization(node: OnnxNode) -> Expr:
    data = node.required(0)
    axis, p = node.attr("axis", -1), node.attr("p", 2)
    if p == 1:
        norm = node.call("sum", node.call("abs", data), axis=(axis,), keepdims=True)
    else:
        norm = node.call("sqrt", node.call("sum", node.call("multiply", data, data), axis=(axis,), keepdims=True))
    zero = scalar(0, data.dtype)
    is_zero = node.call("equal", norm, zero)
    safe = node.call("where", is_zero, scalar(1, data.dtype), norm)
    return node.call("where", is_zero, zero, node.call("divide", data, safe))
