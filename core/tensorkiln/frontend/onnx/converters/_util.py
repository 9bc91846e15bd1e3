"""Small helpers shared by converters."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant
from ....ir.dtypes import from_numpy, to_numpy
from ....ir.errors import DTypeError
from ....passes.fuse_ops import MAX_GROUP_INPUTS

MAX_OP_INPUTS = MAX_GROUP_INPUTS
"""Inputs of one call that an ONNX variadic node becomes at most (a kernel's buffer parameters are
bounded, see fuse_ops.MAX_GROUP_INPUTS): a Concat of more inputs becomes a tree of Concats."""


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


def variadic_tree(node, op_name: str, args, **attrs):
    """`op_name(*args)` for an associative op as a tree of calls of at most MAX_OP_INPUTS inputs
    each: concatenate(300 inputs) -> concatenate(concatenate(64 inputs), ..., concatenate(44 inputs))."""
    args = list(args)
    while len(args) > MAX_OP_INPUTS:
        chunks = [args[i:i + MAX_OP_INPUTS] for i in range(0, len(args), MAX_OP_INPUTS)]
        args = [chunk[0] if len(chunk) == 1 else node.call(op_name, *chunk, **attrs) for chunk in chunks]
    return node.call(op_name, *args, **attrs)
