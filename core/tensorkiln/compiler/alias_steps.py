"""compiler/alias_steps.py: which fused groups only reshape, so their output can alias their input.

A group whose output is its input's contiguous bytes read with another shape (same dtype and
element count, row-major order unchanged: reshape, squeeze, expand_dims, a copy, a transpose that
keeps the order of every axis longer than 1, a layout_transform to the same layout, a
broadcast_to of the same shape) needs no kernel: the plan records an `AliasStep` and the output
value shares the input's storage (compiler/plan.py, memory_plan.py).

Per target, through the capability `alias_buffers`: a target declares it when its buffers are
host memory that the executor may view at any planned offset with any shape (cpu_llvm). Device
targets keep the copy kernel. An alias also needs its source on the same target (or a model
input or constant), so that no cross-target copy ever reads a view.

`tk.compile(..., zero_copy_reshape=False)` (and opt level 0) turns the optimisation off: every
group gets its kernel, as before (comparisons, bisection).
"""
from __future__ import annotations

import numpy as np

from ..graph import Call, Constant, Function, TupleGetItem, Var, post_order
from ..graph.types import TensorType

__all__ = ["alias_group_calls", "is_view_group"]

_VIEW_OPS = frozenset({"reshape", "squeeze", "expand_dims", "copy", "transpose", "layout_transform",
                       "broadcast_to"})


def _numel(ttype: TensorType) -> int:
    return int(np.prod(ttype.shape, dtype=np.int64))


def _keeps_order(call: Call) -> bool:
    """Whether `call` (one of _VIEW_OPS) reads its input's bytes in their row-major order."""
    name = call.op.name
    if name == "transpose":
        data = call.args[0].checked_type
        axes = call.attrs.axes if call.attrs.axes is not None else tuple(reversed(range(len(data.shape))))
        moved = [int(a) % len(data.shape) for a in axes if data.shape[int(a) % len(data.shape)] != 1]
        return moved == sorted(moved)
    if name == "layout_transform":
        return call.attrs.src_layout == call.attrs.dst_layout
    if name == "broadcast_to":
        return tuple(call.args[0].checked_type.shape) == tuple(call.checked_type.shape)
    return True


def is_view_group(function: Function) -> bool:
    """Whether the primitive function `function` returns its one tensor input's bytes unchanged."""
    if len(function.params) != 1:
        return False
    source, result = function.params[0].checked_type, function.ret_type
    if not (isinstance(source, TensorType) and isinstance(result, TensorType)):
        return False
    if source.dtype != result.dtype or _numel(source) != _numel(result):
        return False
    for node in post_order(function.body):
        if isinstance(node, Call):
            if isinstance(node.op, Function) or node.op.name not in _VIEW_OPS or len(node.args) != 1:
                return False
            if not _keeps_order(node):
                return False
        elif not isinstance(node, Var):   # a constant, a tuple: not a plain chain of views
            return False
    return True


def alias_group_calls(calls: list[Call], primary, registry, enabled: bool = True) -> set[int]:
    """id() of the group calls (in `calls`, in execution order) that become alias steps."""
    if not enabled:
        return set()
    target_of: dict[int, str] = {}
    aliases: set[int] = set()
    for call in calls:
        text = call.op.attr("target") or str(primary)
        target_of[id(call)] = text
        if not is_view_group(call.op):
            continue
        if not getattr(registry.target(text).capabilities, "alias_buffers", False):
            continue
        source = call.args[0]
        if isinstance(source, TupleGetItem):
            source = source.tuple_value
        if isinstance(source, (Var, Constant)) or target_of.get(id(source)) == text:
            aliases.add(id(call))
    return aliases
