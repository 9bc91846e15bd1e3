"""col2im: ONNX Col2Im, the inverse of im2col: sliding blocks (N, C * prod(block), L) summed back
into an image (N, C, *image_shape); overlapping blocks add up."""
from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import shape_text, tensor_args

__all__ = ["Col2ImAttrs", "block_counts"]


@dataclass(frozen=True, slots=True)
class Col2ImAttrs(Attrs):
    """Per spatial axis: image size, block size, stride, dilation; pads are (begins..., ends...)."""
    image_shape: tuple[int, ...] = ()
    block_shape: tuple[int, ...] = ()
    strides: tuple[int, ...] = ()
    dilations: tuple[int, ...] = ()
    pads: tuple[int, ...] = ()

    def _check(self) -> None:
        rank = len(self.image_shape)
        if not (len(self.block_shape) == len(self.strides) == len(self.dilations) == rank
                and len(self.pads) == 2 * rank):
            self.fail(f"image_shape {self.image_shape}, block_shape {self.block_shape}, strides {self.strides}, "
                      f"dilations {self.dilations} need one entry per spatial axis and pads {self.pads} two")


def block_counts(attrs: Col2ImAttrs) -> tuple[int, ...]:
    """Blocks along each spatial axis."""
    rank = len(attrs.image_shape)
    return tuple((attrs.image_shape[d] + attrs.pads[d] + attrs.pads[d + rank]
                  - attrs.dilations[d] * (attrs.block_shape[d] - 1) - 1) // attrs.strides[d] + 1
                 for d in range(rank))


def _col2im_type(arg_types, attrs: Col2ImAttrs) -> TensorType:
    (x,) = tensor_args("col2im", arg_types)
    volume = int(np.prod(attrs.block_shape))
    blocks = int(np.prod(block_counts(attrs)))
    if x.ndim != 3 or x.shape[1] % volume or x.shape[2] != blocks:
        raise ShapeError(f"col2im: input {shape_text(x.shape)} must be (N, C * {volume}, {blocks}) for blocks "
                         f"{attrs.block_shape} over image {attrs.image_shape} (block counts {block_counts(attrs)})")
    return TensorType((x.shape[0], x.shape[1] // volume, *attrs.image_shape), x.dtype)


def _col2im(x, attrs: Col2ImAttrs):
    rank = len(attrs.image_shape)
    counts = block_counts(attrs)
    volume = int(np.prod(attrs.block_shape))
    batch, channels = x.shape[0], x.shape[1] // volume
    padded = [s + attrs.pads[d] + attrs.pads[d + rank] for d, s in enumerate(attrs.image_shape)]
    out = np.zeros((batch, channels, *padded), dtype=np.float64)
    blocks = x.reshape(batch, channels, *attrs.block_shape, *counts).astype(np.float64)
    for offset in itertools.product(*(range(k) for k in attrs.block_shape)):
        window = tuple(slice(o * dil, o * dil + (n - 1) * st + 1, st)
                       for o, dil, st, n in zip(offset, attrs.dilations, attrs.strides, counts))
        out[(slice(None), slice(None), *window)] += blocks[(slice(None), slice(None), *offset)]
    crop = tuple(slice(attrs.pads[d], attrs.pads[d] + attrs.image_shape[d]) for d in range(rank))
    return out[(slice(None), slice(None), *crop)].astype(x.dtype)


register_op("col2im", attrs=Col2ImAttrs, type_rule=_col2im_type, reference=_col2im, pattern=OpPattern.OPAQUE,
            num_inputs=1, tolerance={"float16": 2e-3},
            doc="ONNX Col2Im: sum sliding blocks (N, C * prod(block), L) back into images (N, C, *image_shape).")
