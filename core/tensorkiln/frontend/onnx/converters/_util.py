"""Small helpers shared by converters."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant
from ....ir.dtypes import from_numpy, to_numpy
from ....ir.errors import DTypeError


def scalar(value, dtype: str) -> Constant:
    """A 0-d constant of `dtype`."""
    return Constant(np.array(value, dtype=to_numpy(dtype)))


def onnx_dtype(elem_type: int, node=None) -> str:
    """Map an ONNX TensorProto element type to a tensorkiln dtype string."""
    from onnx import helper
    try:
        return from_numpy(helper.tensor_dtype_to_np_dtype(elem_type))
    except (DTypeError, KeyError, TypeError, ValueError):
        where = f" in ONNX node {node.name!r} ({node.op_type})" if node is not None else ""
        raise DTypeError(f"ONNX element type {elem_type}{where} is not supported by tensorkiln") from None


def ints(values) -> tuple[int, ...]:
    return tuple(int(v) for v in np.asarray(values).reshape(-1))


def auto_pad(node, in_sizes, kernel, strides, dilations) -> list[int]:
    """Explicit (begins..., ends...) pads for `auto_pad` SAME_UPPER/SAME_LOWER/VALID/NOTSET."""
    mode = node.attr("auto_pad", "NOTSET")
    rank = len(kernel)
    if mode in ("NOTSET", ""):
        pads = list(node.attr("pads", [0] * (2 * rank)))
        return pads
    if mode == "VALID":
        return [0] * (2 * rank)
    begins, ends = [], []
    for size, k, s, d in zip(in_sizes, kernel, strides, dilations):
        out = -(-size // s)
        total = max(0, (out - 1) * s + (k - 1) * d + 1 - size)
        small, large = total // 2, total - total // 2
        if mode == "SAME_UPPER":
            begins.append(small)
            ends.append(large)
        else:
            begins.append(large)
            ends.append(small)
    return begins + ends
