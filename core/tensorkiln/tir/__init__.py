"""Loop IR: PrimFunc, buffers, loops, loads/stores, vectors, intrinsic calls; loop passes, the interpreter.

Lowering from te lives in te (`te.lower`, also `tk.lower`): te builds on tir, never the reverse.
"""
from .nodes import *  # noqa: F401,F403
from .nodes import __all__ as _node_names
from .printer import format_expr, format_func, format_stmt
from .arith import non_negative, simplify_expr
from .functor import ExprFunctor, StmtExprVisitor, StmtFunctor
from .interpreter import interpret
from .passes import (LOOP_PASSES, LoopPassManager, hoist_shared_allocations, remove_no_op, simplify,
                     unroll_loops, vectorize_loops)
from .structural_equal import assert_structural_equal, structural_equal
from .verify import verify_prim_func

__all__ = [*_node_names, "ExprFunctor", "StmtFunctor", "StmtExprVisitor",
           "format_expr", "format_stmt", "format_func", "interpret", "structural_equal",
           "assert_structural_equal", "simplify_expr", "non_negative", "simplify", "unroll_loops", "vectorize_loops",
           "remove_no_op", "hoist_shared_allocations", "LOOP_PASSES", "LoopPassManager", "verify_prim_func"]
