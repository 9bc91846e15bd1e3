"""plan_entry.py: cpu_llvm's whole-plan entry: one LLVM function that calls every kernel of a plan in order.

`build_plan_entry(module, spec)` (what `JITModule.build_plan_entry` returns; the contract is
tensorkiln.sdk.plan_entry) emits, for the kernels already loaded in `module`::

    int32_t tensorkiln_plan_run(void** inputs, void** constants, uint8_t* arena, int32_t overlap,
                                int32_t level_begin, int32_t level_end) {
      for each level from level_begin to level_end:   // one step per level when the plan has none
        if min(overlap, width) > 1: tk_parallel(level_body, ...)   // each thread claims the next step
        else for each step s of the level:
          if (controls[s]) return controls[s](inputs, constants, arena)  // If/Loop/Scan: plan_entry_control.py
          if (checks[s] && (code = checks[s](...))) return ...            // gather indices, before the kernel
          TKArg args[MAX_ARGS];               // on the stack: concurrent runs share nothing
          args[a] = {data: arena + offset | inputs[i] | constants[i], shape, ndim, dtype}   // from tables
          if ((code = fns[s](args, nargs))) return ((s + 1) << 16) | code;
      return 0;
    }

The plan is data (constant tables: each step's function, its arguments' slots, dtypes and
shapes), so the IR and the time to build it stay small for any number of steps (about 40 ms
for 45 steps on the loaded 2-core host, most of it MCJIT). It calls each kernel's packed function
(abi.py), whose argument checks cost a few loads per argument, at the address the kernel has in
`module`'s engine; the entry is compiled into an engine of its own (the addresses belong to this
process, so the entry is never cached on disk). Parallel loops stay inside the kernels (the thread
pool of thread_pool.c, `tensorkiln_num_threads`).

`entry_object(artifact, spec, target)` emits the same entry calling the kernels by symbol, for
`JITModule.export_library(path, plan_entry=spec)` to link beside them (deployed packages).
"""
from __future__ import annotations

import dataclasses

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk.native import dtype_fields
from tensorkiln.sdk.plan_entry import ENTRY_SYMBOL, SPEC_SYMBOL, PlanEntry, PlanEntrySpec, spec_digest

from .abi import TKARG_TYPE
from .cgutils import I8, I32, I64, PTR, declare, for_range, run_parallel
from .plan_entry_control import CONTROL_TYPE, emit_control, emit_index_checks
from .host import machine_config, new_target_machine, target_machine

__all__ = ["build_plan_entry", "entry_object"]

_PACKED_TYPE = ir.FunctionType(I32, [TKARG_TYPE.as_pointer(), I32])


_ARENA, _INPUT, _CONSTANT = 0, 1, 2
_SLOT_KINDS = {"arena": _ARENA, "input": _INPUT, "constant": _CONSTANT}
# the entry's run-time context, shared by a level's team: inputs, constants, arena, error, level start, width
_CONTEXT = ir.LiteralStructType([PTR.as_pointer(), PTR.as_pointer(), PTR, I32, I32, I32, I32])
_INPUTS, _CONSTANTS, _ARENA_FIELD, _ERROR, _LEVEL_START, _LEVEL_WIDTH, _NEXT_STEP = range(7)


def _table(module: ir.Module, name: str, element: ir.Type, values: list) -> ir.GlobalVariable:
    """An internal constant array `name` of `values` (at least one element)."""
    values = values or [ir.Constant(element, None) if isinstance(element, ir.PointerType) else element(0)]
    constants = [v if isinstance(v, ir.Constant) or isinstance(v, ir.values.GlobalValue) else element(v)
                 for v in values]
    variable = ir.GlobalVariable(module, ir.ArrayType(element, len(constants)), name)
    variable.initializer = ir.Constant(variable.type.pointee, constants)
    variable.global_constant = True
    variable.linkage = "internal"
    return variable


class _EntryBuilder:
    """Emits the entry as a loop over constant tables that describe the plan (so the IR, and the time
    to build it, stay small for any number of steps):

        fns[s]                   step s's packed function
        first[s] .. first[s+1]   its arguments a, each with
        slots[a]                 where the data is: offset << 2 | 0 (arena), index << 2 | 1 (input), | 2 (constant)
        meta[a], dims[shape[a]]  ndim | code << 32 | bits << 40 | lanes << 48, and its extents
        levels[l] .. levels[l+1] the steps of concurrent level l

    A level wider than one step runs on the thread pool when the caller's `overlap` allows
    (`tk_parallel`, each thread claiming the level's next step from a counter until none is
    left, so a thread that never starts holds nothing up), else in order."""

    def __init__(self, spec: PlanEntrySpec, signatures: list, callees: list[int | str]) -> None:
        """`callees`: each step's packed function, by address in this process or by symbol (for linking)."""
        self.spec = spec
        self.module = ir.Module(name="tensorkiln_plan")
        module = self.module
        functions = []
        for callee in callees:
            if callee is None:   # a step the caller runs itself (PlanEntryStep with kernel "")
                functions.append(ir.Constant(PTR, None))
            elif isinstance(callee, str):
                functions.append(declare(module, callee, I32, [TKARG_TYPE.as_pointer(), I32]).bitcast(PTR))
            else:
                functions.append(ir.Constant(I64, callee).inttoptr(PTR))
        first, slots, meta, shape_at, dims, shapes = [0], [], [], [], [], {}
        for step, signature in zip(spec.steps, signatures):
            for slot, param in zip(step.args, signature.params if signature is not None else ()):
                extents = tuple(param.shape)
                if extents not in shapes:
                    shapes[extents] = len(dims)
                    dims.extend(extents)
                code, bits, lanes = dtype_fields(param.dtype)
                slots.append(slot.index << 2 | _SLOT_KINDS[slot.kind])
                meta.append(len(extents) | code << 32 | bits << 40 | lanes << 48)
                shape_at.append(shapes[extents])
            first.append(len(slots))
        levels = spec.levels or tuple((index,) for index in range(len(spec.steps)))
        self.widest = max(1, *(len(step.args) for step in spec.steps))
        self.fns = _table(module, "fns", PTR, functions)
        self.first = _table(module, "first", I32, first)
        self.slots = _table(module, "slots", I64, slots)
        self.meta = _table(module, "meta", I64, meta)
        self.shape_at = _table(module, "shape_at", I32, shape_at)
        self.dims = _table(module, "dims", I64, dims)
        self.levels = _table(module, "levels", I32, [level[0] for level in levels] + [len(spec.steps)])
        # control-flow steps (plan_entry_control.py): step s calls controls[s] when it is not NULL
        self.control_functions = {index: ir.Function(module, CONTROL_TYPE, f"control_{index}")
                                  for index, step in enumerate(spec.steps) if step.control is not None}
        for function in self.control_functions.values():
            function.linkage = "internal"
        # gather-index checks: step s calls checks[s] before its kernel when it is not NULL
        self.check_functions = {index: ir.Function(module, CONTROL_TYPE, f"checks_{index}")
                                for index, step in enumerate(spec.steps) if step.checks}
        for function in self.check_functions.values():
            function.linkage = "internal"
        self.checks = None
        if self.check_functions:
            self.checks = _table(module, "checks", PTR, [
                self.check_functions[index].bitcast(PTR) if index in self.check_functions
                else ir.Constant(PTR, None) for index in range(len(spec.steps))])
        self.controls = None
        if self.control_functions:
            self.controls = _table(module, "controls", PTR, [
                self.control_functions[index].bitcast(PTR) if index in self.control_functions
                else ir.Constant(PTR, None) for index in range(len(spec.steps))])

    @staticmethod
    def _at(builder: ir.IRBuilder, table: ir.GlobalVariable, index: ir.Value) -> ir.Value:
        return builder.load(builder.gep(table, [I32(0), index], inbounds=True))

    @staticmethod
    def _field(builder: ir.IRBuilder, context: ir.Value, field: int) -> ir.Value:
        return builder.gep(context, [I32(0), I32(field)], inbounds=True)

    def _run_step(self) -> ir.Function:
        """`i32 run_step(context*, i32 s)`: fill step s's TKArgs on the stack, call its kernel; 0 or the
        entry's error code."""
        function = ir.Function(self.module, ir.FunctionType(I32, [_CONTEXT.as_pointer(), I32]), "run_step")
        function.linkage = "internal"
        context, step = function.args
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        args = builder.alloca(TKARG_TYPE, I32(self.widest), name="args")
        tables = [builder.load(self._field(builder, context, field)) for field in (_INPUTS, _CONSTANTS)]
        arena = builder.load(self._field(builder, context, _ARENA_FIELD))
        if self.controls is not None:
            control = self._at(builder, self.controls, step)
            with builder.if_then(builder.icmp_unsigned("!=", control, ir.Constant(PTR, None)), likely=False):
                code = builder.call(builder.bitcast(control, CONTROL_TYPE.as_pointer()), [*tables, arena])
                failed = builder.or_(code, builder.shl(builder.add(step, I32(1)), I32(16)))
                builder.ret(builder.select(builder.icmp_signed("==", code, I32(0)), I32(0), failed))
        if self.checks is not None:
            check = self._at(builder, self.checks, step)
            with builder.if_then(builder.icmp_unsigned("!=", check, ir.Constant(PTR, None)), likely=False):
                code = builder.call(builder.bitcast(check, CONTROL_TYPE.as_pointer()), [*tables, arena])
                failed = builder.or_(code, builder.shl(builder.add(step, I32(1)), I32(16)))
                with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
                    builder.ret(failed)
        start = self._at(builder, self.first, step)
        stop = self._at(builder, self.first, builder.add(step, I32(1)))
        with for_range(builder, start, stop, name="a") as a:
            arg = builder.gep(args, [builder.sub(a, start)], inbounds=True)
            slot = self._at(builder, self.slots, a)
            kind, where = builder.and_(slot, I64(3)), builder.ashr(slot, I64(2))
            is_arena = builder.icmp_signed("==", kind, I64(_ARENA))
            in_arena = builder.gep(arena, [where], inbounds=True)
            table = builder.select(builder.icmp_signed("==", kind, I64(_INPUT)), tables[0], tables[1])
            # branch-free: an arena slot reads entry 0 of a table (the caller passes at least one), not `where`
            in_table = builder.load(builder.gep(table, [builder.select(is_arena, I64(0), where)], inbounds=True))
            data = builder.select(is_arena, in_arena, in_table)
            meta = self._at(builder, self.meta, a)
            shape = builder.gep(self.dims, [I32(0), self._at(builder, self.shape_at, a)], inbounds=True)
            fields = (data, builder.bitcast(shape, I64.as_pointer()), ir.Constant(I64.as_pointer(), None),
                      builder.trunc(meta, I32), builder.trunc(builder.lshr(meta, I64(32)), I8),
                      builder.trunc(builder.lshr(meta, I64(40)), I8),
                      builder.trunc(builder.lshr(meta, I64(48)), ir.IntType(16)), I64(0))
            for position, value in enumerate(fields):
                builder.store(value, builder.gep(arg, [I32(0), I32(position)], inbounds=True))
        kernel = builder.bitcast(self._at(builder, self.fns, step), _PACKED_TYPE.as_pointer())
        code = builder.call(kernel, [args, builder.sub(stop, start)])
        failed = builder.or_(builder.and_(code, I32(0xFFFF)), builder.shl(builder.add(step, I32(1)), I32(16)))
        builder.ret(builder.select(builder.icmp_signed("==", code, I32(0)), I32(0), failed))
        return function

    def _level_body(self, run_step: ir.Function) -> ir.Function:
        """`void level_body(context*)`: each thread of the region claims the level's next step until none is left."""
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), "level_body")
        function.linkage = "internal"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        context = builder.bitcast(function.args[0], _CONTEXT.as_pointer())
        start = builder.load(self._field(builder, context, _LEVEL_START))
        width = builder.load(self._field(builder, context, _LEVEL_WIDTH))
        take = function.append_basic_block("step.take")
        run = function.append_basic_block("step.run")
        done = function.append_basic_block("step.done")
        builder.branch(take)
        builder.position_at_end(take)
        j = builder.atomic_rmw("add", self._field(builder, context, _NEXT_STEP), I32(1), "monotonic")
        builder.cbranch(builder.icmp_signed("<", j, width), run, done)
        builder.position_at_end(run)
        code = builder.call(run_step, [context, builder.add(start, j)])
        with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
            builder.store_atomic(code, self._field(builder, context, _ERROR), "monotonic", 4)
        builder.branch(take)
        builder.position_at_end(done)
        builder.ret_void()
        return function

    def emit(self) -> str:
        for index, function in self.control_functions.items():
            emit_control(function, self.spec.steps[index].control)
        for index, function in self.check_functions.items():
            emit_index_checks(function, self.spec.steps[index])
        run_step = self._run_step()
        level_body = self._level_body(run_step)
        function = ir.Function(self.module, ir.FunctionType(I32, [PTR.as_pointer(), PTR.as_pointer(), PTR, I32, I32,
                                                                  I32]), ENTRY_SYMBOL)
        inputs, constants, arena, overlap, level_begin, level_end = function.args
        for argument, name in zip(function.args, ("inputs", "constants", "arena", "overlap", "level_begin",
                                                  "level_end")):
            argument.name = name
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        context = builder.alloca(_CONTEXT, name="context")
        for field, value in ((_INPUTS, inputs), (_CONSTANTS, constants), (_ARENA_FIELD, arena)):
            builder.store(value, self._field(builder, context, field))
        with for_range(builder, level_begin, level_end, name="level") as level:
            start = self._at(builder, self.levels, level)
            width = builder.sub(self._at(builder, self.levels, builder.add(level, I32(1))), start)
            team = builder.select(builder.icmp_signed("<", overlap, width), overlap, width)
            with builder.if_else(builder.icmp_signed(">", team, I32(1))) as (together, in_order):
                with together:
                    for field, value in ((_ERROR, I32(0)), (_LEVEL_START, start), (_LEVEL_WIDTH, width),
                                         (_NEXT_STEP, I32(0))):
                        builder.store(value, self._field(builder, context, field))
                    run_parallel(builder, level_body, context, team)
                    failed = builder.load(self._field(builder, context, _ERROR))
                    with builder.if_then(builder.icmp_signed("!=", failed, I32(0)), likely=False):
                        builder.ret(failed)
                with in_order:
                    with for_range(builder, start, builder.add(start, width), name="s") as step:
                        code = builder.call(run_step, [context, step])
                        with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
                            builder.ret(code)
        builder.ret(I32(0))
        return str(self.module)


def _entry_config(target):
    """The target's machine at -O0: the entry only moves pointers and calls kernels, and code generation at
    O3 took 6x longer (332 vs 56 ms for squeezenet's 43 steps, loaded machine) for no measurable gain."""
    return dataclasses.replace(machine_config(target), opt_level=0)


def _kernels(artifact, spec: PlanEntrySpec) -> tuple[list, list[str | None]]:
    """Each step's signature and packed function symbol (None for a step the caller runs itself)."""
    called = [bool(step.kernel) and step.control is None for step in spec.steps]
    signatures = [artifact.kernel(step.kernel) if call else None for step, call in zip(spec.steps, called)]
    symbols = [artifact.metadata.get("symbols", {}).get(step.kernel, step.kernel) if call else None
               for step, call in zip(spec.steps, called)]
    return signatures, symbols


def _parse(text: str) -> llvm.ModuleRef:
    try:
        parsed = llvm.parse_assembly(text)
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"cpu_llvm plan entry: LLVM rejected the entry: {error}") from None
    return parsed


def build_plan_entry(loaded, spec: PlanEntrySpec) -> PlanEntry:
    """Compile the entry of `spec` against the kernels of `loaded` (a JITModule) and return it."""
    signatures, symbols = _kernels(loaded.artifact, spec)
    addresses = []
    for step, symbol in zip(spec.steps, symbols):
        if symbol is None:
            addresses.append(None)
            continue
        address = loaded.engine.get_function_address(symbol)
        if not address:
            raise CompileError(f"cpu_llvm plan entry: kernel {step.kernel!r} (symbol {symbol!r}) is not in the "
                               "loaded module")
        addresses.append(address)
    parsed = _parse(_EntryBuilder(spec, signatures, addresses).emit())
    engine = llvm.create_mcjit_compiler(parsed, new_target_machine(_entry_config(loaded.target)))
    engine.finalize_object()
    return PlanEntry(spec, engine.get_function_address(ENTRY_SYMBOL), (engine, loaded), loaded.artifact.kernel)


def entry_object(artifact, spec: PlanEntrySpec, target) -> bytes:
    """Object code of the entry of `spec` calling the kernels by symbol, with `tensorkiln_plan_spec` =
    `spec_digest(spec)`: linked beside the kernels into an exported library (runtime.JITModule)."""
    if any(step.control is not None for step in spec.steps):   # its bodies are addresses in this process
        raise CompileError("cpu_llvm plan entry: a plan whose entry runs control-flow steps cannot be linked into "
                           "a library; export the model without it (its control flow then runs in Python)")
    signatures, symbols = _kernels(artifact, spec)
    builder = _EntryBuilder(spec, signatures, symbols)
    builder.emit()
    module = builder.module
    digest = bytearray(spec_digest(spec).encode() + b"\0")
    variable = ir.GlobalVariable(module, ir.ArrayType(I8, len(digest)), SPEC_SYMBOL)
    variable.initializer = ir.Constant(variable.type.pointee, digest)
    variable.global_constant = True
    config = _entry_config(target)
    module.triple = config.triple
    parsed = _parse(str(module))
    return bytes(target_machine(config).emit_object(parsed))
