"""ir/index_range.py: the bounds of gather indices (take, gather_elements, gather_nd), checked in numpy.

An index into an axis of size n is valid in [-n, n): ONNX counts negative indices from
the end. Generated code clamps indices, so an index past the end would read a wrong
element silently; these checks run first, on constant indices at compile time (and in
the ops' numpy references), on run-time indices in the executor before the kernel.

Only numpy here: the runtime calls it without the compiler.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

__all__ = ["OutOfRangeIndex", "first_out_of_range", "describe_out_of_range"]


@dataclass(frozen=True)
class OutOfRangeIndex:
    """The first invalid index: its position in the indices array, its value and the axis size."""

    position: tuple[int, ...]
    value: int
    size: int


def first_out_of_range(indices: np.ndarray, extents: Sequence[int], per_last_axis: bool = False
                       ) -> OutOfRangeIndex | None:
    """The first element of `indices` outside [-n, n), or None when all are valid.

    n is `extents[0]` for every element, or `extents[j]` for `indices[..., j]` when
    `per_last_axis` (gather_nd, whose last axis holds one coordinate per data axis).
    """
    indices = np.asarray(indices)
    if indices.size == 0:
        return None
    sizes = np.asarray(extents, np.int64) if per_last_axis else np.int64(extents[0])
    invalid = (indices < -sizes) | (indices >= sizes)
    if not invalid.any():
        return None
    position = tuple(int(p) for p in np.argwhere(invalid)[0])
    size = int(extents[position[-1]]) if per_last_axis else int(extents[0])
    return OutOfRangeIndex(position, int(indices[position]), size)


def describe_out_of_range(op: str, node: str, bad: OutOfRangeIndex, per_last_axis: bool = False) -> str:
    """The message naming op, node, index, value and valid range (without a trailing period)."""
    where = f" (ONNX node {node!r})" if node else ""
    coordinate = f" (coordinate {bad.position[-1]} of an index tuple)" if per_last_axis else ""
    return (f"{op}{where}: index {bad.value} at position {list(bad.position)}{coordinate} is out of range for "
            f"an axis of size {bad.size}; valid indices are {-bad.size} to {bad.size - 1}")
