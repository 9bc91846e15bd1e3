"""abi.py: The packed entry point of each kernel, per `tensorkiln.sdk.native`.

`int32_t NAME(TKArg* args, int32_t nargs)` checks the argument count, then every
argument's dtype, ndim, data pointer, shape and strides, and only then unpacks
them and calls `NAME.impl(buffer pointers..., scalars...)`, which holds the body.

A buffer argument is checked by one shared function per module, `tk_check_buffer`, against
a constant table of its expected extents: written out inline per dimension, the checks were
60% of a model's unoptimised IR (densenet121) and a fifth of its LLVM time.
"""
from __future__ import annotations

import llvmlite.ir as ir

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.sdk.native import (
    ERROR_NARGS, FIELD_DATA, FIELD_DTYPE, FIELD_NDIM, FIELD_SHAPE, FIELD_STRIDES, dtype_fields, encode_error,
)

from .cgutils import I8, I32, I64, PTR, memory_type, value_type

__all__ = ["TKARG_TYPE", "impl_function", "emit_packed_function"]

# {data, shape, strides, ndim, dtype_code, dtype_bits, dtype_lanes, value}: 40 bytes, as TKArg in native.py
TKARG_TYPE = ir.LiteralStructType([PTR, I64.as_pointer(), I64.as_pointer(), I32, I8, I8, ir.IntType(16), I64])
_DATA, _SHAPE, _STRIDES, _NDIM, _CODE, _BITS, _LANES, _VALUE = range(8)


def _param_type(param) -> ir.Type:
    if isinstance(param, tir.Buffer):
        return memory_type(param.dtype).as_pointer()
    return value_type(param.dtype)


def impl_function(module: ir.Module, func: tir.PrimFunc) -> ir.Function:
    """Declare `NAME.impl(params...)`: buffers as noalias pointers, scalars by value."""
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [_param_type(p) for p in func.params]),
                           f"{func.name}.impl")
    function.linkage = "internal"
    function.attributes.add("nounwind")
    # Inlined into its one caller (the packed entry) before LLVM's pipeline runs, not after the pipeline
    # has optimised it on its own: each kernel's code goes through the pipeline once. Its noalias
    # parameters become alias scopes in the caller. A third less optimisation time per chunk (densenet121).
    function.attributes.add("alwaysinline")
    for argument, param in zip(function.args, func.params):
        argument.name = param.name
        if isinstance(param, tir.Buffer):
            # kernels never receive overlapping buffers (the runtime passes distinct arrays)
            argument.add_attribute("noalias")
    return function


def _field(builder: ir.IRBuilder, argument: ir.Value, field: int) -> ir.Value:
    return builder.load(builder.gep(argument, [I32(0), I32(field)], inbounds=True))


def _fail_if(builder: ir.IRBuilder, condition: ir.Value, code: int) -> None:
    with builder.if_then(condition, likely=False):
        builder.ret(I32(code))


def _check_dtype(builder: ir.IRBuilder, argument: ir.Value, index: int, dtype: str) -> None:
    code, bits, lanes = dtype_fields(dtype)
    wrong = builder.or_(builder.icmp_unsigned("!=", _field(builder, argument, _CODE), I8(code)),
                        builder.icmp_unsigned("!=", _field(builder, argument, _BITS), I8(bits)))
    wrong = builder.or_(wrong, builder.icmp_unsigned("!=", _field(builder, argument, _LANES), ir.IntType(16)(lanes)))
    _fail_if(builder, wrong, encode_error(index, FIELD_DTYPE))


def _static_shape(buffer: tir.Buffer) -> list[int]:
    return [dim.value for dim in buffer.shape]  # signature_of already refused symbolic shapes


CHECK_BUFFER_SYMBOL = "tk_check_buffer"


def _shape_table(module: ir.Module, shape: list[int]) -> ir.Value:
    """A private constant `[ndim x i64]` holding `shape`, one per distinct shape in the module."""
    name = "tk_shape." + "x".join(map(str, shape)) if shape else "tk_shape.scalar"
    if name in module.globals:
        return module.globals[name]
    table_type = ir.ArrayType(I64, max(len(shape), 1))
    table = ir.GlobalVariable(module, table_type, name)
    table.initializer = ir.Constant(table_type, [I64(extent) for extent in shape or [0]])
    table.global_constant = True
    table.linkage = "private"
    table.unnamed_addr = True
    return table


def _check_buffer_function(module: ir.Module) -> ir.Function:
    """`i32 tk_check_buffer(TKArg* arg, i32 index, i32 ndim, i32 code, i32 bits, i32 lanes, i64* shape)`.

    Returns 0 or the error code of the first wrong field, in the order and with the codes of
    `tensorkiln.sdk.native`: dtype, ndim, data pointer, each extent, then (when strides are
    given) each stride from the innermost out, where an extent-1 dimension may carry any stride.
    """
    if CHECK_BUFFER_SYMBOL in module.globals:
        return module.globals[CHECK_BUFFER_SYMBOL]
    function = ir.Function(module, ir.FunctionType(I32, [TKARG_TYPE.as_pointer(), I32, I32, I32, I32, I32,
                                                         I64.as_pointer()]), CHECK_BUFFER_SYMBOL)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")     # one copy for every kernel: this is what keeps the IR small
    argument, index, ndim, code, bits, lanes, shape = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    error_base = builder.shl(builder.add(index, I32(1)), I32(8))

    def fail_if(condition: ir.Value, field: ir.Value) -> None:
        with builder.if_then(condition, likely=False):
            builder.ret(builder.or_(error_base, field))

    wrong = builder.or_(builder.icmp_unsigned("!=", builder.zext(_field(builder, argument, _CODE), I32), code),
                        builder.icmp_unsigned("!=", builder.zext(_field(builder, argument, _BITS), I32), bits))
    wrong = builder.or_(wrong, builder.icmp_unsigned("!=", builder.zext(_field(builder, argument, _LANES), I32),
                                                     lanes))
    fail_if(wrong, I32(FIELD_DTYPE))
    fail_if(builder.icmp_signed("!=", _field(builder, argument, _NDIM), ndim), I32(FIELD_NDIM))
    fail_if(builder.icmp_unsigned("==", _field(builder, argument, _DATA), ir.Constant(PTR, None)), I32(FIELD_DATA))
    actual_shape = _field(builder, argument, _SHAPE)
    rank = builder.sext(ndim, I64)

    # for (d = 0; d < ndim; d++) if (arg->shape[d] != shape[d]) return error(FIELD_SHAPE + d)
    header, body, done = (function.append_basic_block(n) for n in ("shape.loop", "shape.body", "shape.done"))
    entry = builder.block
    builder.branch(header)
    builder.position_at_end(header)
    dim = builder.phi(I64, "dim")
    dim.add_incoming(I64(0), entry)
    builder.cbranch(builder.icmp_signed("<", dim, rank), body, done)
    builder.position_at_end(body)
    actual = builder.load(builder.gep(actual_shape, [dim], inbounds=True))
    expected = builder.load(builder.gep(shape, [dim], inbounds=True))
    fail_if(builder.icmp_signed("!=", actual, expected), builder.add(I32(FIELD_SHAPE), builder.trunc(dim, I32)))
    dim.add_incoming(builder.add(dim, I64(1)), builder.block)
    builder.branch(header)
    builder.position_at_end(done)

    strides = _field(builder, argument, _STRIDES)
    with builder.if_then(builder.icmp_unsigned("==", strides, ir.Constant(strides.type, None)), likely=True):
        builder.ret(I32(0))
    # for (d = ndim - 1, step = 1; d >= 0; step *= shape[d--]) if (shape[d] != 1 && strides[d] != step) error
    header, body, done = (function.append_basic_block(n) for n in ("stride.loop", "stride.body", "stride.done"))
    innermost = builder.sub(rank, I64(1))
    entry = builder.block
    builder.branch(header)
    builder.position_at_end(header)
    dim = builder.phi(I64, "dim")
    step = builder.phi(I64, "step")
    dim.add_incoming(innermost, entry)
    step.add_incoming(I64(1), entry)
    builder.cbranch(builder.icmp_signed(">=", dim, I64(0)), body, done)
    builder.position_at_end(body)
    extent = builder.load(builder.gep(shape, [dim], inbounds=True))
    stride = builder.load(builder.gep(strides, [dim], inbounds=True))
    wrong = builder.and_(builder.icmp_signed("!=", extent, I64(1)), builder.icmp_signed("!=", stride, step))
    fail_if(wrong, I32(FIELD_STRIDES))
    dim.add_incoming(builder.sub(dim, I64(1)), builder.block)
    step.add_incoming(builder.mul(step, extent), builder.block)
    builder.branch(header)
    builder.position_at_end(done)
    builder.ret(I32(0))
    return function


def _unpack_buffer(builder: ir.IRBuilder, argument: ir.Value, index: int, buffer: tir.Buffer) -> ir.Value:
    module = builder.module
    shape = _static_shape(buffer)
    table = _shape_table(module, shape)
    code, bits, lanes = dtype_fields(buffer.dtype)
    status = builder.call(_check_buffer_function(module),
                          [argument, I32(index), I32(len(shape)), I32(code), I32(bits), I32(lanes),
                           builder.gep(table, [I32(0), I32(0)], inbounds=True)])
    with builder.if_then(builder.icmp_signed("!=", status, I32(0)), likely=False):
        builder.ret(status)
    return builder.bitcast(_field(builder, argument, _DATA), memory_type(buffer.dtype).as_pointer())


def _unpack_scalar(builder: ir.IRBuilder, argument: ir.Value, index: int, var: tir.Var) -> ir.Value:
    _check_dtype(builder, argument, index, var.dtype)
    _fail_if(builder, builder.icmp_signed("!=", _field(builder, argument, _NDIM), I32(0)),
             encode_error(index, FIELD_NDIM))
    raw = _field(builder, argument, _VALUE)
    parsed = dtype_of(var.dtype)
    target_type = value_type(var.dtype)
    if parsed.is_float:
        as_double = builder.bitcast(raw, ir.DoubleType())
        return as_double if parsed.bits == 64 else builder.fptrunc(as_double, target_type)
    if parsed.is_bool:
        return builder.icmp_signed("!=", raw, I64(0))
    return raw if parsed.bits == 64 else builder.trunc(raw, target_type)


def emit_packed_function(module: ir.Module, func: tir.PrimFunc, impl: ir.Function, symbol: str) -> ir.Function:
    """Define the exported `int32_t symbol(TKArg*, int32_t)` that checks and unpacks, then calls `impl`."""
    function = ir.Function(module, ir.FunctionType(I32, [TKARG_TYPE.as_pointer(), I32]), symbol)
    function.visibility = "protected"
    args, nargs = function.args
    args.name, nargs.name = "args", "nargs"
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    _fail_if(builder, builder.icmp_signed("!=", nargs, I32(len(func.params))), ERROR_NARGS)
    values = []
    for index, param in enumerate(func.params):
        argument = builder.gep(args, [I64(index)], inbounds=True)
        if isinstance(param, tir.Buffer):
            values.append(_unpack_buffer(builder, argument, index, param))
        else:
            values.append(_unpack_scalar(builder, argument, index, param))
    builder.call(impl, values)
    builder.ret(I32(0))
    return function

