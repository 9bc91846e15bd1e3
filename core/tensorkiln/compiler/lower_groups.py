"""Fused groups -> te -> schedule -> tir.PrimFunc, one kernel per group.

A group is a primitive graph Function (what `fuse_ops` makes): its parameters
become te placeholders, each op in its body contributes its te compute, and the
implementation the target's strategies choose for the group (compiler/strategy.py)
supplies the anchor's compute when it has one and the schedule, with its knob values.
Kernel parameters are the group's inputs, then its outputs.
"""
from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..graph import Call, Constant, Function, Tuple, TupleGetItem, Var, post_order
from ..graph.types import TensorType, TupleType
from ..ir.errors import InternalError, UnsupportedOpError

__all__ = ["GroupKernel", "lower_group", "group_name"]


@dataclass(frozen=True)
class GroupKernel:
    """A lowered group: its PrimFunc plus what the executor needs to call it."""

    name: str
    func: object                      # tir.PrimFunc
    num_inputs: int
    output_types: tuple[TensorType, ...]
    ops: tuple[str, ...]
    strategy: dict = None             # StrategyChoice.describe(): implementation, knob values
    trace: tuple = ()                 # the te schedule's trace (te/trace.py): what a tuning record replays


def group_name(function: Function) -> str:
    """"fused_nn_conv2d_add_nn_relu" from the ops in the group, in execution order."""
    names = [node.op.name for node in post_order(function.body) if isinstance(node, Call) and not isinstance(node.op, Function)]
    text = "_".join(re.sub(r"[^0-9a-zA-Z]+", "_", name) for name in names) or "copy"
    return f"fused_{text}"[:80]


def _output_types(function: Function) -> tuple[TensorType, ...]:
    ret = function.ret_type
    if isinstance(ret, TupleType):
        return tuple(ret.fields)
    return (ret,)


def lower_group(function: Function, name: str, target, configs=None, context=None) -> GroupKernel:
    """Build, schedule and lower one primitive function for `target`.

    The group's te tensors are built with the ops' own computes, the target's strategies pick
    an implementation for them (compiler/strategy.py); when it replaces the anchor op's compute,
    the tensors are built again with it. `configs(implementation, space) -> dict | None`
    supplies tuned knob values (a tuning record); without it every knob takes its default.
    `context` (the compile's PassContext) applies its instruments, verification and disabled
    passes to the loop passes too.
    """
    from ..te.lower import lower
    from . import strategy

    calls = [node for node in post_order(function.body) if isinstance(node, Call)]
    placeholders, outputs, ops = _build_tensors(function, name, target)
    choice = strategy.select(calls, outputs, target, configs)
    if choice.implementation is not None and choice.implementation.compute is not None:
        anchor = strategy.compute_anchor(calls, choice.implementation)
        placeholders, outputs, ops = _build_tensors(function, name, target, anchor, choice)
    schedule = choice.schedule(outputs, target)
    func = lower(schedule, placeholders + outputs, name=name, context=context)
    func = _with_tensor_formats(func, function)
    return GroupKernel(name, func, len(placeholders), _output_types(function), tuple(ops), choice.describe(),
                       schedule.trace)


def _with_tensor_formats(func, function: Function):
    """The group's fixed-point formats (one per input, then per output; passes/assign_fixed_point.py)
    on the kernel as ((buffer name, FixedPoint), ...): kernel buffers are the inputs, then the outputs."""
    from ..sdk.fixed_point import TENSOR_FORMATS_ATTR
    formats = function.attr(TENSOR_FORMATS_ATTR)
    if not formats:
        return func
    from .. import tir
    buffers = [p for p in func.params if isinstance(p, tir.Buffer)]
    named = tuple((b.name, f) for b, f in zip(buffers, formats) if f is not None)
    return dataclasses.replace(func, attrs=(*func.attrs, (TENSOR_FORMATS_ATTR, named)))


def _build_tensors(function: Function, name: str, target, anchor: Call | None = None, choice=None):
    """(placeholders, outputs, op names) of the group; `anchor` is computed by `choice`'s compute."""
    from .. import te

    tensors: dict[int, object] = {}
    placeholders = []
    for index, param in enumerate(function.params):
        if not isinstance(param.checked_type, TensorType):
            raise InternalError(f"group {name}: parameter {param.name} is not a tensor ({param.checked_type})")
        placeholder = te.placeholder(param.checked_type.shape, param.checked_type.dtype, name=f"p{index}")
        tensors[id(param)] = placeholder
        placeholders.append(placeholder)
    ops = []
    for node in post_order(function.body):
        if isinstance(node, Var):
            if id(node) not in tensors:
                raise InternalError(f"group {name}: free variable {node.name}")
        elif isinstance(node, Constant):
            tensors[id(node)] = _constant_tensor(node, te)
        elif isinstance(node, Call):
            op = node.op
            if isinstance(op, Function):
                raise InternalError(f"group {name}: nested function calls are not lowered")
            if op.compute is None:
                raise UnsupportedOpError(f"op {op.name} has no te compute, so it cannot be compiled "
                                         f"(node {node.summary()})")
            inputs = [tensors[id(arg)] for arg in node.args]
            if node is anchor:
                result = choice.implementation.compute(inputs, node.attrs, node.checked_type, target,
                                                       dict(choice.config))
            else:
                result = op.compute(inputs, node.attrs, node.checked_type)
            tensors[id(node)] = result
            ops.append(op.name)
        elif isinstance(node, Tuple):
            tensors[id(node)] = [tensors[id(f)] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            tensors[id(node)] = tensors[id(node.tuple_value)][node.index]
    result = tensors[id(function.body)]
    outputs = list(result) if isinstance(result, (list, tuple)) else [result]
    for index, out in enumerate(outputs):
        if any(out is p for p in placeholders):
            # An output that is an input unchanged still needs a kernel that writes it.
            outputs[index] = te.compute(out.shape, lambda *i, src=out: src[i], name=f"copy{index}", tag="injective")
    return placeholders, outputs, ops


def _constant_tensor(node: Constant, te):
    """A small constant inside a group becomes an immediate (scalars) or a read-only tensor."""
    value = node.value
    if value.size != 1:
        raise InternalError("non-scalar constants must be group parameters (fuse_ops lifts them)")
    scalar = value.reshape(()).item()
    dtype = node.checked_type.dtype
    return te.compute(value.shape, lambda *i: te.const(scalar, dtype), name="const", tag="elemwise")
