"""te/cross_thread.py: lowering of a reduction whose axes are bound to threadIdx (part of schedule_ops).

    for i in blockIdx.x:                       B[i] = sum_k A[i, k], k = ko * 64 + ki, ki on threadIdx.x
      for ki in threadIdx.x:
        acc = 0;  for ko: acc += A[i, ko * 64 + ki]      each thread reduces its stride into a register
        red = thread_allreduce<sum>(acc)                 the threads combine them (tir.ThreadAllReduce)
        if ki == 0: B[i] = red                           one writer (all threads for a "local" stage)

The combination is expanded later, by tir.passes.lower_thread_allreduce in the emitters.
"""
from __future__ import annotations

from ..ir.errors import ScheduleError
from ..tir import nodes as n
from ..tir.visit import collect_vars
from .expr import IterVar, Reduce

__all__ = ["cross_thread_nest", "thread_reduce_leaves", "loop_order"]


def cross_thread_nest(lowering, info) -> n.Stmt:
    """A reduction with axes bound to threadIdx: data loops, then the thread loops, in which each
    thread reduces its share (the serial reduction loops) into a register, the threads combine
    their registers (tir.ThreadAllReduce) and one of them stores the result (all of them for a
    "local" stage, whose buffer is private to each thread).

    Guards that read a thread index or a reduction variable go inside, around the update (and
    the store): a barrier of the combination must be reached by every thread of the block.
    """
    stage = info.stage
    body: Reduce = info.body
    leaves = loop_order(stage)
    data = [leaf for leaf in leaves if leaf.kind != "reduce"]
    if leaves[:len(data)] != data:
        inner = next(leaf for leaf in leaves[len(data):] if leaf.kind != "reduce")
        raise ScheduleError(f"cross-thread reduction on stage {stage.name}: data axis {inner.name} is inside the "
                            "reduction loops; reorder the data axes outside every reduction axis")
    if any(stage.iter_attrs.get(leaf) and stage.iter_attrs[leaf].tensorize is not None for leaf in leaves):
        raise ScheduleError(f"cross-thread reduction on stage {stage.name}: it cannot also be tensorized")
    threads = thread_reduce_leaves(stage)
    serial = [leaf for leaf in leaves[len(data):] if leaf not in threads]
    position = {leaf.var: p for p, leaf in enumerate(leaves)}
    varying = {leaf.var for leaf in leaves if leaf.kind == "reduce" or
               (_thread_tag(stage, leaf) or "").startswith("threadIdx")}
    reduce_vars = {leaf.var for leaf in leaves if leaf.kind == "reduce"}
    outer_guards: dict[int, list] = {}
    update_guards, store_guards = [], []
    for guard in info.guards:
        used = collect_vars(guard)
        if any(v in varying for v in used):
            update_guards.append(guard)
            if not any(v in reduce_vars for v in used):
                store_guards.append(guard)
        else:
            level = max((position[v] for v in used if v in position), default=-1)
            outer_guards.setdefault(level, []).append(guard)
    root_map = lowering._root_map(info)
    output_index = lowering._flat_index(info, [root_map[a.var] for a in stage.op.axis])
    dtype = body.dtype
    accumulator = n.Buffer(f"{stage.name}.acc", (n.IntImm("int32", 1),), dtype, None, "local")
    result = n.Buffer(f"{stage.name}.red", (n.IntImm("int32", 1),), dtype, None, "local")
    zero = n.IntImm("int32", 0)

    update: n.Stmt = n.Store(accumulator, body.combiner.combine(n.Load(accumulator, zero),
                                                                  lowering.lower_expr(body.source, root_map)), zero)
    if body.condition is not None:
        update = n.IfThenElse(lowering.lower_expr(body.condition, root_map), update)
    for guard in update_guards:
        update = n.IfThenElse(guard, update)
    for leaf in reversed(serial):
        update = lowering._loop(stage, leaf, info.iv_extent[leaf], lowering._attach_producers(stage, leaf, update))
    store: n.Stmt = n.Store(info.buffer, n.Load(result, zero), output_index)
    for guard in store_guards:
        store = n.IfThenElse(guard, store)
    if info.buffer.scope != "local":   # one writer; in "local" scope every thread keeps its own copy
        first = None
        for leaf in threads:
            test = n.EQ(leaf.var, zero)
            first = test if first is None else n.And(first, test)
        store = n.IfThenElse(first, store)
    combine = n.ThreadAllReduce(_combiner(body.combiner, dtype), (n.Load(accumulator, zero),), (result,),
                                tuple(_thread_tag(stage, leaf) for leaf in threads))
    core: n.Stmt = n.SeqStmt((n.Store(accumulator, body.combiner.identity(dtype), zero), update, combine, store))
    core = n.Allocate(accumulator, n.Allocate(result, core))
    for leaf in reversed(threads):
        core = lowering._loop(stage, leaf, info.iv_extent[leaf], lowering._attach_producers(stage, leaf, core))
    for p in reversed(range(len(data))):
        inner = lowering._attach_producers(stage, data[p], core)
        for guard in outer_guards.get(p, ()):
            inner = n.IfThenElse(guard, inner)
        core = lowering._loop(stage, data[p], info.iv_extent[data[p]], inner)
    for guard in outer_guards.get(-1, ()):
        core = n.IfThenElse(guard, core)
    return core


def thread_reduce_leaves(stage) -> list[IterVar]:
    """The stage's reduction loops bound to threadIdx (a cross-thread reduction when any)."""
    return [leaf for leaf in stage.leaf_iter_vars
            if leaf.kind == "reduce" and (_thread_tag(stage, leaf) or "").startswith("threadIdx")]


def loop_order(stage) -> list[IterVar]:
    """The stage's loops from outer to inner as lowered: its leaves, except that in a cross-thread
    reduction the thread-bound reduction loops enclose the serial ones (each thread runs its share
    of the serial loops inside its thread index)."""
    threads = thread_reduce_leaves(stage)
    leaves = stage.leaf_iter_vars
    if not threads:
        return list(leaves)
    first = next(p for p, leaf in enumerate(leaves) if leaf.kind == "reduce")
    rest = [leaf for leaf in leaves[first:] if leaf not in threads]
    return [*leaves[:first], *threads, *rest]


def _combiner(reducer, dtype: str) -> n.CommCombiner:
    """te's CommReducer (Python callables) as the tir combiner data a ThreadAllReduce carries."""
    lhs, rhs = n.Var("lhs", dtype), n.Var("rhs", dtype)
    return n.CommCombiner((lhs,), (rhs,), (reducer.combine(lhs, rhs),), (reducer.identity(dtype),), reducer.name)


def _thread_tag(stage, leaf: IterVar) -> str | None:
    attr = stage.iter_attrs.get(leaf)
    return attr.thread_tag if attr is not None else None
