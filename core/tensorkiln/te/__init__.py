"""Tensor expressions and schedules: placeholder, compute, reductions, schedule primitives, tensorize,
and lowering to loop IR (`te.lower`)."""
from .expr import (MATH_FUNCTIONS, CommReducer, IterVar, Range, Reduce, TensorRead, abs, cast, ceil,
                   comm_reducer, const, erf, exp, fabs, floor, if_then_else, log, max, max_value, min,
                   min_value, pow, prod, round, rsqrt, sigmoid, sqrt, sum, tanh, var, sin, cos, tan, asin, acos,
                   atan, sinh, cosh, exp2, log2, log10)
from .extern import BufferProxy, ExternOp, IRBuilder, extern
from .schedule import ExternStage, Schedule, Stage, create_schedule
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, compute, placeholder, reduce_axis, thread_axis
from .tensor_intrin import TensorIntrin, decl_tensor_intrin
from .trace import replay
from . import trace
from .lower import LOWER_PIPELINE, lower

__all__ = [
    "placeholder", "compute", "reduce_axis", "thread_axis", "var", "const", "cast", "if_then_else",
    "sum", "max", "min", "prod", "comm_reducer", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf",
    "pow", "abs", "fabs", "floor", "ceil", "round", "min_value", "max_value", "MATH_FUNCTIONS",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "exp2", "log2", "log10",
    "Tensor", "Operation", "PlaceholderOp", "ComputeOp", "IterVar", "Range", "Reduce", "TensorRead",
    "CommReducer", "create_schedule", "Schedule", "Stage", "TensorIntrin", "decl_tensor_intrin",
    "replay", "trace", "lower", "LOWER_PIPELINE", "extern", "ExternOp", "ExternStage", "IRBuilder", "BufferProxy",
]
