"""plan_entry.py: cpu_llvm's whole-plan entry: one LLVM function that calls every kernel of a plan in order.

`build_plan_entry(module, spec)` (what `JITModule.build_plan_entry` returns; the contract is
tensorkiln.sdk.plan_entry) emits, for the kernels already loaded in `module`::

    int32_t tensorkiln_plan_run(void** inputs, void** constants, uint8_t* arena) {
      TKArg args[MAX_ARGS];                   // on the stack: concurrent runs share nothing
      memcpy(args, step0_template, ...);      // dtype, ndim and shape of every argument: constants
      args[0].data = inputs[0]; args[1].data = arena + 4096; ...
      if ((code = fused_conv2d_relu(args, 2))) return (1 << 16) | code;
      ...
      return 0;
    }

It calls each kernel's packed function (abi.py), whose argument checks cost a few loads per
argument, at the address the kernel has in `module`'s engine; the entry is compiled into an
engine of its own (the addresses belong to this process, so the entry is never cached on disk).
Parallel loops stay inside the kernels (libgomp, `tensorkiln_num_threads`).
"""
from __future__ import annotations

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk.native import dtype_fields
from tensorkiln.sdk.plan_entry import PlanEntry, PlanEntrySpec, encode_step_error

from .abi import TKARG_TYPE
from .cgutils import I8, I32, I64, PTR
from .host import machine_config, new_target_machine

__all__ = ["build_plan_entry", "ENTRY_SYMBOL"]

ENTRY_SYMBOL = "tensorkiln_plan_run"
_TKARG_BYTES = 40
_PACKED_TYPE = ir.FunctionType(I32, [TKARG_TYPE.as_pointer(), I32])


def _constant_global(module: ir.Module, name: str, value: ir.Constant) -> ir.GlobalVariable:
    variable = ir.GlobalVariable(module, value.type, name)
    variable.initializer = value
    variable.global_constant = True
    variable.linkage = "internal"
    return variable


def _template(module: ir.Module, index: int, signature) -> ir.GlobalVariable:
    """The TKArg array of step `index` with every field but `data` filled in."""
    slots = []
    for position, param in enumerate(signature.params):
        extents = list(param.shape) or [0]
        shape = _constant_global(module, f"shape.{index}.{position}",
                                 ir.Constant(ir.ArrayType(I64, len(extents)), extents))
        code, bits, lanes = dtype_fields(param.dtype)
        slots.append(ir.Constant(TKARG_TYPE, [
            ir.Constant(PTR, None), shape.bitcast(I64.as_pointer()), ir.Constant(I64.as_pointer(), None),
            I32(len(param.shape)), I8(code), I8(bits), ir.IntType(16)(lanes), I64(0)]))
    return _constant_global(module, f"args.{index}",
                            ir.Constant(ir.ArrayType(TKARG_TYPE, len(slots)), slots))


def _emit(spec: PlanEntrySpec, signatures: list, addresses: list[int]) -> str:
    module = ir.Module(name="tensorkiln_plan")
    function = ir.Function(module, ir.FunctionType(I32, [PTR.as_pointer(), PTR.as_pointer(), PTR]), ENTRY_SYMBOL)
    inputs, constants, arena = function.args
    inputs.name, constants.name, arena.name = "inputs", "constants", "arena"
    memcpy = module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    widest = max(len(step.args) for step in spec.steps)
    args = builder.alloca(TKARG_TYPE, I32(widest), name="args")
    for index, (step, signature, address) in enumerate(zip(spec.steps, signatures, addresses)):
        template = _template(module, index, signature)
        builder.call(memcpy, [builder.bitcast(args, PTR), builder.bitcast(template, PTR),
                              I64(_TKARG_BYTES * len(step.args)), ir.IntType(1)(0)])
        for position, slot in enumerate(step.args):
            if slot.kind == "arena":
                data = builder.gep(arena, [I64(slot.index)], inbounds=True)
            else:
                table = inputs if slot.kind == "input" else constants
                data = builder.load(builder.gep(table, [I64(slot.index)], inbounds=True))
            field = builder.gep(args, [I64(position), I32(0)], inbounds=True)
            builder.store(data, field)
        kernel = builder.inttoptr(I64(address), _PACKED_TYPE.as_pointer(), name=f"kernel.{index}")
        code = builder.call(kernel, [args, I32(len(step.args))])
        failed = builder.icmp_signed("!=", code, I32(0))
        with builder.if_then(failed, likely=False):
            step_code = builder.or_(builder.and_(code, I32(0xFFFF)), I32(encode_step_error(index, 0)))
            builder.ret(step_code)
    builder.ret(I32(0))
    return str(module)


def build_plan_entry(loaded, spec: PlanEntrySpec) -> PlanEntry:
    """Compile the entry of `spec` against the kernels of `loaded` (a JITModule) and return it."""
    artifact = loaded.artifact
    signatures, addresses = [], []
    for step in spec.steps:
        signatures.append(artifact.kernel(step.kernel))
        symbol = artifact.metadata.get("symbols", {}).get(step.kernel, step.kernel)
        address = loaded.engine.get_function_address(symbol)
        if not address:
            raise CompileError(f"cpu_llvm plan entry: kernel {step.kernel!r} (symbol {symbol!r}) is not in the "
                               "loaded module")
        addresses.append(address)
    text = _emit(spec, signatures, addresses)
    try:
        parsed = llvm.parse_assembly(text)
        parsed.verify()
    except RuntimeError as error:
        raise CompileError(f"cpu_llvm plan entry: LLVM rejected the entry: {error}") from None
    config = machine_config(loaded.target)
    engine = llvm.create_mcjit_compiler(parsed, new_target_machine(config))
    engine.finalize_object()
    address = engine.get_function_address(ENTRY_SYMBOL)
    return PlanEntry(spec, address, (engine, loaded), artifact.kernel)
