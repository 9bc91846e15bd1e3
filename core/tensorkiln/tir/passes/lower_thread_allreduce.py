"""tir/passes/lower_thread_allreduce.py: ThreadAllReduce as a tree in shared memory, or warp shuffles.

A `ThreadAllReduce` (written by te lowering where a reduction axis is bound to threadIdx)
says "every thread of the group ends up with the combination of the group's values". The
group is the threads that differ only in the reduced thread indices; the other thread
indices of the launch (threadIdx.y for a block of rows, say) tell groups apart.

Shared-memory form, for every target with work-group memory and a barrier (TVM's
lower_thread_allreduce.cc does the same):

    red_buf[g * T + t] = value;  barrier
    if (t < T - P) red_buf[g*T + t] = combine(red_buf[g*T + t], red_buf[g*T + t + P]);  barrier
    for s in P/2, P/4, ..., 1:  if (t < s) red_buf[g*T + t] = combine(..[t], ..[t + s]);  barrier
    result = red_buf[g * T];  barrier    (the last barrier lets the next reduction reuse red_buf)

with T the threads reduced, P the largest power of two <= T, t and g the thread's place
in its group and the group's number. Warp form (a target that names shuffle calls, and a
reduction over threadIdx.x whose groups fill whole warps or power-of-two parts of one):
shuffle-down halves within each warp; with more than one warp per group the warps' partial
results meet in shared memory once and every warp combines them again by shuffles, so all
threads get the result without a broadcast through memory.

Run by the C-source emitters (they know the target's warp size), after te.LOWER_PIPELINE.
"""
from __future__ import annotations

import dataclasses
import math

from ...ir.errors import CompileError
from .. import nodes as n
from ..visit import collect_vars, post_order_visit

__all__ = ["lower_thread_allreduce", "has_thread_allreduce", "SHUFFLE_DOWN", "SHUFFLE_BROADCAST"]

SHUFFLE_DOWN = "tk_shfl_down"
"""Call(dtype, SHUFFLE_DOWN, (value, offset, width)): the value of lane + offset within segments of
`width` lanes (the thread's own value past the segment's end), CUDA's __shfl_down_sync."""
SHUFFLE_BROADCAST = "tk_shfl"
"""Call(dtype, SHUFFLE_BROADCAST, (value, lane, width)): the value of `lane` of the thread's segment."""

_I32 = "int32"


def _int(value: int) -> n.IntImm:
    return n.IntImm(_I32, value)


def has_thread_allreduce(func: n.PrimFunc) -> bool:
    found = []
    post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, n.ThreadAllReduce) else None)
    return bool(found)


def lower_thread_allreduce(func: n.PrimFunc, warp_size: int = 0, shuffle_dtypes: tuple[str, ...] = ()) -> n.PrimFunc:
    """`func` with every ThreadAllReduce expanded; the same object when it has none.

    `warp_size` > 0 allows the warp form for values whose dtypes are all in `shuffle_dtypes`;
    0 always gives the shared-memory form. Raises CompileError when a reduction sits under a
    branch that differs between threads, or inside a thread loop narrower than the launch
    (idle threads would skip its barriers).
    """
    if not has_thread_allreduce(func):
        return func
    lowering = _Lowering(func, warp_size, frozenset(shuffle_dtypes))
    body = lowering.stmt(func.body, (), ())
    for buffer in reversed(lowering.shared):
        body = n.Allocate(buffer, body)
    return dataclasses.replace(func, body=body)


def _dim(tag: str) -> int:
    return "xyz".index(tag[-1])


class _Lowering:
    def __init__(self, func: n.PrimFunc, warp_size: int, shuffle_dtypes: frozenset) -> None:
        self.func, self.warp_size, self.shuffle_dtypes = func, warp_size, shuffle_dtypes
        self.shared: list[n.Buffer] = []
        self.launch: dict[str, int] = {}

        def visit(x):
            if isinstance(x, n.For) and x.kind is n.ForKind.THREAD_BINDING and x.thread_tag.startswith("threadIdx"):
                if not isinstance(x.extent, n.IntImm):
                    raise CompileError(f"kernel {func.name}: loop {x.loop_var.name} bound to {x.thread_tag} has a "
                                       f"non-constant extent {x.extent}")
                self.launch[x.thread_tag] = max(self.launch.get(x.thread_tag, 1), x.extent.value)
        post_order_visit(func.body, visit)

    # ---- walk -------------------------------------------------------------------------------

    def stmt(self, s: n.Stmt, threads: tuple, conditions: tuple) -> n.Stmt:
        if isinstance(s, n.ThreadAllReduce):
            return self.expand(s, threads, conditions)
        if isinstance(s, n.SeqStmt):
            stmts = tuple(self.stmt(x, threads, conditions) for x in s.stmts)
            return s if all(a is b for a, b in zip(stmts, s.stmts)) else n.SeqStmt(stmts)
        if isinstance(s, n.For):
            inner = threads
            if s.kind is n.ForKind.THREAD_BINDING and s.thread_tag.startswith("threadIdx"):
                inner = (*threads, (s.thread_tag, s.loop_var, s.extent.value))
            body = self.stmt(s.body, inner, conditions)
            return s if body is s.body else dataclasses.replace(s, body=body)
        if isinstance(s, n.IfThenElse):
            inner = (*conditions, s.condition)
            then_case = self.stmt(s.then_case, threads, inner)
            else_case = None if s.else_case is None else self.stmt(s.else_case, threads, inner)
            if then_case is s.then_case and else_case is s.else_case:
                return s
            return n.IfThenElse(s.condition, then_case, else_case)
        if isinstance(s, (n.Allocate, n.LetStmt)):
            body = self.stmt(s.body, threads, conditions)
            return s if body is s.body else dataclasses.replace(s, body=body)
        return s

    # ---- one reduction ----------------------------------------------------------------------

    def expand(self, node: n.ThreadAllReduce, threads: tuple, conditions: tuple) -> n.Stmt:
        where = f"kernel {self.func.name}: the reduction across {', '.join(node.thread_tags)} ({node.combiner.name})"
        thread_ids = {id(var) for _, var, _ in threads}
        for condition in conditions:
            if any(id(v) in thread_ids for v in collect_vars(condition)):
                raise CompileError(f"{where} sits under `if {condition}`, which differs between threads, so some "
                                   "threads would skip its barriers; keep thread-dependent guards inside the "
                                   "reduction's value or around what follows it")
        enclosing: dict[str, tuple[n.Var, int]] = {}
        for tag, var, extent in threads:
            if extent != self.launch[tag]:
                raise CompileError(f"{where} is inside loop {var.name} bound to {tag} with extent {extent}, but the "
                                   f"kernel launches {self.launch[tag]} threads there, and the idle ones would skip "
                                   "its barriers; bind loops of equal extent to that axis")
            enclosing[tag] = (var, extent)
        reduced = sorted((t for t in node.thread_tags if t in enclosing), key=_dim, reverse=True)
        grouped = sorted((t for t in self.launch if t not in node.thread_tags), key=_dim, reverse=True)
        missing = [t for t in grouped if t not in enclosing]
        for tag in missing:   # threads of the launch outside every loop of this tag still form groups
            enclosing[tag] = (n.Var(f"{tag}.group"), self.launch[tag])
        t, size = self._linear(reduced, enclosing)
        g, groups = self._linear(grouped, enclosing)
        if size == 1:
            body: n.Stmt = n.SeqStmt(tuple(n.Store(r, v, _int(0)) for r, v in zip(node.results, node.values)))
        elif self._warp_fits(node, reduced, size):
            body = self._warp(node, t, size, g, groups)
        else:
            body = self._tree(node, t, size, g, groups)
        for tag in missing:
            var, extent = enclosing[tag]
            body = n.For(var, _int(0), _int(extent), n.ForKind.THREAD_BINDING, body, tag)
        return body

    @staticmethod
    def _linear(tags: list, enclosing: dict) -> tuple[n.PrimExpr, int]:
        """Row-major index over `tags` (z outermost, x fastest) and the count of its values."""
        index, count = None, 1
        for tag in tags:
            var, extent = enclosing[tag]
            index = var if index is None else n.Add(n.Mul(index, _int(extent)), var)
            count *= extent
        return (index if index is not None else _int(0)), count

    def _buffers(self, node: n.ThreadAllReduce, size: int) -> list[n.Buffer]:
        buffers = [n.Buffer("red_buf", (_int(size),), dtype, None, "shared") for dtype in node.combiner.dtypes]
        self.shared.extend(buffers)
        return buffers

    def _step(self, buffers, index, offset) -> n.Stmt:
        """buffers[index] = combine(buffers[index], buffers[index + offset]), every element at once."""
        ours = tuple(n.Load(b, index) for b in buffers)
        theirs = tuple(n.Load(b, n.Add(index, offset)) for b in buffers)
        return self._assign(buffers, index, self._combine(ours, theirs))

    def _combine(self, ours, theirs):
        return self.combiner.combine(ours, theirs)

    @staticmethod
    def _assign(buffers, index, values) -> n.Stmt:
        if len(values) == 1:
            return n.Store(buffers[0], values[0], index)
        # every new element is computed from the old ones before any is stored (argmax's pair)
        temps = [n.Var(f"red_new{i}", v.dtype) for i, v in enumerate(values)]
        body: n.Stmt = n.SeqStmt(tuple(n.Store(b, tv, index) for b, tv in zip(buffers, temps)))
        for temp, value in reversed(list(zip(temps, values))):
            body = n.LetStmt(temp, value, body)
        return body

    def _tree(self, node, t, size, g, groups) -> n.Stmt:
        self.combiner = node.combiner
        buffers = self._buffers(node, size * groups)
        base = n.Mul(g, _int(size)) if groups > 1 else _int(0)
        mine = n.Add(base, t) if groups > 1 else t
        stmts: list[n.Stmt] = [n.Store(b, v, mine) for b, v in zip(buffers, node.values)]
        stmts.append(n.Barrier("shared"))
        power = 1 << (size.bit_length() - 1)
        if power < size:
            stmts += [n.IfThenElse(n.LT(t, _int(size - power)), self._step(buffers, mine, _int(power))),
                      n.Barrier("shared")]
        offset = power // 2
        while offset >= 1:
            stmts += [n.IfThenElse(n.LT(t, _int(offset)), self._step(buffers, mine, _int(offset))),
                      n.Barrier("shared")]
            offset //= 2
        stmts += [n.Store(r, n.Load(b, base), _int(0)) for r, b in zip(node.results, buffers)]
        stmts.append(n.Barrier("shared"))
        return n.SeqStmt(tuple(stmts))

    # ---- warp shuffles ------------------------------------------------------------------------

    def _warp_fits(self, node, reduced: list, size: int) -> bool:
        warp = self.warp_size
        if warp <= 0 or reduced != ["threadIdx.x"] or any(d not in self.shuffle_dtypes for d in node.combiner.dtypes):
            return False
        block = math.prod(self.launch.values())
        if size % warp == 0:
            return size // warp <= warp
        # a power-of-two group inside a warp; every warp of the block must be whole
        return size < warp and size & (size - 1) == 0 and block % warp == 0

    def _shuffle_tree(self, values, width: int, name: str) -> tuple[n.Stmt | None, tuple, list]:
        """Let-bound values after shuffle-down halving within segments of `width` lanes."""
        lets: list[tuple[n.Var, n.PrimExpr]] = []
        offset = width // 2
        step = 0
        while offset >= 1:
            # each shuffle is its own let, evaluated by every lane: inside the combiner's expression a
            # short-circuit (||, ?:) would let lanes skip shuffles others wait in (a hang on the CPU shim,
            # undefined behaviour on a GPU), and the value would be shuffled once per use
            shifted = tuple(n.Var(f"{name}{step}_s{i}", v.dtype) for i, v in enumerate(values))
            lets += [(var, n.Call(v.dtype, SHUFFLE_DOWN, (v, _int(offset), _int(width))))
                     for var, v in zip(shifted, values)]
            combined = self._combine(values, shifted)
            new = tuple(n.Var(f"{name}{step}_{i}", c.dtype) for i, c in enumerate(combined))
            lets += list(zip(new, combined))
            values = new
            offset //= 2
            step += 1
        return values, lets

    def _warp(self, node, t, size, g, groups) -> n.Stmt:
        self.combiner = node.combiner
        warp = self.warp_size
        width = min(size, warp)
        values = tuple(node.values)
        lets: list = []
        initial = tuple(n.Var(f"red_v{i}", v.dtype) for i, v in enumerate(values))
        lets += list(zip(initial, values))
        values, more = self._shuffle_tree(initial, width, "red_w")
        lets += more
        tail: list[n.Stmt] = []
        if size <= warp:
            tail += [n.Store(r, n.Call(v.dtype, SHUFFLE_BROADCAST, (v, _int(0), _int(width))), _int(0))
                     for r, v in zip(node.results, values)]
        else:
            warps = size // warp
            buffers = self._buffers(node, warps * groups)
            lane = n.FloorMod(t, _int(warp))
            base = n.Mul(g, _int(warps)) if groups > 1 else _int(0)
            slot = n.Add(base, n.FloorDiv(t, _int(warp)))
            tail.append(n.IfThenElse(n.EQ(lane, _int(0)),
                                     n.SeqStmt(tuple(n.Store(b, v, slot) for b, v in zip(buffers, values)))))
            tail.append(n.Barrier("shared"))
            present = n.LT(lane, _int(warps))
            partials = tuple(n.Var(f"red_p{i}", b.dtype) for i, b in enumerate(buffers))
            second = [(p, n.Select(present, n.Load(b, n.Add(base, lane), present), ident))
                      for p, b, ident in zip(partials, buffers, node.combiner.identity)]
            width2 = 1 << max(0, (warps - 1).bit_length())
            final, more = self._shuffle_tree(partials, width2, "red_q")
            stores: list[n.Stmt] = [n.Store(r, n.Call(v.dtype, SHUFFLE_BROADCAST, (v, _int(0), _int(warp))), _int(0))
                                    for r, v in zip(node.results, final)]
            stores.append(n.Barrier("shared"))
            inner: n.Stmt = n.SeqStmt(tuple(stores))
            for var, value in reversed(second + more):
                inner = n.LetStmt(var, value, inner)
            tail.append(inner)
        body: n.Stmt = n.SeqStmt(tuple(tail))
        for var, value in reversed(lets):
            body = n.LetStmt(var, value, body)
        return body
