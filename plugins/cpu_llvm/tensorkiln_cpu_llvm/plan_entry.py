"""plan_entry.py: cpu_llvm's whole-plan entry: one LLVM function that calls every kernel of a plan in order.

`build_plan_entry(module, spec)` (what `JITModule.build_plan_entry` returns; the contract is
tensorkiln.sdk.plan_entry) emits, for the kernels already loaded in `module`::

    int32_t tensorkiln_plan_run(void** inputs, void** constants, uint8_t* arena, int32_t overlap) {
      TKArg args[MAX_ARGS];                   // on the stack: concurrent runs share nothing
      memcpy(args, step0_template, ...);      // dtype, ndim and shape of every argument: constants
      args[0].data = inputs[0]; args[1].data = arena + 4096; ...
      if ((code = fused_conv2d_relu(args, 2))) return (1 << 16) | code;
      ...                                     // a concurrent level: GOMP_parallel(level_N, ...) when
      return 0;                               // min(overlap, width) > 1, else its steps in order
    }

It calls each kernel's packed function (abi.py), whose argument checks cost a few loads per
argument, at the address the kernel has in `module`'s engine; the entry is compiled into an
engine of its own (the addresses belong to this process, so the entry is never cached on disk).
Parallel loops stay inside the kernels (libgomp, `tensorkiln_num_threads`).

`entry_object(artifact, spec, target)` emits the same entry calling the kernels by symbol, for
`JITModule.export_library(path, plan_entry=spec)` to link beside them (deployed packages).
"""
from __future__ import annotations

import ctypes
import dataclasses

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk.native import TKArg, dtype_fields
from tensorkiln.sdk.plan_entry import ENTRY_SYMBOL, SPEC_SYMBOL, PlanEntry, PlanEntrySpec, encode_step_error, spec_digest

from .abi import TKARG_TYPE
from .cgutils import I8, I32, I64, PTR, declare
from .host import machine_config, new_target_machine, target_machine

__all__ = ["build_plan_entry", "entry_object"]

_TKARG_BYTES = ctypes.sizeof(TKArg)
_PACKED_TYPE = ir.FunctionType(I32, [TKARG_TYPE.as_pointer(), I32])


def _constant_global(module: ir.Module, name: str, value: ir.Constant) -> ir.GlobalVariable:
    variable = ir.GlobalVariable(module, value.type, name)
    variable.initializer = value
    variable.global_constant = True
    variable.linkage = "internal"
    return variable


def _template(module: ir.Module, index: int, signature, shapes: dict) -> ir.GlobalVariable:
    """The TKArg array of step `index` with every field but `data` filled in; `shapes` holds the
    shape arrays made so far, shared by every argument of the same shape."""
    slots = []
    for param in signature.params:
        extents = tuple(param.shape) or (0,)
        if extents not in shapes:
            shapes[extents] = _constant_global(module, f"shape.{len(shapes)}",
                                               ir.Constant(ir.ArrayType(I64, len(extents)), list(extents)))
        shape = shapes[extents]
        code, bits, lanes = dtype_fields(param.dtype)
        slots.append(ir.Constant(TKARG_TYPE, [
            ir.Constant(PTR, None), shape.bitcast(I64.as_pointer()), ir.Constant(I64.as_pointer(), None),
            I32(len(param.shape)), I8(code), I8(bits), ir.IntType(16)(lanes), I64(0)]))
    return _constant_global(module, f"args.{index}",
                            ir.Constant(ir.ArrayType(TKARG_TYPE, len(slots)), slots))


class _Tables:
    """The entry's parameters as a step sees them: the inputs and constants tables and the arena."""

    def __init__(self, inputs: ir.Value, constants: ir.Value, arena: ir.Value) -> None:
        self.inputs, self.constants, self.arena = inputs, constants, arena

    def data(self, builder: ir.IRBuilder, slot) -> ir.Value:
        if slot.kind == "arena":
            return builder.gep(self.arena, [I64(slot.index)], inbounds=True)
        table = self.inputs if slot.kind == "input" else self.constants
        return builder.load(builder.gep(table, [I64(slot.index)], inbounds=True))


class _EntryBuilder:
    """Emits the entry: steps in order, and each concurrent level either in order or, when the
    caller's `overlap` allows, on a libgomp team (`GOMP_parallel`, one step per thread in turn)."""

    def __init__(self, spec: PlanEntrySpec, signatures: list, callees: list[int | str]) -> None:
        """`callees`: each step's packed function, by address in this process or by symbol (for linking)."""
        self.spec, self.signatures, self.callees = spec, signatures, callees
        self.module = ir.Module(name="tensorkiln_plan")
        self.memcpy = self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        self.templates: dict[int, ir.GlobalVariable] = {}
        self.shapes: dict[tuple[int, ...], ir.GlobalVariable] = {}
        self.context_type = ir.LiteralStructType([PTR.as_pointer(), PTR.as_pointer(), PTR, I32])

    def call_step(self, builder: ir.IRBuilder, args: ir.Value, tables: _Tables, index: int) -> ir.Value:
        """Fill `args` (a TKArg array on the stack) for step `index`, call its kernel, return its code."""
        step = self.spec.steps[index]
        if index not in self.templates:
            self.templates[index] = _template(self.module, index, self.signatures[index], self.shapes)
        builder.call(self.memcpy, [builder.bitcast(args, PTR), builder.bitcast(self.templates[index], PTR),
                                   I64(_TKARG_BYTES * len(step.args)), ir.IntType(1)(0)])
        for position, slot in enumerate(step.args):
            builder.store(tables.data(builder, slot), builder.gep(args, [I64(position), I32(0)], inbounds=True))
        callee = self.callees[index]
        if isinstance(callee, str):
            kernel = declare(self.module, callee, I32, [TKARG_TYPE.as_pointer(), I32])
        else:
            kernel = builder.inttoptr(I64(callee), _PACKED_TYPE.as_pointer(), name=f"kernel.{index}")
        return builder.call(kernel, [args, I32(len(step.args))])

    def _args(self, builder: ir.IRBuilder, steps) -> ir.Value:
        return builder.alloca(TKARG_TYPE, I32(max(len(self.spec.steps[i].args) for i in steps)), name="args")

    def _return_on_error(self, builder: ir.IRBuilder, code: ir.Value, index: int) -> None:
        with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
            builder.ret(builder.or_(builder.and_(code, I32(0xFFFF)), I32(encode_step_error(index, 0))))

    def _level_function(self, number: int, level: tuple[int, ...]) -> ir.Function:
        """`void level.N(context*)`: thread t of the team runs the level's steps j with j % team == t
        (called outside a parallel region, thread 0 of a team of 1, it runs them all in order)."""
        function = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR]), f"level.{number}")
        function.linkage = "internal"
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        context = builder.bitcast(function.args[0], self.context_type.as_pointer())
        fields = [builder.load(builder.gep(context, [I32(0), I32(k)], inbounds=True)) for k in range(3)]
        tables = _Tables(*fields)
        error = builder.gep(context, [I32(0), I32(3)], inbounds=True)
        thread = builder.call(declare(self.module, "omp_get_thread_num", I32, []), [])
        team = builder.call(declare(self.module, "omp_get_num_threads", I32, []), [])
        args = self._args(builder, level)
        for position, index in enumerate(level):
            mine = builder.icmp_signed("==", builder.urem(I32(position), team), thread)
            with builder.if_then(mine):
                code = self.call_step(builder, args, tables, index)
                with builder.if_then(builder.icmp_signed("!=", code, I32(0)), likely=False):
                    failed = builder.or_(builder.and_(code, I32(0xFFFF)), I32(encode_step_error(index, 0)))
                    builder.store_atomic(failed, error, "monotonic", 4)
        builder.ret_void()
        return function

    def emit(self) -> str:
        function = ir.Function(self.module, ir.FunctionType(I32, [PTR.as_pointer(), PTR.as_pointer(), PTR, I32]),
                               ENTRY_SYMBOL)
        inputs, constants, arena, overlap = function.args
        inputs.name, constants.name, arena.name, overlap.name = "inputs", "constants", "arena", "overlap"
        tables = _Tables(inputs, constants, arena)
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        args = self._args(builder, range(len(self.spec.steps)))
        context = builder.alloca(self.context_type, name="context")
        for k, value in enumerate((inputs, constants, arena)):
            builder.store(value, builder.gep(context, [I32(0), I32(k)], inbounds=True))
        levels = self.spec.levels or tuple((index,) for index in range(len(self.spec.steps)))
        for number, level in enumerate(levels):
            if len(level) > 1:
                team = builder.select(builder.icmp_signed("<", overlap, I32(len(level))), overlap, I32(len(level)))
                error = builder.gep(context, [I32(0), I32(3)], inbounds=True)
                builder.store(I32(0), error)
                body = self._level_function(number, level)
                with builder.if_else(builder.icmp_signed(">", team, I32(1))) as (together, in_order):
                    with together:
                        gomp_parallel = declare(self.module, "GOMP_parallel", ir.VoidType(), [PTR, PTR, I32, I32])
                        builder.call(gomp_parallel, [builder.bitcast(body, PTR), builder.bitcast(context, PTR),
                                                     team, I32(0)])
                    with in_order:
                        builder.call(body, [builder.bitcast(context, PTR)])
                failed = builder.load(error)
                with builder.if_then(builder.icmp_signed("!=", failed, I32(0)), likely=False):
                    builder.ret(failed)
            else:
                self._return_on_error(builder, self.call_step(builder, args, tables, level[0]), level[0])
        builder.ret(I32(0))
        return str(self.module)


def _entry_config(target):
    """The target's machine at -O0: the entry only moves pointers and calls kernels, and code generation at
    O3 took 6x longer (332 vs 56 ms for squeezenet's 43 steps, loaded machine) for no measurable gain."""
    return dataclasses.replace(machine_config(target), opt_level=0)


def _kernels(artifact, spec: PlanEntrySpec) -> tuple[list, list[str]]:
    """Each step's signature and packed function symbol."""
    signatures = [artifact.kernel(step.kernel) for step in spec.steps]
    symbols = [artifact.metadata.get("symbols", {}).get(step.kernel, step.kernel) for step in spec.steps]
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
