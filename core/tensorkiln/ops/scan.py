"""ops/scan.py: cumulative sums and products along an axis in O(n) work (tag "scan").

A te compute reads its inputs at computed indices but never carries a value from one
output element to the next, so a running total is built as a work-efficient
(Blelloch-style) tree of stages, 2 * ceil(log2 n) in all, over n + n/2 + n/4 + ... elements:

    up:    level[k + 1][j] = level[k][2j] (+) level[k][2j + 1]          (pair totals)
    down:  prefix[k][i]    = prefix[k + 1][i // 2]                       (i odd)
                           = prefix[k + 1][i // 2 - 1] (+) level[k][i]  (i even; i == 0: level[k][0])

where prefix[k] is the inclusive scan of level[k] and the top level has one element.
Floating-point sums therefore add pairwise (the order differs from numpy's running sum by
rounding only). `reverse` reads the axis backwards; `exclusive` shifts the scan by one.
"""
from __future__ import annotations

from typing import Callable

from .. import te
from ..tir import nodes as n
from . import tags
from ._common import accumulate_dtype, const_like, normalize_axis, select

__all__ = ["cumsum", "cumprod", "inclusive_scan", "stored_stage"]


def stored_stage(shape, body, name: str, tag: str) -> te.Tensor:
    """A stage that schedules keep in a buffer instead of inlining into its readers.

    Schedules inline stages that are not reductions (the GPU schedule every one of them); a scan
    or sorting-network stage reads the one below two or more times per element, so inlined they
    would expand exponentially. A product over a single element is the value itself (exact for
    -0.0, NaN and inf) and makes the stage a reduction, which every schedule stores.
    """
    one = te.reduce_axis((0, 1), name="one")
    return te.compute(shape, lambda *i: te.prod(body(*i), axis=one), name=name, tag=tag)


def _at(index: tuple, axis: int, position) -> tuple:
    index = list(index)
    index[axis] = position
    return tuple(index)


def inclusive_scan(read: Callable, shape: tuple, axis: int, combine: Callable, identity, dtype: str,
                   name: str) -> te.Tensor:
    """The inclusive scan along `axis` of the values `read(index)` over `shape`, in O(n) work.

    `combine` must be associative; `identity` is its neutral element (0 for +, 1 for *).
    """
    size = int(shape[axis])
    levels = [stored_stage(shape, lambda *i: read(i), f"{name}_level0", tags.SCAN)]
    sizes = [size]
    while sizes[-1] > 1:
        below, count = levels[-1], sizes[-1]
        half = (count + 1) // 2

        def pair(*j, below=below, count=count):
            left = below[_at(j, axis, 2 * j[axis])]
            # an odd count leaves the last pair with one element: the index is clamped, the value dropped
            right_index = te.min(2 * j[axis] + 1, count - 1)
            right = select(2 * j[axis] + 1 < count, below[_at(j, axis, right_index)], const_like(identity, dtype))
            return combine(left, right)
        levels.append(stored_stage(_at(shape, axis, half), pair, f"{name}_level{len(levels)}", tags.SCAN))
        sizes.append(half)
    prefix = levels[-1]
    for depth in range(len(levels) - 2, -1, -1):
        level, above = levels[depth], prefix

        def down(*i, level=level, above=above):
            position = i[axis]
            odd = n.BitAnd(position, n.const(1)).equal(1)
            before = above[_at(i, axis, te.max(position // 2 - 1, 0))]
            even = select(position > 0, combine(before, level[i]), level[i])
            return select(odd, above[_at(i, axis, position // 2)], even)
        prefix = stored_stage(_at(shape, axis, sizes[depth]), down, f"{name}_prefix{depth}", tags.SCAN)
    return prefix


def _cumulative(combine: Callable, identity, name: str) -> Callable:
    def compute(inputs, attrs, out_type):
        (x,) = inputs
        axis = normalize_axis(attrs.axis, x.ndim)
        size = int(x.shape[axis])
        dtype = accumulate_dtype(x.dtype)

        def source(position):
            return size - 1 - position if attrs.reverse else position

        def read(i):
            return te.cast(x[_at(i, axis, source(i[axis]))], dtype)
        scan = inclusive_scan(read, tuple(x.shape), axis, combine, identity, dtype, f"T_{name}")

        def body(*i):
            position = source(i[axis])   # where element i sits in the (possibly reversed) scan order
            if not attrs.exclusive:
                return te.cast(scan[_at(i, axis, position)], x.dtype)
            previous = scan[_at(i, axis, te.max(position - 1, 0))]
            return te.cast(select(position > 0, previous, const_like(identity, dtype)), x.dtype)
        return te.compute(x.shape, body, name=f"T_{name}", tag=tags.SCAN)
    compute.__name__ = name
    compute.__doc__ = f"{name} along `axis` (attrs: axis, exclusive, reverse) as an O(n) scan tree."
    return compute


cumsum = _cumulative(lambda a, b: a + b, 0, "cumsum")
cumprod = _cumulative(lambda a, b: a * b, 1, "cumprod")
