"""runtime/native_control.py: If, Loop and Scan steps as records of the whole-plan native entry.

A control-flow step (runtime/control_flow.py) runs inside the native entry when each of its
bodies runs as one native call of its own (the body's executor has a native entry with one
segment, or the body has no kernels at all) and its shapes and dtypes fit what the entry does
(sdk/plan_entry.py `PlanEntryIf`, `PlanEntryLoop`, `PlanEntryScan`): a bool condition and an
int64 trip count. Else `control_record` says why, and the step stays a Python step
between native calls. The records hold the bodies' addresses in this process: the body models
(kept by the step's `ControlFlowProgram`) and `Scratch.keep` keep them alive.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..ir.dtypes import to_numpy
from ..sdk.plan_entry import DETAIL_BYTES, PlanEntryBody, PlanEntryIf, PlanEntryLoop, PlanEntryScan, Slot

__all__ = ["Scratch", "control_record"]

_ALIGNMENT = 64   # the memory plan's: a body's arena keeps the alignment its offsets assume


@dataclass
class Scratch:
    """The parent arena past the memory plan: `end` grows as control steps (and index checks) take buffers;
    `keep` holds the arrays whose addresses the records use."""

    end: int
    keep: list = field(default_factory=list)

    def take(self, nbytes: int) -> int:
        offset = (self.end + _ALIGNMENT - 1) // _ALIGNMENT * _ALIGNMENT
        self.end = offset + max(nbytes, 1)
        return offset


class _Unsupported(Exception):
    """Why a control-flow step stays in Python."""


def _body(model, arena_offset: int, num_inputs: int) -> tuple[PlanEntryBody, Any]:
    """The record of one body (its arena at `arena_offset`) and its PlanEntry (None: no kernels)."""
    executor = model.executor
    plan = executor.plan
    if len(plan.inputs) != num_inputs:
        raise _Unsupported(f"its body takes {len(plan.inputs)} inputs where the step passes {num_inputs}")
    entry = executor.native_entry
    if entry is None and plan.steps:
        raise _Unsupported(f"its body runs in Python ({executor.native_reason})")
    if entry is not None and (len(executor._segments) != 1 or executor._segments[0].checks):
        raise _Unsupported(f"its body is not one native call ({executor.executor_kind})")
    storages = {s.id: s for s in plan.storages}
    outputs, sizes = [], []
    for value_id in plan.outputs:
        root = plan.values[plan.root(value_id)]
        if root.kind == "input":
            outputs.append(Slot("input", plan.inputs.index(root.id)))
        elif root.kind == "constant":
            outputs.append(Slot("address", executor.constants[root.id].ctypes.data))
        else:
            outputs.append(Slot("arena", storages[root.storage].offset + plan.root_offset(value_id)))
        sizes.append(plan.values[value_id].nbytes)
    if entry is None:
        return PlanEntryBody(0, 0, 0, num_inputs, arena_offset, tuple(outputs), tuple(sizes)), None
    levels = len(entry.spec.levels) if entry.spec.levels else len(entry.spec.steps)
    return PlanEntryBody(_address(entry), ctypes.addressof(executor._native_constants), levels, num_inputs,
                         arena_offset, tuple(outputs), tuple(sizes)), entry


def _address(entry) -> int:
    from ..sdk.plan_entry import function_address
    return function_address(entry.function)


def _arena_bytes(model) -> int:
    entry = model.executor.native_entry
    return entry.spec.arena_bytes if entry is not None else 0


class _Arguments:
    """The call's arguments as the entry sees them: a slot, its dtype and its bytes each."""

    def __init__(self, plan, step, program, slot_of, scratch: Scratch) -> None:
        self.slots, self.dtypes, self.sizes = [], [], []
        for source in program.spec.sources:
            if isinstance(source, int):
                value = plan.values[step.inputs[source]]
                self.slots.append(slot_of(step.inputs[source]))
                self.dtypes.append(np.dtype(to_numpy(value.dtype)))
                self.sizes.append(value.nbytes)
            else:   # a scalar constant fusion inlined into the group
                array = np.ascontiguousarray(source)
                scratch.keep.append(array)
                self.slots.append(Slot("address", array.ctypes.data))
                self.dtypes.append(array.dtype)
                self.sizes.append(array.nbytes)

    def check(self, index: int, dtype, what: str) -> None:
        if self.dtypes[index] != np.dtype(dtype):
            raise _Unsupported(f"its {what} is {self.dtypes[index]}, not {np.dtype(dtype)}")


def control_record(plan, step, program, slot_of, scratch: Scratch) -> tuple[Any, tuple, str]:
    """(record, its bodies' PlanEntry objects, "") for a control-flow step the entry can run, else
    (None, (), why). `slot_of(value_id)` gives the slot of a value of the plan."""
    from ..graph.ops.control_flow import IfAttrs, LoopAttrs, ScanAttrs
    try:
        args = _Arguments(plan, step, program, slot_of, scratch)
        outputs = tuple(slot_of(v) for v in step.outputs)
        output_bytes = tuple(plan.values[v].nbytes for v in step.outputs)
        attrs = program.attrs
        if isinstance(attrs, IfAttrs):
            return _if_record(program, args, outputs, output_bytes, scratch)
        if isinstance(attrs, LoopAttrs):
            return _loop_record(program, args, outputs, scratch)
        if isinstance(attrs, ScanAttrs):
            return _scan_record(plan, step, program, args, outputs, scratch)
        raise _Unsupported(f"{type(attrs).__name__} is not a control-flow op the entry knows")
    except _Unsupported as why:
        return None, (), str(why)


def _if_record(program, args: _Arguments, outputs, output_bytes, scratch: Scratch):
    args.check(0, np.bool_, "condition")
    then_model, else_model = program.bodies
    arena = scratch.take(max(_arena_bytes(then_model), _arena_bytes(else_model)))
    count = len(args.slots) - 1
    (then_body, then_entry), (else_body, else_entry) = _body(then_model, arena, count), _body(else_model, arena, count)
    record = PlanEntryIf(args.slots[0], (then_body, else_body), tuple(args.slots[1:]), outputs, output_bytes,
                         scratch.take(DETAIL_BYTES))
    return record, (then_entry, else_entry), ""


def _loop_record(program, args: _Arguments, outputs, scratch: Scratch):
    attrs = program.attrs
    carried = attrs.num_carried
    if attrs.has_trip_count:
        args.check(0, np.int64, "trip count")
    if attrs.has_cond:
        args.check(1, np.bool_, "condition")
    (body_model,) = program.bodies
    body_plan = body_model.executor.plan
    iteration_value, cond_value = (body_plan.values[v] for v in body_plan.inputs[:2])
    if iteration_value.dtype != "int64" or cond_value.dtype != "bool" \
            or body_plan.values[body_plan.outputs[0]].dtype != "bool":
        raise _Unsupported("its body's iteration number is not int64 or its condition not bool")
    arena = scratch.take(_arena_bytes(body_model))
    body, body_entry = _body(body_model, arena, len(args.slots))
    carried_bytes = tuple(args.sizes[2:2 + carried])
    buffers = tuple(tuple(scratch.take(n) for n in carried_bytes) for _ in range(2))
    scans = body.output_bytes[1 + carried:]
    record = PlanEntryLoop(
        args.slots[0] if attrs.has_trip_count else None, args.slots[1] if attrs.has_cond else None, body,
        tuple(args.slots[2:2 + carried]), carried_bytes, tuple(args.slots[2 + carried:]), outputs, tuple(scans),
        attrs.max_trip_count, scratch.take(8), scratch.take(1), buffers, scratch.take(DETAIL_BYTES))
    return record, (body_entry,), ""


def _scan_record(plan, step, program, args: _Arguments, outputs, scratch: Scratch):
    attrs = program.attrs
    states, count = attrs.num_states, len(attrs.input_axes)
    (body_model,) = program.bodies
    shapes = [plan.values[step.inputs[s]].shape if isinstance(s, int) else np.shape(s)
              for s in program.spec.sources[states:states + count]]
    length = shapes[0][attrs.input_axes[0]]
    arena = scratch.take(_arena_bytes(body_model))
    body, body_entry = _body(body_model, arena, len(args.slots))
    state_bytes = tuple(args.sizes[:states])
    buffers = tuple(tuple(scratch.take(n) for n in state_bytes) for _ in range(2))
    slice_bytes = tuple(args.sizes[states + i] // length if length else 0 for i in range(count))
    # a slice along axis a is prod(shape[:a]) runs of contiguous bytes: gathered into a buffer unless one
    input_outer = tuple(int(np.prod(shape[:axis], dtype=np.int64)) for shape, axis in zip(shapes, attrs.input_axes))
    slice_buffers = tuple(scratch.take(n) if outer > 1 else -1 for n, outer in zip(slice_bytes, input_outer))
    body_plan = body_model.executor.plan
    element_shapes = [body_plan.values[v].shape for v in body_plan.outputs[states:]]
    output_outer = tuple(int(np.prod(shape[:axis], dtype=np.int64))
                         for shape, axis in zip(element_shapes, attrs.output_axes))
    record = PlanEntryScan(
        body, length, tuple(args.slots[:states]), state_bytes, tuple(args.slots[states:states + count]), slice_bytes,
        tuple(attrs.input_directions), tuple(args.slots[states + count:]), outputs, tuple(body.output_bytes[states:]),
        tuple(attrs.output_directions), buffers, scratch.take(DETAIL_BYTES), input_outer, slice_buffers, output_outer)
    return record, (body_entry,), ""
