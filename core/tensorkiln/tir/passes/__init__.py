"""Loop-level passes: pure functions PrimFunc -> PrimFunc, registered in LOOP_PASSES.

`te.lower` runs them in `te.LOWER_PIPELINE` order through a LoopPassManager, so a
PassContext's instruments, verification and disabled passes apply to them.
"""
from .hoist_shared_allocations import hoist_shared_allocations
from .lower_thread_allreduce import has_thread_allreduce, lower_thread_allreduce
from .remove_no_op import remove_no_op
from .simplify import simplify
from .strip_prefetch import strip_prefetch
from .unroll_loops import MAX_UNROLL_EXTENT, unroll_loops
from .vectorize_loops import vectorize_loops
from .registry import LOOP_PASSES, LoopPassManager, register_loop_pass

__all__ = ["simplify", "unroll_loops", "vectorize_loops", "remove_no_op", "hoist_shared_allocations", "strip_prefetch",
           "lower_thread_allreduce", "has_thread_allreduce",
           "MAX_UNROLL_EXTENT", "LOOP_PASSES", "LoopPassManager", "register_loop_pass"]
