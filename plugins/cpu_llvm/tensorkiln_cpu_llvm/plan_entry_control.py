"""plan_entry_control.py: the If, Loop and Scan steps of cpu_llvm's whole-plan entry (plan_entry.py).

A control-flow step (tensorkiln.sdk.plan_entry `PlanEntryIf`, `PlanEntryLoop`, `PlanEntryScan`)
becomes one function `i32 control_s(inputs, constants, arena)` of the entry's module, straight-line
code for its slots (their number is small and fixed), which calls its bodies' entries by address::

    table = {pointers of the body's inputs: the step's slots, loop buffers, scan slices}
    code = body(table, body_constants, arena + body_arena, 1, 0, body_levels)
    if (code) { detail = {code, branch, iteration}; return BODY_FAILED; }
    memmove(output or next carried buffer, result's place, bytes)   // per result

It returns 0 or a 16-bit code the entry encodes with the step's index, like a kernel's.
The semantics are graph/ops/control_flow.py run_loop and run_scan, step for step.

A kernel step with gather-index checks (`PlanEntryStep.checks`) gets a function of the same type,
`checks_s`, run before its kernel: a loop over the indices, INDEX_OUT_OF_RANGE at the first bad one.
"""
from __future__ import annotations

import llvmlite.ir as ir

from tensorkiln.sdk.plan_entry import (BODY_FAILED, INDEX_OUT_OF_RANGE, LOOP_COUNT, PlanEntryBody, PlanEntryIf,
                                       PlanEntryLoop, Slot)

from .cgutils import I1, I8, I32, I64, PTR, alloca_in_entry, for_range

__all__ = ["CONTROL_TYPE", "emit_control", "emit_index_checks"]

CONTROL_TYPE = ir.FunctionType(I32, [PTR.as_pointer(), PTR.as_pointer(), PTR])
_BODY_TYPE = ir.FunctionType(I32, [PTR.as_pointer(), PTR.as_pointer(), PTR, I32, I32, I32])


class _Frame:
    """The control function's builder and its view of the caller's tables and arena."""

    def __init__(self, function: ir.Function) -> None:
        self.builder = ir.IRBuilder(function.append_basic_block("entry"))
        self.inputs, self.constants, self.arena = function.args
        module = function.module
        self.memmove = module.declare_intrinsic("llvm.memmove", [PTR, PTR, I64])

    def at(self, offset) -> ir.Value:
        """The arena's byte `offset` (an int or an i64)."""
        return self.builder.gep(self.arena, [offset if isinstance(offset, ir.Value) else I64(offset)], inbounds=True)

    def slot(self, slot: Slot) -> ir.Value:
        builder = self.builder
        if slot.kind == "arena":
            return self.at(slot.index)
        if slot.kind == "address":
            return ir.Constant(I64, slot.index).inttoptr(PTR)
        table = self.inputs if slot.kind == "input" else self.constants
        return builder.load(builder.gep(table, [I64(slot.index)], inbounds=True))

    def copy(self, destination: ir.Value, source: ir.Value, nbytes: int) -> None:
        if nbytes:
            self.builder.call(self.memmove, [destination, source, I64(nbytes), ir.Constant(I1, 0)])

    def table(self, count: int) -> ir.Value:
        return alloca_in_entry(self.builder, PTR, max(1, count), name="table")

    def put(self, table: ir.Value, index: int, pointer: ir.Value) -> None:
        self.builder.store(pointer, self.builder.gep(table, [I64(index)], inbounds=True))

    def result(self, body: PlanEntryBody, table: ir.Value, index: int) -> ir.Value:
        """Where result `index` of `body` lies after its call."""
        place = body.outputs[index]
        if place.kind == "input":
            return self.builder.load(self.builder.gep(table, [I64(place.index)], inbounds=True))
        if place.kind == "arena":
            return self.at(body.arena_offset + place.index)
        return ir.Constant(I64, place.index).inttoptr(PTR)

    def call(self, body: PlanEntryBody, table: ir.Value, detail: int, which: int, iteration: ir.Value) -> None:
        """Call `body` on `table`; on failure record (code, which, iteration) at `detail` and return BODY_FAILED."""
        if not body.address:   # a body without kernels: its results are its inputs or constants
            return
        builder = self.builder
        function = builder.inttoptr(I64(body.address), _BODY_TYPE.as_pointer())   # an instruction: callable
        constants = ir.Constant(I64, body.constants).inttoptr(PTR.as_pointer())
        code = builder.call(function, [table, constants, self.at(body.arena_offset), I32(1), I32(0),
                                       I32(body.levels)])
        with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
            self.fail(detail, code, which, iteration, BODY_FAILED)

    def fail(self, detail: int, code: ir.Value, which: int, iteration: ir.Value, returned: int) -> None:
        builder = self.builder
        base = self.at(detail)
        builder.store(code, builder.bitcast(base, I32.as_pointer()))
        builder.store(I32(which), builder.bitcast(self.at(detail + 4), I32.as_pointer()))
        builder.store(iteration, builder.bitcast(self.at(detail + 8), I64.as_pointer()))
        builder.ret(I32(returned))

    def flag(self, pointer: ir.Value) -> ir.Value:
        """A bool byte as i1."""
        return self.builder.icmp_unsigned("!=", self.builder.load(pointer), I8(0))


def emit_control(function: ir.Function, control) -> None:
    """Fill `function` (of CONTROL_TYPE) with the code of `control`."""
    frame = _Frame(function)
    if isinstance(control, PlanEntryIf):
        _emit_if(frame, control)
    elif isinstance(control, PlanEntryLoop):
        _emit_loop(frame, control)
    else:
        _emit_scan(frame, control)


def emit_index_checks(function: ir.Function, step) -> None:
    """Fill `function` (of CONTROL_TYPE) with the gather-index checks of kernel step `step`: 0, or
    INDEX_OUT_OF_RANGE with (check number, flat position, value) as int64s at `step.detail`."""
    frame = _Frame(function)
    builder = frame.builder
    for number, check in enumerate(step.checks):
        bits = int(check.dtype[3:])
        data = builder.bitcast(frame.slot(check.slot), ir.IntType(bits).as_pointer())
        count = 1
        for extent in check.shape:
            count *= extent
        extents = None
        if check.per_last_axis:   # index[..., j] is a coordinate along data axis j
            extents = ir.GlobalVariable(function.module, ir.ArrayType(I64, len(check.extents)),
                                        function.module.get_unique_name("extents"))
            extents.initializer = ir.Constant(extents.type.pointee, [I64(e) for e in check.extents])
            extents.global_constant = True
            extents.linkage = "internal"
        with for_range(builder, I64(0), I64(count), name="index") as position:
            value = builder.load(builder.gep(data, [position], inbounds=True))
            value = builder.sext(value, I64) if bits < 64 else value
            if extents is None:
                size = I64(check.extents[0])
            else:
                axis = builder.urem(position, I64(check.shape[-1]))
                size = builder.load(builder.gep(extents, [I32(0), axis], inbounds=True))
            bad = builder.or_(builder.icmp_signed("<", value, builder.neg(size)),
                              builder.icmp_signed(">=", value, size))
            with builder.if_then(bad, likely=False):
                for offset, field in enumerate((I64(number), position, value)):
                    builder.store(field, builder.bitcast(frame.at(step.detail + 8 * offset), I64.as_pointer()))
                builder.ret(I32(INDEX_OUT_OF_RANGE))
    builder.ret(I32(0))


def _emit_if(frame: _Frame, control: PlanEntryIf) -> None:
    builder = frame.builder
    table = frame.table(len(control.inputs))
    for index, slot in enumerate(control.inputs):
        frame.put(table, index, frame.slot(slot))
    taken = frame.flag(frame.slot(control.cond))
    with builder.if_else(taken) as (then, otherwise):
        for which, block in enumerate((then, otherwise)):
            with block:
                body = control.bodies[which]
                frame.call(body, table, control.detail, which, I64(0))
                for index, (slot, nbytes) in enumerate(zip(control.outputs, control.output_bytes)):
                    frame.copy(frame.slot(slot), frame.result(body, table, index), nbytes)
    builder.ret(I32(0))


def _pick(builder: ir.IRBuilder, odd: ir.Value, frame: _Frame, if_odd: int, if_even: int) -> ir.Value:
    return builder.select(odd, frame.at(if_odd), frame.at(if_even))


def _emit_loop(frame: _Frame, control: PlanEntryLoop) -> None:
    builder = frame.builder
    body = control.body
    carried = len(control.carried)
    table = frame.table(body.num_inputs)
    first, second = control.carried_buffers
    for buffer, slot, nbytes in zip(first, control.carried, control.carried_bytes):
        frame.copy(frame.at(buffer), frame.slot(slot), nbytes)
    for index, slot in enumerate(control.captured):
        frame.put(table, 2 + carried + index, frame.slot(slot))
    frame.put(table, 0, frame.at(control.iteration))
    frame.put(table, 1, frame.at(control.cond_buffer))
    limit = builder.load(builder.bitcast(frame.slot(control.trip), I64.as_pointer())) \
        if control.trip is not None else I64(2 ** 63 - 1)
    keep = alloca_in_entry(builder, I1, name="keep")
    builder.store(frame.flag(frame.slot(control.cond)) if control.cond is not None else ir.Constant(I1, 1), keep)
    counter = alloca_in_entry(builder, I64, name="iteration")
    builder.store(I64(0), counter)
    function = builder.function
    header, run, done = (function.append_basic_block(n) for n in ("loop.header", "loop.body", "loop.done"))
    builder.branch(header)
    builder.position_at_end(header)
    iteration = builder.load(counter)
    builder.cbranch(builder.and_(builder.load(keep), builder.icmp_signed("<", iteration, limit)), run, done)
    builder.position_at_end(run)
    odd = builder.trunc(iteration, I1)   # carried values are read from one set of buffers, written to the other
    for index in range(carried):
        frame.put(table, 2 + index, _pick(builder, odd, frame, second[index], first[index]))
    builder.store(iteration, builder.bitcast(frame.at(control.iteration), I64.as_pointer()))
    builder.store(builder.zext(builder.load(keep), I8), frame.at(control.cond_buffer))
    frame.call(body, table, control.detail, 0, iteration)
    builder.store(frame.flag(frame.result(body, table, 0)), keep)
    for index, nbytes in enumerate(control.carried_bytes):
        frame.copy(_pick(builder, odd, frame, first[index], second[index]), frame.result(body, table, 1 + index),
                   nbytes)
    if control.scan_bytes:   # past the static trip count the loop runs on only to count (then it fails)
        with builder.if_then(builder.icmp_signed("<", iteration, I64(control.max_trip_count))):
            for index, nbytes in enumerate(control.scan_bytes):
                row = builder.gep(frame.slot(control.outputs[carried + index]), [builder.mul(iteration, I64(nbytes))],
                                  inbounds=True)
                frame.copy(row, frame.result(body, table, 1 + carried + index), nbytes)
    builder.store(builder.add(iteration, I64(1)), counter)
    builder.branch(header)
    builder.position_at_end(done)
    count = builder.load(counter)
    if control.scan_bytes:
        with builder.if_then(builder.icmp_signed("!=", count, I64(control.max_trip_count)), likely=False):
            frame.fail(control.detail, I32(0), 0, count, LOOP_COUNT)
    odd = builder.trunc(count, I1)
    for index, nbytes in enumerate(control.carried_bytes):
        frame.copy(frame.slot(control.outputs[index]), _pick(builder, odd, frame, second[index], first[index]),
                   nbytes)
    builder.ret(I32(0))


def _strided(frame: _Frame, packed: ir.Value, whole: ir.Value, row: ir.Value, outer: int, inner: int, length: int,
             gather: bool) -> None:
    """Copy row `row` along a scan axis of `whole` (`outer` runs of `inner` bytes, `length` rows between
    runs) from (`gather`) or to the contiguous `packed`."""
    builder = frame.builder
    with for_range(builder, I64(0), I64(outer), name="run") as run:
        strided = builder.gep(whole, [builder.mul(builder.add(builder.mul(run, I64(length)), row), I64(inner))],
                              inbounds=True)
        dense = builder.gep(packed, [builder.mul(run, I64(inner))], inbounds=True)
        if gather:
            frame.copy(dense, strided, inner)
        else:
            frame.copy(strided, dense, inner)


def _emit_scan(frame: _Frame, control) -> None:
    builder = frame.builder
    body = control.body
    states, count = len(control.states), len(control.scan_inputs)
    table = frame.table(body.num_inputs)
    first, second = control.state_buffers
    for buffer, slot, nbytes in zip(first, control.states, control.state_bytes):
        frame.copy(frame.at(buffer), frame.slot(slot), nbytes)
    for index, slot in enumerate(control.captured):
        frame.put(table, states + count + index, frame.slot(slot))
    last = I64(control.length - 1)
    with for_range(builder, I64(0), I64(control.length), name="scan") as step:
        odd = builder.trunc(step, I1)
        for index in range(states):
            frame.put(table, index, _pick(builder, odd, frame, second[index], first[index]))
        reverse = builder.sub(last, step)
        for index, (slot, nbytes, direction) in enumerate(zip(control.scan_inputs, control.slice_bytes,
                                                               control.input_directions)):
            row = reverse if direction else step
            outer = control.input_outer[index] if control.input_outer else 1
            if outer == 1:   # the slice is contiguous: read in place
                frame.put(table, states + index, builder.gep(frame.slot(slot), [builder.mul(row, I64(nbytes))],
                                                             inbounds=True))
                continue
            buffer = frame.at(control.slice_buffers[index])
            _strided(frame, buffer, frame.slot(slot), row, outer, nbytes // outer, control.length, gather=True)
            frame.put(table, states + index, buffer)
        frame.call(body, table, control.detail, 0, step)
        for index, nbytes in enumerate(control.state_bytes):
            frame.copy(_pick(builder, odd, frame, first[index], second[index]), frame.result(body, table, index),
                       nbytes)
        for index, (nbytes, direction) in enumerate(zip(control.scan_bytes, control.output_directions)):
            row = reverse if direction else step
            outer = control.output_outer[index] if control.output_outer else 1
            element = frame.result(body, table, states + index)
            output = frame.slot(control.outputs[states + index])
            if outer == 1:
                frame.copy(builder.gep(output, [builder.mul(row, I64(nbytes))], inbounds=True), element, nbytes)
            else:
                _strided(frame, element, output, row, outer, nbytes // outer, control.length, gather=False)
    final = second if control.length % 2 else first
    for index, nbytes in enumerate(control.state_bytes):
        frame.copy(frame.slot(control.outputs[index]), frame.at(final[index]), nbytes)
    builder.ret(I32(0))
