"""ops/sort.py: topk (tag "sort"), per row as a bounded heap or a merge sort (`topk`), or as a bitonic
network (`topk_network`).

The order is strict, so ties cannot repeat an index: `a` goes before `b` when its value is
better (larger for largest=True), or equal with the lower index (ONNX's stable ties). NaN
counts as above every number (onnxruntime): first when largest, last when smallest. The
output is sorted best first whatever the `sorted` attribute says.

`topk` is an extern stage (te.extern) that handles one row (every axis but `axis`) at a time,
the rows a PARALLEL loop (on GPUs, one thread per row). By default it keeps the k best
elements seen so far as a heap in the output buffers themselves (values and int64 indices),
the worst at the root:

1. fill: the first k elements are added one by one and sifted up;
2. scan: each further element that goes before the root replaces it and is sifted down;
3. sort: the root (the worst) is swapped with the last heap slot, the heap shrinks by one
   and the moved element is sifted down, until the slots hold the k best, best first.

The heap is 4-ary (HEAP_ARITY). A sift is a fixed number of predicated steps, the heap's depth
(tir has no while loop): a step that finds the element in place marks the sift done and the
later steps do nothing. Elements move into a hole rather than being swapped, and the sort
phase sinks the root's hole to a leaf first (one tournament per level, no comparison with the
moved element), then sifts the moved element up from there, usually a step or two. The work
per row is O(n log k + k log k): O(n log n) for a full sort, O(n) for small k.

A heap of many elements is slow once it outgrows the caches (each level of a sift is a miss),
so rows longer than 4096 of which at least an eighth is kept are merge-sorted instead
(`_sorts_whole_rows`): runs of 1, 2, 4, ... are merged pairwise between two scratch buffers of
the row's length, each merge from both ends at once (two independent chains of comparisons),
then the first k are copied out: O(n log n), reading and writing memory in order. Measured on
1e6 floats (2 shared cores, load 4.5): k = n 174 ms (heap 957 ms, numpy's stable argsort
211 ms); k = n/8 205 ms (heap 235 ms); k = n/100 210 ms (heap 26 ms). Rows of at most 4096,
all that the GPU plugins run, always take the heap, which needs no scratch memory.

`topk_network` is the data-parallel alternative, a fixed network of compare-exchange stages
over a permutation of indices (te computes only gather, so a stage reads the previous
permutation at i and at i's partner and keeps the better or the worse of the two). With n
the axis length padded to a power of two N and K the power of two at or above k:

1. sort runs of K with bitonic sort: log K (log K + 1) / 2 stages over N elements;
   neighbouring runs come out in opposite directions;
2. while more than one run is left, keep the better element of each position of two
   neighbouring runs (one ascending, one descending: the K best of the 2K form a bitonic
   run) and re-sort that half-size run with a bitonic merge: 1 + log K stages, each half
   the size of the one before.

Its work is O(N log^2 K), O(n log^2 n) for a full sort; padding goes after every real element.
"""
from __future__ import annotations

import abc
import math

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from . import tags
from ._common import normalize_axis, select
from .scan import stored_stage

__all__ = ["topk", "topk_network"]

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


def topk_network(inputs, attrs, out_type) -> list[te.Tensor]:
    """Values and int64 indices of the k best entries along `axis`, best first (stable ties), computed
    by a bitonic network of te stages (data-parallel; see the module docstring)."""
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


def _goes_before(va, ia, vb, ib, largest: bool, is_float: bool) -> n.PrimExpr:
    """Whether (value va, index ia) goes before (vb, ib) in the output order."""
    better = va > vb if largest else va < vb
    tie = va.equal(vb)
    if is_float:
        nan_a, nan_b = n.NE(va, va), n.NE(vb, vb)
        better = n.Or(better, n.And(nan_a, n.Not(nan_b)) if largest else n.And(nan_b, n.Not(nan_a)))
        tie = n.Or(tie, n.And(nan_a, nan_b))
    return n.Or(better, n.And(tie, ia < ib))


HEAP_ARITY = 4
"""Children per heap node. Four children share a cache line (values and indices alike) and halve the
levels of a binary heap: a full sort of 1e6 floats took 517 ms with 4, 927 ms with 2 and 541 ms with 8
(cpu_llvm, same process, interleaved, 2 shared cores at load 2.2)."""


def _depth(slot: int, arity: int) -> int:
    depth = 0
    while slot > 0:
        slot, depth = (slot - 1) // arity, depth + 1
    return depth


class _Rows(abc.ABC):
    """An extern body that handles each row (every axis but `axis`) of x on its own, the rows a
    PARALLEL loop: `_row` builds one row's statements, addressing it through `_x_slot` / `_slot`."""

    def __init__(self, shape: tuple, axis: int, k: int, largest: bool, dtype: str):
        self.size, self.k, self.largest, self.dtype = int(shape[axis]), k, largest, dtype
        self.is_float = dtype_of(dtype).is_float
        self.outer = math.prod(int(d) for d in shape[:axis])
        self.inner = math.prod(int(d) for d in shape[axis + 1:])

    def __call__(self, ins, outs) -> n.Stmt:
        ib = te.IRBuilder()
        rows = self.outer * self.inner
        if self.k == 0 or rows == 0:
            return ib.get()
        self.x, self.values, self.indices = ib.buffer(ins[0]), ib.buffer(outs[0]), ib.buffer(outs[1])
        with ib.for_range(0, rows, name="row", kind="parallel" if rows > 1 else "serial") as row:
            stride = self.inner
            if stride == 1:
                self.x_base, self.out_base = ib.let("x_base", row * self.size), ib.let("out_base", row * self.k)
            else:
                outer, inner = row // stride, row % stride
                self.x_base = ib.let("x_base", outer * (self.size * stride) + inner)
                self.out_base = ib.let("out_base", outer * (self.k * stride) + inner)
            self._row(ib)
        return ib.get()

    @abc.abstractmethod
    def _row(self, ib: te.IRBuilder) -> None:
        """Emit one row's algorithm (`_HeapRows`, `_MergeRows`) at x_base / out_base."""

    def _x_slot(self, position) -> n.PrimExpr:
        return self.x_base + (position if self.inner == 1 else position * self.inner)

    def _slot(self, position) -> n.PrimExpr:
        return self.out_base + (position if self.inner == 1 else position * self.inner)

    def _before(self, va, ia, vb, ib) -> n.PrimExpr:
        return _goes_before(va, ia, vb, ib, self.largest, self.is_float)


class _MergeRows(_Rows):
    """A stable merge sort of each row (runs of 1, 2, 4, ... merged pairwise between two scratch
    buffers of the row's length), then its first k: O(n log n) whatever k, and every pass reads
    and writes memory in order."""

    def _row(self, ib: te.IRBuilder) -> None:
        size = self.size
        buffers = [(ib.allocate(self.dtype, size, "sort_values"), ib.allocate("int32", size, "sort_indices"))
                   for _ in range(2)]
        cursors = [ib.scalar("int32", name) for name in ("front_left", "front_right", "back_left", "back_right")]
        with ib.for_range(0, size, name="copy") as j:
            buffers[0][0][j] = self.x[self._x_slot(j)]
            buffers[0][1][j] = j
        passes = (size - 1).bit_length()   # run widths 1, 2, 4, ... below size
        if passes >= 2:
            # two passes per iteration (there and back), so the IR holds two merge loops, not log n
            with ib.for_range(0, passes // 2, name="passes") as twice:
                width = ib.let("width", n.ShiftLeft(n.const(1), twice * 2))
                self._merge_pass(ib, buffers[0], buffers[1], width, cursors)
                self._merge_pass(ib, buffers[1], buffers[0], ib.let("width", width * 2), cursors)
        if passes % 2:
            self._merge_pass(ib, buffers[0], buffers[1], 1 << (passes - 1), cursors)
        values, indices = buffers[passes % 2]
        with ib.for_range(0, self.k, name="out") as j:
            self.values[self._slot(j)] = values[j]
            self.indices[self._slot(j)] = te.cast(indices[j], "int64")

    def _merge_pass(self, ib: te.IRBuilder, source, target, width, cursors) -> None:
        """Merge each pair of neighbouring sorted runs of `width` (an int, or an expression) from
        `source` into `target`, from both ends at once: the front takes the pair's first elements in
        order, the back its last ones in reverse order; two independent chains of loads and
        comparisons instead of one."""
        size = self.size
        if isinstance(width, int):
            span, pairs = min(2 * width, size), -(-size // (2 * width))
            # every pair but a shorter last one has `span` elements; span is even unless it is the row
            is_full = pairs * span == size and span % 2 == 0
        else:
            span, pairs, is_full = te.min(width * 2, size), (width * 2 + (size - 1)) // (width * 2), False
        front_left, front_right, back_left, back_right = cursors
        with ib.for_range(0, pairs, name="pair") as pair:
            low = ib.let("low", pair * (2 * width))
            middle = ib.let("middle", te.min(low + width, size))
            high = ib.let("high", te.min(low + 2 * width, size))
            front_left[0], front_right[0] = low, middle
            back_left[0], back_right[0] = middle - 1, high - 1
            with ib.for_range(0, (span + 1) // 2, name="merge") as step:
                if is_full:
                    self._merge_front(ib, source, target, low, middle, high, step, front_left, front_right)
                    self._merge_back(ib, source, target, low, middle, high, step, back_left, back_right)
                else:
                    with ib.if_scope(step < (high - low + 1) // 2):
                        self._merge_front(ib, source, target, low, middle, high, step, front_left, front_right)
                    with ib.if_scope(step < (high - low) // 2):
                        self._merge_back(ib, source, target, low, middle, high, step, back_left, back_right)

    def _load(self, ib: te.IRBuilder, source, slot, name: str):
        slot = te.max(te.min(slot, self.size - 1), 0)   # a used-up run is read in bounds and never taken
        return ib.let(f"{name}_value", source[0][slot]), ib.let(f"{name}_index", source[1][slot])

    def _merge_front(self, ib, source, target, low, middle, high, step, left, right) -> None:
        i, j = ib.let("i", left[0]), ib.let("j", right[0])
        left_value, left_index = self._load(ib, source, i, "left")
        right_value, right_index = self._load(ib, source, j, "right")
        # the order is strict (ties go by index), so the merge is stable
        take_right = ib.let("take_right", n.And(j < high, n.Or(i >= middle, self._before(
            right_value, right_index, left_value, left_index))))
        target[0][low + step] = n.Select(take_right, right_value, left_value)
        target[1][low + step] = n.Select(take_right, right_index, left_index)
        left[0] = i + n.Select(take_right, n.const(0), n.const(1))
        right[0] = j + n.Select(take_right, n.const(1), n.const(0))

    def _merge_back(self, ib, source, target, low, middle, high, step, left, right) -> None:
        i, j = ib.let("i", left[0]), ib.let("j", right[0])
        left_value, left_index = self._load(ib, source, i, "left")
        right_value, right_index = self._load(ib, source, j, "right")
        take_left = ib.let("take_left", n.And(i >= low, n.Or(j < middle, self._before(
            right_value, right_index, left_value, left_index))))
        target[0][high - 1 - step] = n.Select(take_left, left_value, right_value)
        target[1][high - 1 - step] = n.Select(take_left, left_index, right_index)
        left[0] = i - n.Select(take_left, n.const(1), n.const(0))
        right[0] = j - n.Select(take_left, n.const(0), n.const(1))


class _HeapRows(_Rows):
    """Builds the extern body of `topk`: one bounded heap per row, kept in the output buffers."""

    def __init__(self, shape: tuple, axis: int, k: int, largest: bool, dtype: str):
        super().__init__(shape, axis, k, largest, dtype)
        self.arity = HEAP_ARITY
        self.steps = _depth(k - 1, self.arity) if k else 0   # levels below the root of a k-element heap

    def _row(self, ib: te.IRBuilder) -> None:
        self.hole = ib.scalar("int32", "hole")
        with ib.for_range(0, self.k, name="fill") as j:
            self._sift_up(ib, ib.let("value", self.x[self._x_slot(j)]), te.cast(j, "int64"), j)
        if self.size > self.k:
            with ib.for_range(self.k, self.size, name="scan") as j:
                value, index = ib.let("value", self.x[self._x_slot(j)]), te.cast(j, "int64")
                with ib.if_scope(self._before(value, index, self.values[self._slot(0)],
                                              self.indices[self._slot(0)])):
                    self._sift_down(ib, value, index, self.k)
        if self.k > 1:
            with ib.for_range(0, self.k - 1, name="drain") as step:
                last = ib.let("last", self.k - 1 - step)
                value, index = ib.let("value", self.values[self._slot(last)]), \
                    ib.let("index", self.indices[self._slot(last)])
                self.values[self._slot(last)] = self.values[self._slot(0)]
                self.indices[self._slot(last)] = self.indices[self._slot(0)]
                # bottom-up: the hole left at the root sinks to a leaf, then `value` rises from there
                # (it came from the bottom, so it rarely rises far): one comparison per level
                self._sink_hole(ib, last)
                self._sift_up(ib, value, index, self.hole[0])

    # A sift stops by setting the hole to -1 - position: the later steps see a negative hole and do
    # nothing, and the element goes to the decoded position.

    def _put(self, value, index) -> None:
        hole = self.hole[0]
        position = n.Select(hole < 0, -1 - hole, hole)
        self.values[self._slot(position)] = value
        self.indices[self._slot(position)] = index

    def _worse_child(self, ib: te.IRBuilder, first, count):
        """(slot, value, index) of the child of the hole that goes last, by a tournament. Slots past
        the heap's end read its last slot instead: an element does not go before itself, so such a
        duplicate never wins over the real child it meets."""
        players = []
        for j in range(self.arity):
            slot = first if j == 0 else ib.let("child", te.min(first + j, count - 1))
            players.append((slot, ib.let("child_value", self.values[self._slot(slot)]),
                            ib.let("child_index", self.indices[self._slot(slot)])))
        while len(players) > 1:
            winners = []
            for a, b in zip(players[::2], players[1::2]):
                later = ib.let("later", self._before(a[1], a[2], b[1], b[2]))
                winners.append(tuple(ib.let(name, n.Select(later, y, x))
                                     for name, x, y in zip(("child", "child_value", "child_index"), a, b)))
            players = winners + players[len(players) // 2 * 2:]
        return players[0]

    def _sift_up(self, ib: te.IRBuilder, value, index, start) -> None:
        """Put (value, index) into the hole at slot `start` and move it up while its parent goes before it."""
        hole = self.hole
        hole[0] = start
        if self.steps:
            with ib.for_range(0, self.steps, name="up"):
                at = ib.let("at", hole[0])
                with ib.if_scope(at > 0):
                    parent = ib.let("parent", (at - 1) // self.arity)
                    parent_value = ib.let("parent_value", self.values[self._slot(parent)])
                    parent_index = ib.let("parent_index", self.indices[self._slot(parent)])
                    # the worse element must sit above: a parent that goes before the new one moves down
                    self._step(ib, self._before(parent_value, parent_index, value, index), at, parent,
                               parent_value, parent_index)
        self._put(value, index)

    def _sift_down(self, ib: te.IRBuilder, value, index, count) -> None:
        """Put (value, index) at the root of the heap of slots [0, count) and move it down while its
        worse child goes after it."""
        hole = self.hole
        hole[0] = 0
        if self.steps:
            with ib.for_range(0, self.steps, name="down"):
                at = ib.let("at", hole[0])
                left = ib.let("first", at * self.arity + 1)
                with ib.if_scope(n.And(at >= 0, left < count)):
                    child, child_value, child_index = self._worse_child(ib, left, count)
                    self._step(ib, self._before(value, index, child_value, child_index), at, child,
                               child_value, child_index)
        self._put(value, index)

    def _step(self, ib: te.IRBuilder, moves, at, other, other_value, other_index) -> None:
        """One sift step: when `moves`, the element at slot `other` moves into the hole at `at` and the
        hole goes to `other`; else the sift is over (the hole is marked done: -1 - at)."""
        with ib.if_scope(moves):
            self.values[self._slot(at)] = other_value
            self.indices[self._slot(at)] = other_index
            self.hole[0] = other
        with ib.else_scope():
            self.hole[0] = -1 - at

    def _sink_hole(self, ib: te.IRBuilder, count) -> None:
        """Move the hole at the root of the heap of slots [0, count) down to a leaf, its worse child
        moving up at each level."""
        hole = self.hole
        hole[0] = 0
        if self.steps:
            with ib.for_range(0, self.steps, name="sink"):
                at = ib.let("at", hole[0])
                left = ib.let("first", at * self.arity + 1)
                with ib.if_scope(left < count):
                    child, child_value, child_index = self._worse_child(ib, left, count)
                    self.values[self._slot(at)] = child_value
                    self.indices[self._slot(at)] = child_index
                    hole[0] = child


MERGE_MIN_LENGTH = 4097
MERGE_MIN_FRACTION = 8


def _sorts_whole_rows(size: int, k: int) -> bool:
    """Whether a merge sort of each row beats the heap: long rows of which much is kept.

    Rows up to 4096 elements (all a GPU plugin runs) always use the heap, which needs no scratch."""
    return size >= MERGE_MIN_LENGTH and k * MERGE_MIN_FRACTION >= size


def topk(inputs, attrs, out_type) -> list[te.Tensor]:
    """Values and int64 indices of the k best entries along `axis`, best first (stable ties), computed
    by a bounded heap per row in an extern stage: O(n log k) per row (see the module docstring)."""
    (x,) = inputs
    axis = normalize_axis(attrs.axis, x.ndim)
    values_type, indices_type = out_type.fields
    shape = tuple(values_type.shape)
    k = int(shape[axis])
    kind = _MergeRows if _sorts_whole_rows(int(x.shape[axis]), k) else _HeapRows
    body = kind(tuple(x.shape), axis, k, attrs.largest, x.dtype)
    values, indices = te.extern([shape, shape], [x], body, dtypes=[values_type.dtype, indices_type.dtype],
                                name="T_topk", tag=tags.SORT, output_names=["T_topk_values", "T_topk_indices"])
    return [values, indices]
