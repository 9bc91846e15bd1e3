"""compiler/placed_concats.py: which concatenations run no kernel, their inputs written in place.

A group that only concatenates copies each input into its output. When every input is one
contiguous byte range of the output, the copy can go: each input is *placed* inside the output's
storage at its byte offset (`ValueInfo.placed_in`), its producer kernel writes it there, and a
reader of the concatenation reads the whole storage (the memory planning of TVM's and
onnxruntime's runtimes). The plan records a `PlacedConcat` instead of a step.

A concatenation is elided when:

- its group is one `concatenate` call of the group's parameters (or nested ones on the same axis),
  each used once (no epilogue);
- every axis before the concatenated one has extent 1 (batch-1 NCHW or NCHW8c on channels, any
  concatenation on axis 0): each input is then one contiguous range of the output. NHWC channel
  concatenations (H, W > 1) interleave their inputs and keep their kernel;
- every input is an output of a kernel of the same target (through a TupleGetItem too) or of
  another elided concatenation (densenet's concat(concat(concat(x0, y1), y2), y3) is one storage),
  and none is a model input, a constant, an alias (compiler/alias_steps.py), a control-flow
  result or a model output; an input appears once, and in one elided concatenation only (a value
  has one place). The concatenation's own output is not a model output.

An input read by other steps too stays fine: they read it where it is placed.

Per target, through the capability `alias_buffers` (host memory the executor views at any planned
offset): a placed input starts at a multiple of its element size, not of the memory plan's 64
bytes; cpu_llvm's kernels load and store buffers with their element's alignment
(`align=element_bytes` in exprs.py, the GEMMs' C stores `align=4`) and `tk_check_buffer` checks a
pointer only against null, so any such offset is fine there.

`tk.compile(..., zero_copy_concat=False)` (and opt level 0) keeps every concatenation's kernel.
"""
from __future__ import annotations

import math

from ..graph import Call, Function, Tuple, TupleGetItem
from ..graph.types import TensorType, TupleType
from ..ir.dtypes import dtype_of
from .control_flow import control_call

__all__ = ["placed_concat_calls", "concat_order"]


def _is_concatenate(expr) -> bool:
    return isinstance(expr, Call) and not isinstance(expr.op, Function) and expr.op.name == "concatenate"


def concat_order(function: Function) -> tuple[int, ...] | None:
    """Positions of `function`'s parameters in the order its `concatenate` joins them, when the group
    is exactly that call (or nested ones on the same axis, which fusion puts in one group) over
    contiguous ranges of its output; else None."""
    body = function.body
    result = function.ret_type
    if not _is_concatenate(body) or not isinstance(result, TensorType) or dtype_of(result.dtype).bits % 8:
        return None
    axis = body.attrs.axis % len(result.shape)
    if any(extent != 1 for extent in result.shape[:axis]):
        return None   # the inputs interleave in the output: not one byte range each
    positions = {id(p): index for index, p in enumerate(function.params)}
    order: list[int] = []
    stack = [body]
    while stack:   # depth first, left to right: the order of the bytes
        expr = stack.pop()
        if id(expr) in positions:
            order.append(positions[id(expr)])
        elif _is_concatenate(expr) and expr.attrs.axis % len(result.shape) == axis:
            stack.extend(reversed(expr.args))
        else:
            return None
    if len(set(order)) != len(order) or len(order) != len(function.params):
        return None
    if any(math.prod(p.checked_type.shape) == 0 for p in function.params):
        return None
    return tuple(order)


def _value_key(expr) -> tuple[int, int] | None:
    """(id of the producing group call, output index) of a kernel's output, else None."""
    if isinstance(expr, TupleGetItem) and isinstance(expr.tuple_value, Call) \
            and isinstance(expr.tuple_value.op, Function):
        return id(expr.tuple_value), expr.index
    if isinstance(expr, Call) and isinstance(expr.op, Function) and isinstance(expr.checked_type, TensorType):
        return id(expr), 0
    return None


def _output_keys(body) -> set[tuple[int, int]]:
    """The value keys of the model's outputs (main's body: a value, or a tuple of them)."""
    keys: set[tuple[int, int]] = set()
    stack = [body]
    while stack:
        expr = stack.pop()
        if isinstance(expr, Tuple):
            stack.extend(expr.fields)
        elif isinstance(expr, Call) and isinstance(expr.op, Function) and isinstance(expr.checked_type, TupleType):
            keys.update((id(expr), index) for index in range(len(expr.checked_type.fields)))
        else:
            key = _value_key(expr)
            if key is not None:
                keys.add(key)
    return keys


def placed_concat_calls(main: Function, calls: list[Call], primary, registry, aliases: set[int],
                        enabled: bool = True) -> set[int]:
    """id() of the group calls of `main` (`calls`, in execution order) whose concatenation is elided:
    their inputs are placed in their output. `aliases`: the groups elided as views."""
    if not enabled:
        return set()
    outputs = _output_keys(main.body)
    target_of: dict[int, str] = {}
    kernels: set[int] = set()   # group calls whose outputs a kernel writes (or an elided concatenation)
    placed_values: set[tuple[int, int]] = set()
    elided: set[int] = set()
    for call in calls:
        text = call.op.attr("target") or str(primary)
        target_of[id(call)] = text
        if id(call) in aliases or control_call(call.op) is not None:
            continue
        kernels.add(id(call))
        if concat_order(call.op) is None or (id(call), 0) in outputs:
            continue
        if not getattr(registry.target(text).capabilities, "alias_buffers", False):
            continue
        keys = [_value_key(arg) for arg in call.args]
        if any(key is None or key[0] not in kernels or target_of[key[0]] != text or key in outputs
               or key in placed_values for key in keys) or len(set(keys)) != len(keys):
            continue
        elided.add(id(call))
        placed_values.update(keys)
    return elided
