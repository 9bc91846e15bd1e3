"""graph/ops/layout.py: data layouts ("NCHW", "NHWC", "NCHW8c") and the layout_transform op.

A layout names each axis with a letter: an upper-case letter is a primal axis,
a number plus a lower-case letter is an inner block of that primal axis
("NCHW8c": C is split into C // 8 outer and 8 inner, the inner one last).
`layout_transform(x, src_layout="NCHW", dst_layout="NHWC")` moves data between
two layouts of the same primal axes; the layout pass inserts it at the
boundaries of the region it converts.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...ir.errors import ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import shape_text, tensor_args

__all__ = ["LayoutTransformAttrs", "parse_layout", "layout_shape", "primal_sizes", "layout_index", "transform_layout",
           "primal_axes"]

_LAYOUT = re.compile(r"^([A-Z]|[0-9]+[a-z])+$")


def parse_layout(layout: str) -> list[tuple[str, int]]:
    """"NCHW8c" -> [("N", 0), ("C", 0), ("H", 0), ("W", 0), ("c", 8)]; 0 marks a primal axis."""
    if not _LAYOUT.match(layout):
        raise ShapeError(f"layout {layout!r} is not a layout string such as 'NCHW', 'NHWC' or 'NCHW8c'")
    axes = [(m.group(2), int(m.group(1))) if m.group(2) else (m.group(3), 0)
            for m in re.finditer(r"([0-9]+)([a-z])|([A-Z])", layout)]
    letters = [a for a, _ in axes]
    if len(set(letters)) != len(letters) or any(f and a.upper() not in letters for a, f in axes):
        raise ShapeError(f"layout {layout!r} repeats an axis or blocks an axis it does not have")
    return axes


def _primal(layout: str) -> str:
    return "".join(a for a, f in parse_layout(layout) if not f)


def primal_axes(layout: str) -> str:
    """The primal axes of `layout` in its order: "OHWI16o" -> "OHWI"."""
    return _primal(layout)


def layout_index(layout: str, primal: dict) -> tuple:
    """The index into a tensor in `layout` of the element at primal indices `primal` ({"O": o, ...}):
    a blocked axis splits into index // block (outer) and index % block (inner). Works on ints and
    on te / tir expressions alike."""
    axes = parse_layout(layout)
    factors = {a.upper(): f for a, f in axes if f}
    index = []
    for axis, factor in axes:
        if factor:
            index.append(primal[axis.upper()] % factor)
        elif axis in factors:
            index.append(primal[axis] // factors[axis])
        else:
            index.append(primal[axis])
    return tuple(index)


def layout_shape(primal_shape: dict[str, int], layout: str) -> tuple[int, ...]:
    """The shape in `layout` of a tensor whose primal axis sizes are `primal_shape`."""
    axes = parse_layout(layout)
    factors = {a.upper(): f for a, f in axes if f}
    shape = []
    for axis, factor in axes:
        if factor:
            shape.append(factor)
        else:
            size = primal_shape[axis]
            if axis in factors and size % factors[axis]:
                raise ShapeError(f"layout {layout!r}: axis {axis} of size {size} is not divisible by the "
                                 f"block {factors[axis]}")
            shape.append(size // factors.get(axis, 1))
    return tuple(shape)


def primal_sizes(shape: tuple[int, ...], layout: str) -> dict[str, int]:
    """{primal axis: size} of a tensor of `shape` in `layout` ("OHWI16o", (4, 3, 3, 8, 16) -> O=64, ...)."""
    axes = parse_layout(layout)
    if len(axes) != len(shape):
        raise ShapeError(f"layout {layout!r} has {len(axes)} axes but the tensor {shape_text(shape)} has {len(shape)}")
    sizes = {a: d for (a, f), d in zip(axes, shape) if not f}
    for (axis, factor), size in zip(axes, shape):
        if factor:
            if size != factor:
                raise ShapeError(f"layout {layout!r}: inner axis {axis} has size {size}, expected {factor}")
            sizes[axis.upper()] *= factor
    return sizes


def transform_layout(x: np.ndarray, src: str, dst: str, empty=np.empty) -> np.ndarray:
    """numpy: `x` (in layout `src`) rearranged into layout `dst`, written once into `empty(shape, dtype)`
    (a plugin packing weights passes sdk.host_arrays.aligned_empty: the executor then keeps them as they are)."""
    src_axes, dst_axes = parse_layout(src), parse_layout(dst)
    sizes = primal_sizes(x.shape, src)
    # src -> primal (in dst's primal order): put each block right after its outer axis, merge.
    src_letters = [a for a, _ in src_axes]
    primal_order = _primal(dst)
    perm = []
    for axis in primal_order:
        perm.append(src_letters.index(axis))
        if axis.lower() in src_letters:
            perm.append(src_letters.index(axis.lower()))
    primal = x.transpose(perm).reshape([sizes[a] for a in primal_order])
    # primal -> dst: split each blocked axis, then order as dst.
    dst_factors = {a.upper(): f for a, f in dst_axes if f}
    split_letters, split_shape = [], []
    for axis in primal_order:
        if axis in dst_factors:
            split_letters += [axis, axis.lower()]
            split_shape += [sizes[axis] // dst_factors[axis], dst_factors[axis]]
        else:
            split_letters.append(axis)
            split_shape.append(sizes[axis])
    split = primal.reshape(split_shape)
    moved = split.transpose([split_letters.index(a) for a, _ in dst_axes])
    out = empty(moved.shape, moved.dtype)
    np.copyto(out, moved)
    return out


@dataclass(frozen=True, slots=True)
class LayoutTransformAttrs(Attrs):
    """Move data from `src_layout` to `dst_layout` (same primal axes, e.g. NCHW -> NHWC or NCHW8c)."""
    src_layout: str
    dst_layout: str

    def _check(self) -> None:
        for layout in (self.src_layout, self.dst_layout):
            if not _LAYOUT.match(layout):
                self.fail(f"{layout!r} is not a layout string such as 'NCHW', 'NHWC' or 'NCHW8c'")
        if sorted(_primal(self.src_layout)) != sorted(_primal(self.dst_layout)):
            self.fail(f"{self.src_layout!r} and {self.dst_layout!r} do not have the same primal axes")


def _layout_transform_type(arg_types, attrs: LayoutTransformAttrs) -> TensorType:
    (data,) = tensor_args("layout_transform", arg_types)
    try:
        sizes = primal_sizes(data.shape, attrs.src_layout)
        return TensorType(layout_shape(sizes, attrs.dst_layout), data.dtype)
    except ShapeError as error:
        raise ShapeError(f"layout_transform: data {shape_text(data.shape)} from {attrs.src_layout} to "
                         f"{attrs.dst_layout}: {error}") from None


register_op("layout_transform", attrs=LayoutTransformAttrs, type_rule=_layout_transform_type,
            reference=lambda x, a: transform_layout(x, a.src_layout, a.dst_layout),
            pattern=OpPattern.INJECTIVE, num_inputs=1,
            doc="Rearrange data between layouts: NCHW <-> NHWC, NCHW <-> NCHW8c, ...")
