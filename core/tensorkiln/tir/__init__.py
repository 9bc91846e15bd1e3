"""Loop IR: PrimFunc, buffers, loops, loads/stores, vectors, intrinsic calls; lowering from te."""
from .nodes import *  # noqa: F401,F403
from .nodes import __all__ as _node_names
from .printer import format_expr, format_func, format_stmt
from .arith import simplify_expr
from .interpreter import interpret
from .lower import LOWER_PIPELINE, lower
from .passes import hoist_shared_allocations, remove_no_op, simplify, unroll_loops, vectorize_loops
from .structural_equal import assert_structural_equal, structural_equal

__all__ = [*_node_names, "format_expr", "format_stmt", "format_func", "lower", "LOWER_PIPELINE",
           "interpret", "structural_equal", "assert_structural_equal", "simplify_expr", "simplify",
           "unroll_loops", "vectorize_loops", "remove_no_op", "hoist_shared_allocations"]
