"""te/lower.py: `lower(schedule, args)` -> tir.PrimFunc, the te-to-loop-IR pipeline.

    s = te.create_schedule(C.op)
    func = te.lower(s, [A, B, C], name="matmul")     # also tk.lower
    print(func)

The schedule becomes one loop nest (te/schedule_ops.py: buffers, inlining, bound
inference, loop nests, tensorize), then a LoopPassManager runs the loop passes in
LOWER_PIPELINE order, so a PassContext's instruments (timing, IR dumps),
verification and disabled passes apply to them as they do to graph passes.
"""
from __future__ import annotations

import dataclasses
from typing import Sequence

from ..ir.errors import ScheduleError
from ..ir.pass_infra import PassContext
from ..tir import nodes as n
from ..tir.arith import as_int
from ..tir.passes import LoopPassManager
from ..tir.visit import post_order_visit
from .schedule import Schedule
from .schedule_ops import ScheduleLowering

__all__ = ["lower", "LOWER_PIPELINE"]

LOWER_PIPELINE = (
    "simplify",                  # linear indices first: vectorize recognises stride-1 Ramps
    "remove_no_op",              # extent-1 loops vanish, so they do not block vectorization
    "vectorize_loops",           # before unrolling, so each unrolled copy stays vector code
    "unroll_loops",
    "simplify",                  # constants from unrolled or removed loop variables fold here
    "remove_no_op",              # branches simplify decided are dropped
    "hoist_shared_allocations",  # last: shared buffers are declared once per kernel
)


def lower(schedule, args: Sequence, name: str = "main", *, disabled: Sequence[str] = (),
          context: PassContext | None = None) -> n.PrimFunc:
    """Lower a te schedule to a PrimFunc whose params are `args` (te tensors) in order.

    `context` (a PassContext) sets instruments, verification and disabled passes for
    the loop passes; `disabled` names more passes of LOWER_PIPELINE to skip (e.g.
    ("unroll_loops",)). Passes that did not run are recorded on the PrimFunc as
    `func.attr("skipped_passes")`: ((name, reason), ...).
    Raises ScheduleError for schedules that cannot be lowered (names stage, axis, why).
    """
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"lower: expected a te.Schedule (te.create_schedule(...)), got {type(schedule).__name__}")
    lowering = ScheduleLowering(schedule, list(args))
    body = lowering.build()
    attrs: list = []
    if lowering.intrinsics:
        attrs.append((n.TENSOR_INTRINSICS_ATTR, tuple(lowering.intrinsics)))
    attrs.extend(_memory_attrs(schedule, lowering))
    func = n.PrimFunc(name, tuple(lowering.params), body, tuple(attrs))
    context = context or PassContext()
    if disabled:
        context = dataclasses.replace(context, disabled=context.disabled | set(disabled))
    manager = LoopPassManager(context)
    func = manager.run(func, LOWER_PIPELINE)
    if manager.skipped:
        skipped = tuple((s.name, s.reason) for s in manager.skipped)
        func = n.PrimFunc(func.name, func.params, func.body, (*func.attrs, ("skipped_passes", skipped)))
    threads = _thread_extents(func.body)
    if threads:
        func = n.PrimFunc(func.name, func.params, func.body, (*func.attrs, ("thread_extents", threads)))
    return func


def _memory_attrs(schedule: Schedule, lowering: ScheduleLowering) -> list:
    """("array_partition", ((buffer, kind, factor), ...)), ("stream", ((buffer, depth), ...)) and
    ("dataflow", True) from the schedule's partition / stream / dataflow primitives."""
    partitions, streams = [], []
    for stage in schedule.stages:
        if stage.partition_spec is None and stage.stream_depth is None:
            continue
        info = lowering.info_of(stage.op.output(0))
        buffer = info.buffer if info is not None else None
        if buffer is None:
            raise ScheduleError(f"stage {stage.name}: partition/stream need a buffer, but the stage was inlined "
                                "(compute_inline) or is not used; compute it at the root or at a loop instead")
        if stage.partition_spec is not None:
            partitions.append((buffer.name, *stage.partition_spec))
        if stage.stream_depth is not None:
            streams.append((buffer.name, stage.stream_depth))
    attrs: list = []
    if partitions:
        attrs.append(("array_partition", tuple(partitions)))
    if streams:
        attrs.append(("stream", tuple(streams)))
    if schedule.is_dataflow:
        attrs.append(("dataflow", True))
    return attrs


def _thread_extents(stmt) -> tuple:
    """(tag, launch extent) for every bound GPU index: the largest extent bound to it."""
    found: dict[str, int] = {}

    def fn(x):
        if isinstance(x, n.For) and x.kind is n.ForKind.THREAD_BINDING:
            extent = as_int(x.extent) or 0
            found[x.thread_tag] = max(found.get(x.thread_tag, 0), extent)
    post_order_visit(stmt, fn)
    return tuple(sorted(found.items()))
