"""Loop-level passes: pure functions PrimFunc -> PrimFunc, run by `tir.lower` in LOWER_PIPELINE order."""
from .hoist_shared_allocations import hoist_shared_allocations
from .remove_no_op import remove_no_op
from .simplify import simplify
from .unroll_loops import MAX_UNROLL_EXTENT, unroll_loops
from .vectorize_loops import vectorize_loops

__all__ = ["simplify", "unroll_loops", "vectorize_loops", "remove_no_op", "hoist_shared_allocations",
           "MAX_UNROLL_EXTENT", "PASSES"]

PASSES = {
    "simplify": simplify,
    "vectorize_loops": vectorize_loops,
    "unroll_loops": unroll_loops,
    "remove_no_op": remove_no_op,
    "hoist_shared_allocations": hoist_shared_allocations,
}
