"""DFT and STFT as matrix products: the transform along one axis is x @ (cos - i sin) with constant matrices
(O(n^2) per transform, fine for the short axes of audio frames; no FFT kernel exists yet). Real and
imaginary parts travel as ONNX's trailing axis of size 1 or 2."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import to_numpy
from ....ir.errors import ShapeError
from ..node import OnnxNode
from ._registry import converter


def _part(node: OnnxNode, x: Expr, index: int) -> Expr:
    """x[..., index] (real 0, imaginary 1) without its last axis."""
    rank = len(x.shape)
    part = node.call("strided_slice", x, begin=(index,), end=(index + 1,), axes=(rank - 1,))
    return node.call("squeeze", part, axis=(rank - 1,))


def _matrices(rows: int, length: int, columns: int, dtype: str, inverse: bool, onesided: bool):
    """(cos, sin) of shape (rows, columns) for angle 2 pi k n / length; rows past `length` are 0
    (the signal is cut to dft_length). The inverse folds in 1/length and, for a one-sided input,
    the weights of the Hermitian half spectrum."""
    n = np.arange(rows, dtype=np.float64)[:, None]
    k = np.arange(columns, dtype=np.float64)[None, :]
    angle = 2 * np.pi * n * k / length
    cos, sin = np.cos(angle), np.sin(angle)
    keep = (np.arange(rows) < length)[:, None]
    if inverse:
        weight = np.full((rows, 1), 1.0 / length)
        if onesided:   # rows are frequencies 0..length//2: the others mirror them
            weight[1:] *= 2
            if length % 2 == 0 and length // 2 < rows:
                weight[length // 2] /= 2
            keep = (np.arange(rows) <= length // 2)[:, None]
        cos, sin = cos * weight, sin * weight
    cos, sin = np.where(keep, cos, 0.0), np.where(keep, sin, 0.0)
    return Constant(cos.astype(to_numpy(dtype))), Constant(sin.astype(to_numpy(dtype)))


@converter("DFT")
def _dft(node: OnnxNode) -> Expr:
    x = node.required(0)
    rank = len(x.shape)
    if rank < 2 or x.shape[-1] not in (1, 2):
        raise ShapeError(f"ONNX node {node.name!r} (DFT): input shape {tuple(x.shape)} must end in an axis of "
                         "size 1 (real) or 2 (complex)")
    axis = int(node.attr("axis", 1)) if node.opset < 20 else \
        (-2 if node.input(2) is None else int(node.const(2, "axis").reshape(-1)[0]))
    axis %= rank
    if axis == rank - 1:
        raise ShapeError(f"ONNX node {node.name!r} (DFT): axis {axis} is the real/imaginary axis")
    inverse, onesided = bool(node.attr("inverse", 0)), bool(node.attr("onesided", 0))
    length = None if node.input(1) is None else int(node.const(1, "dft_length").reshape(-1)[0])
    if length is None:
        length = 2 * (x.shape[axis] - 1) if inverse and onesided else x.shape[axis]
    return _transform(node, x, axis, length, inverse, onesided)


def _transform(node: OnnxNode, x: Expr, axis: int, length: int, inverse: bool, onesided: bool) -> Expr:
    """The DFT of x (..., 1 or 2) along `axis` with dft_length `length`, as ONNX's DFT."""
    rank = len(x.shape)
    size = x.shape[axis]
    columns = length // 2 + 1 if onesided and not inverse else length
    real = _part(node, x, 0)
    imag = _part(node, x, 1) if x.shape[-1] == 2 else None
    # the transformed axis goes last, for x @ matrix
    order = [d for d in range(rank - 1) if d != axis] + [axis]
    if order != list(range(rank - 1)):
        real = node.call("transpose", real, axes=tuple(order))
        imag = None if imag is None else node.call("transpose", imag, axes=tuple(order))
    cos, sin = _matrices(size, length, columns, x.dtype, inverse, onesided)
    sign = 1.0 if inverse else -1.0   # e^(sign * i angle)
    out_real = node.call("nn.matmul", real, cos)
    out_imag = node.call("nn.matmul", real, sin)
    if sign < 0:
        out_imag = node.call("negative", out_imag)
    if imag is not None:
        # (a + ib)(cos + i sign sin) = a cos - sign b sin + i (b cos + sign a sin)
        b_sin = node.call("nn.matmul", imag, sin)
        out_real = node.call("subtract" if sign > 0 else "add", out_real, b_sin)
        out_imag = node.call("add", out_imag, node.call("nn.matmul", imag, cos))
    parts = [out_real] if inverse and onesided else [out_real, out_imag]
    back = tuple(order.index(d) for d in range(rank - 1))
    if back != tuple(range(rank - 1)):
        parts = [node.call("transpose", p, axes=back) for p in parts]
    parts = [node.call("expand_dims", p, axis=rank - 1) for p in parts]
    return parts[0] if len(parts) == 1 else node.call("concatenate", *parts, axis=rank - 1)


@converter("STFT")
def _stft(node: OnnxNode) -> Expr:
    """Frames (a constant gather along time), times the window, then the DFT of each frame."""
    signal = node.required(0)
    step = int(node.const(1, "frame_step").reshape(-1)[0])
    window = node.input(2)
    if node.input(3) is not None:
        length = int(node.const(3, "frame_length").reshape(-1)[0])
    elif window is not None:
        length = window.shape[0]
    else:
        raise ShapeError(f"ONNX node {node.name!r} (STFT): give a window or a frame_length")
    frames = (signal.shape[1] - length) // step + 1
    if frames < 1 or step < 1:
        raise ShapeError(f"ONNX node {node.name!r} (STFT): a signal of {signal.shape[1]} samples holds no frame of "
                         f"{length} samples at step {step}")
    positions = np.arange(frames)[:, None] * step + np.arange(length)[None, :]
    framed = node.call("take", signal, Constant(positions.astype(np.int64)), axis=1)   # (batch, frames, length, c)
    if window is not None:
        framed = node.call("multiply", framed, node.call("reshape", window, newshape=(length, 1)))
    return _transform(node, framed, 2, length, False, bool(node.attr("onesided", 1)))
