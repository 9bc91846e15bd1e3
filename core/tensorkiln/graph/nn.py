"""Builder API for the `nn.*` ops: graph.nn.conv2d(data, weight, strides=(2, 2), padding=(1, 1)), ..."""
from __future__ import annotations

from typing import Sequence

from .builder import call
from .expr import Expr

__all__ = ["conv2d", "conv2d_transpose", "dense", "dense_pack", "matmul", "batch_norm", "bias_add", "layer_norm",
           "relu", "leaky_relu", "prelu", "elu", "selu", "gelu", "softplus", "hard_sigmoid", "softmax", "log_softmax",
           "max_pool2d", "avg_pool2d", "global_avg_pool2d", "global_max_pool2d", "lrn", "pad"]


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)  # type: ignore[return-value]


def _padding(value: int | Sequence[int]) -> tuple[int, int, int, int]:
    """int -> all sides; (h, w) -> (h, w, h, w); (top, left, bottom, right) as is."""
    if isinstance(value, int):
        return (value,) * 4
    value = tuple(value)
    return value * 2 if len(value) == 2 else value  # type: ignore[return-value]


def conv2d(data: Expr, weight: Expr, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1), groups: int = 1,
           data_layout: str = "NCHW", kernel_layout: str = "OIHW") -> Expr:
    """NCHW x OIHW convolution (or NHWC data; HWIO, OHWI or blocked OHWI16o weights); padding int, (h, w)
    or (top, left, bottom, right)."""
    return call("nn.conv2d", data, weight, strides=_pair(strides), padding=_padding(padding),
                dilation=_pair(dilation), groups=groups, data_layout=data_layout, kernel_layout=kernel_layout)


def conv2d_transpose(data: Expr, weight: Expr, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                     groups: int = 1, output_padding=(0, 0)) -> Expr:
    """NCHW x IOHW transposed convolution."""
    return call("nn.conv2d_transpose", data, weight, strides=_pair(strides), padding=_padding(padding),
                dilation=_pair(dilation), groups=groups, output_padding=_pair(output_padding))


def dense(data: Expr, weight: Expr) -> Expr:
    """data (..., K) x weight (N, K) -> (..., N)."""
    return call("nn.dense", data, weight)


def dense_pack(data: Expr, weight: Expr, units: int) -> Expr:
    """nn.dense with a packed weight[N / n, K, n] (graph.pack_dense_weight); `units` is N."""
    return call("nn.dense_pack", data, weight, units=units)


def matmul(lhs: Expr, rhs: Expr) -> Expr:
    """numpy.matmul semantics (batched, broadcasting)."""
    return call("nn.matmul", lhs, rhs)


def batch_norm(data: Expr, gamma: Expr, beta: Expr, moving_mean: Expr, moving_var: Expr, axis: int = 1,
               epsilon: float = 1e-5) -> Expr:
    """Inference batch normalization; returns the normalized data."""
    return call("nn.batch_norm", data, gamma, beta, moving_mean, moving_var, axis=axis, epsilon=epsilon)


def bias_add(data: Expr, bias: Expr, axis: int = 1) -> Expr:
    return call("nn.bias_add", data, bias, axis=axis)


def layer_norm(data: Expr, gamma: Expr, beta: Expr, axis: int = -1, epsilon: float = 1e-5) -> Expr:
    return call("nn.layer_norm", data, gamma, beta, axis=axis, epsilon=epsilon)


def relu(data: Expr) -> Expr:
    return call("nn.relu", data)


def leaky_relu(data: Expr, alpha: float = 0.01) -> Expr:
    return call("nn.leaky_relu", data, alpha=alpha)


def prelu(data: Expr, slope: Expr) -> Expr:
    return call("nn.prelu", data, slope)


def elu(data: Expr, alpha: float = 1.0) -> Expr:
    return call("nn.elu", data, alpha=alpha)


def selu(data: Expr, alpha: float = 1.6732632423543772, gamma: float = 1.0507009873554805) -> Expr:
    return call("nn.selu", data, alpha=alpha, gamma=gamma)


def gelu(data: Expr, approximate: str = "none") -> Expr:
    return call("nn.gelu", data, approximate=approximate)


def softplus(data: Expr) -> Expr:
    return call("nn.softplus", data)


def hard_sigmoid(data: Expr, alpha: float = 0.2, beta: float = 0.5) -> Expr:
    return call("nn.hard_sigmoid", data, alpha=alpha, beta=beta)


def softmax(data: Expr, axis: int = -1) -> Expr:
    return call("nn.softmax", data, axis=axis)


def log_softmax(data: Expr, axis: int = -1) -> Expr:
    return call("nn.log_softmax", data, axis=axis)


def max_pool2d(data: Expr, pool_size=(1, 1), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
               ceil_mode: bool = False) -> Expr:
    return call("nn.max_pool2d", data, pool_size=_pair(pool_size), strides=_pair(strides),
                padding=_padding(padding), dilation=_pair(dilation), ceil_mode=ceil_mode)


def avg_pool2d(data: Expr, pool_size=(1, 1), strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
               ceil_mode: bool = False, count_include_pad: bool = False) -> Expr:
    return call("nn.avg_pool2d", data, pool_size=_pair(pool_size), strides=_pair(strides),
                padding=_padding(padding), dilation=_pair(dilation), ceil_mode=ceil_mode,
                count_include_pad=count_include_pad)


def global_avg_pool2d(data: Expr) -> Expr:
    return call("nn.global_avg_pool2d", data)


def global_max_pool2d(data: Expr) -> Expr:
    return call("nn.global_max_pool2d", data)


def lrn(data: Expr, size: int = 5, axis: int = 1, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0) -> Expr:
    return call("nn.lrn", data, size=size, axis=axis, alpha=alpha, beta=beta, bias=bias)


def pad(data: Expr, pad_width: Sequence[Sequence[int]], pad_value: float = 0.0, pad_mode: str = "constant") -> Expr:
    return call("nn.pad", data, pad_width=tuple(tuple(p) for p in pad_width), pad_value=pad_value, pad_mode=pad_mode)
