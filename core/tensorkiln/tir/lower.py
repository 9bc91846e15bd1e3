"""tir/lower.py: `lower(schedule, args)` -> PrimFunc, the te-to-loop-IR pipeline.

    s = te.create_schedule(C.op)
    func = tir.lower(s, [A, B, C], name="matmul")
    print(func)

The schedule becomes one loop nest (tir/schedule_ops.py: buffers, inlining, bound
inference, loop nests, tensorize), then the loop passes run in LOWER_PIPELINE order.
"""
from __future__ import annotations

from typing import Sequence

from ..ir.errors import ScheduleError
from . import nodes as n
from .passes import PASSES

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


def lower(schedule, args: Sequence, name: str = "main", *, disabled: Sequence[str] = ()) -> n.PrimFunc:
    """Lower a te schedule to a PrimFunc whose params are `args` (te tensors) in order.

    `disabled` names passes of LOWER_PIPELINE to skip (e.g. ("unroll_loops",)).
    Raises ScheduleError for schedules that cannot be lowered (names stage, axis, why).
    """
    # te imports tir.nodes, so the te-dependent modules load on first use
    from ..te.schedule import Schedule
    from .schedule_ops import ScheduleLowering
    if not isinstance(schedule, Schedule):
        raise ScheduleError(f"lower: expected a te.Schedule (te.create_schedule(...)), got {type(schedule).__name__}")
    lowering = ScheduleLowering(schedule, list(args))
    body = lowering.build()
    attrs: list = []
    if lowering.intrinsics:
        attrs.append(("tensor_intrinsics", tuple(lowering.intrinsics)))
    func = n.PrimFunc(name, tuple(lowering.params), body, tuple(attrs))
    for pass_name in LOWER_PIPELINE:
        if pass_name not in disabled:
            func = PASSES[pass_name](func)
    threads = _thread_extents(func.body)
    if threads:
        func = n.PrimFunc(func.name, func.params, func.body, (*func.attrs, ("thread_extents", threads)))
    return func


def _thread_extents(stmt) -> tuple:
    """(tag, launch extent) for every bound GPU index: the largest extent bound to it."""
    from .arith import as_int
    from .visit import post_order_visit
    found: dict[str, int] = {}

    def fn(x):
        if isinstance(x, n.For) and x.kind is n.ForKind.THREAD_BINDING:
            extent = as_int(x.extent) or 0
            found[x.thread_tag] = max(found.get(x.thread_tag, 0), extent)
    post_order_visit(stmt, fn)
    return tuple(sorted(found.items()))
