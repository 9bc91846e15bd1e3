"""cumprod: the running product along an axis (cumsum, its sum twin, lives in tensor.py)."""
from __future__ import annotations

import numpy as np

from ..registry import OpPattern, register_op
from ._rules import normalize_axis, tensor_args
from .tensor import CumsumAttrs


def _cumprod_type(arg_types, attrs: CumsumAttrs):
    data = tensor_args("cumprod", arg_types)[0]
    normalize_axis("cumprod", attrs.axis, data.ndim)
    return data


def _cumprod(x, attrs: CumsumAttrs):
    axis = attrs.axis % x.ndim
    data = np.flip(x, axis) if attrs.reverse else x
    with np.errstate(all="ignore"):
        out = np.cumprod(data, axis=axis, dtype=x.dtype)
    if attrs.exclusive:
        # shift by one along the axis: the first product is the empty one (1)
        ones = np.ones_like(np.take(out, [0], axis=axis))
        out = np.concatenate([ones, np.take(out, np.arange(out.shape[axis] - 1), axis=axis)], axis=axis)
    return np.flip(out, axis).copy() if attrs.reverse else out


register_op("cumprod", attrs=CumsumAttrs, type_rule=_cumprod_type, reference=_cumprod, pattern=OpPattern.OPAQUE,
            num_inputs=1, tolerance={"float16": 2e-3},
            doc="Running product along `axis` (ONNX CumProd): exclusive starts from 1, reverse runs backwards.")
