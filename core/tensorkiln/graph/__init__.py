"""Graph IR: typed SSA dataflow (Var, Constant, Call, Tuple, TupleGetItem, Function, Module),
the op registry, the builder API (graph.var, graph.const, graph.add, graph.nn.conv2d, ...),
traversal/rewrite helpers and the numpy reference interpreter."""
from ..ir.structural import assert_structural_equal, structural_equal, structural_hash
from . import nn, ops  # noqa: F401  (ops registers every built-in op)
from .attrs import NO_ATTRS, Attrs, AttrsError, NoAttrs
from .builder import *  # noqa: F401,F403
from .builder import __all__ as _builder_names
from .expr import Call, Constant, Expr, Function, Module, Tuple, TupleGetItem, Var, owned_constant
from .interpreter import evaluate, evaluate_call
from .ops.layout import layout_index, parse_layout, primal_sizes, transform_layout
from .ops.nn import blocked_kernel_layout, data_layout_block, is_blocked_kernel_layout, pack_dense_weight
from .ops.winograd import WINOGRAD_TILES, winograd_matrices, winograd_tiles, winograd_weight_transform
from .printer import print_expr, print_module
from .registry import Op, OpPattern, get_op, list_ops, register_op, set_compute
from .traversal import count_users, free_vars, operands, post_order, rewrite, topological_order, with_operands
from .verify import verify_module
from .types import FuncType, TensorType, TupleType, Type


def infer_type(mod_or_expr):
    """Types are computed when nodes are built; this returns its input (kept for pass pipelines)."""
    return mod_or_expr


__all__ = [
    "Expr", "Var", "Constant", "owned_constant", "Call", "Tuple", "TupleGetItem", "Function", "Module",
    "Type", "TensorType", "TupleType", "FuncType",
    "Attrs", "NoAttrs", "NO_ATTRS", "AttrsError",
    "Op", "OpPattern", "register_op", "get_op", "list_ops", "set_compute",
    "post_order", "topological_order", "free_vars", "rewrite", "operands", "count_users", "with_operands",
    "verify_module", "parse_layout", "transform_layout", "layout_index", "is_blocked_kernel_layout",
    "data_layout_block", "blocked_kernel_layout", "primal_sizes", "pack_dense_weight",
    "WINOGRAD_TILES", "winograd_matrices", "winograd_tiles", "winograd_weight_transform",
    "evaluate", "evaluate_call", "infer_type", "print_expr", "print_module",
    "structural_equal", "structural_hash", "assert_structural_equal", "nn",
    *_builder_names,
]
