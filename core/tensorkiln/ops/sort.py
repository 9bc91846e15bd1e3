"""ops/sort.py: topk as a bitonic top-k network (tag "sort").

te computes only gather, so the sort is a fixed network of compare-exchange stages over
a permutation of indices (a stage reads the previous permutation at i and at i's partner
and keeps the better or the worse of the two). With n the axis length padded to a power
of two N and K the power of two at or above k:

1. sort runs of K with bitonic sort: log K (log K + 1) / 2 stages over N elements;
   neighbouring runs come out in opposite directions;
2. while more than one run is left, keep the better element of each position of two
   neighbouring runs (one ascending, one descending: the K best of the 2K form a bitonic
   run) and re-sort that half-size run with a bitonic merge: 1 + log K stages, each half
   the size of the one before.

Work is O(N log^2 K): O(n) stages of O(n) for small k, O(n log^2 n) for k = n (a full
sort), instead of the O(n^2) of ranking each element against every other.

The order is strict, so ties cannot repeat an index: `a` goes before `b` when its value is
better (larger for largest=True), or equal with the lower index (ONNX's stable ties). NaN
counts as above every number (onnxruntime): first when largest, last when smallest. Padding
goes after every real element.
"""
from __future__ import annotations

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from . import tags
from ._common import normalize_axis, select
from .scan import stored_stage

__all__ = ["topk"]

_INDEX = "int32"


def _at(index: tuple, axis: int, position) -> tuple:
    index = list(index)
    index[axis] = position
    return tuple(index)


class _Network:
    """Builds the stages: each is a tensor of indices into `x` along `axis` (>= size: padding)."""

    def __init__(self, x: te.Tensor, axis: int, largest: bool):
        self.x, self.axis, self.largest = x, axis, largest
        self.size = int(x.shape[axis])
        self.padded = _power_of_two_at_least(self.size)
        self.count = 0

    def value(self, index: tuple, position) -> n.PrimExpr:
        if self.padded == self.size:
            return self.x[_at(index, self.axis, position)]
        return self.x[_at(index, self.axis, te.min(position, self.size - 1))]

    def before(self, index: tuple, a, b) -> n.PrimExpr:
        """Whether element a (an index into x) goes before element b."""
        va, vb = self.value(index, a), self.value(index, b)
        better = va > vb if self.largest else va < vb
        tie = va.equal(vb)
        if dtype_of(self.x.dtype).is_float:
            nan_a, nan_b = n.NE(va, va), n.NE(vb, vb)
            better = n.Or(better, n.And(nan_a, n.Not(nan_b)) if self.largest else n.And(nan_b, n.Not(nan_a)))
            tie = n.Or(tie, n.And(nan_a, nan_b))
        ordered = n.Or(better, n.And(tie, a < b))
        if self.padded == self.size:
            return ordered
        return n.And(a < self.size, n.Or(b >= self.size, ordered))

    def stage(self, shape: tuple, body) -> te.Tensor:
        self.count += 1
        return stored_stage(shape, body, f"T_topk_stage{self.count}", tags.SORT)

    # Run lengths and distances are powers of two, so positions split with bit operations:
    # `position & distance` is bit log2(distance) of the position, `position ^ distance` its partner.

    def exchange(self, order: te.Tensor, distance: int, run: int) -> te.Tensor:
        """One compare-exchange stage: partners `distance` apart; runs of `run` alternate direction."""
        axis = self.axis

        def body(*i):
            position = i[axis]
            mine, theirs = order[i], order[_at(i, axis, n.BitXor(position, n.const(distance)))]
            lower = n.BitAnd(position, n.const(distance)).equal(0)
            ascending = n.BitAnd(position, n.const(run)).equal(0)
            # the lower position of an ascending run (the upper of a descending one) keeps the first
            keep_first = n.EQ(lower, ascending)
            return select(n.EQ(keep_first, self.before(i, mine, theirs)), mine, theirs)
        return self.stage(tuple(order.shape), body)

    def merge(self, order: te.Tensor, run: int) -> te.Tensor:
        """Sort bitonic runs of length `run` (alternating directions run by run)."""
        distance = run // 2
        while distance >= 1:
            order = self.exchange(order, distance, run)
            distance //= 2
        return order

    def halve(self, order: te.Tensor, run: int) -> te.Tensor:
        """Keep the better of positions j and j + run of each pair of runs (2 runs -> 1)."""
        axis = self.axis
        shape = _at(tuple(order.shape), axis, int(order.shape[axis]) // 2)

        def body(*i):
            position = i[axis]
            # base = (position // run) * 2 * run + position % run
            base = n.BitOr(n.ShiftLeft(n.BitAnd(position, n.const(-run)), n.const(1)),
                           n.BitAnd(position, n.const(run - 1)))
            a, b = order[_at(i, axis, base)], order[_at(i, axis, n.BitOr(base, n.const(run)))]
            return select(self.before(i, a, b), a, b)
        return self.stage(shape, body)


def _power_of_two_at_least(value: int) -> int:
    return 1 << max(0, (value - 1).bit_length())


def topk(inputs, attrs, out_type) -> list[te.Tensor]:
    """Values and int64 indices of the k best entries along `axis`, best first (stable ties)."""
    (x,) = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    net = _Network(x, axis, attrs.largest)
    run = min(_power_of_two_at_least(max(attrs.k, 1)), net.padded)
    order = net.stage(_at(tuple(x.shape), axis, net.padded), lambda *i: te.cast(i[axis], _INDEX))
    length = 2
    while length <= run:
        order = net.merge(order, length)
        length *= 2
    while int(order.shape[axis]) > run:
        order = net.merge(net.halve(order, run), run)
    shape = out_type.fields[0].shape

    def index_body(*r):
        return te.cast(order[r], "int64")

    def value_body(*r):
        return net.value(r, order[r])
    values = te.compute(shape, value_body, name="T_topk_values", tag=tags.SORT)
    indices = te.compute(shape, index_body, name="T_topk_indices", tag=tags.SORT)
    return [values, indices]
