"""abi.py: The packed entry point of each kernel, per `tensorkiln.sdk.native`.

`int32_t NAME(TKArg* args, int32_t nargs)` checks the argument count, then every
argument's dtype, ndim, data pointer, shape and strides, and only then unpacks
them and calls `NAME.impl(buffer pointers..., scalars...)`, which holds the body.
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


def _unpack_buffer(builder: ir.IRBuilder, argument: ir.Value, index: int, buffer: tir.Buffer) -> ir.Value:
    shape = _static_shape(buffer)
    _check_dtype(builder, argument, index, buffer.dtype)
    _fail_if(builder, builder.icmp_signed("!=", _field(builder, argument, _NDIM), I32(len(shape))),
             encode_error(index, FIELD_NDIM))
    data = _field(builder, argument, _DATA)
    _fail_if(builder, builder.icmp_unsigned("==", data, ir.Constant(PTR, None)), encode_error(index, FIELD_DATA))
    shape_pointer = _field(builder, argument, _SHAPE)
    for dim, extent in enumerate(shape):
        actual = builder.load(builder.gep(shape_pointer, [I64(dim)], inbounds=True))
        _fail_if(builder, builder.icmp_signed("!=", actual, I64(extent)), encode_error(index, FIELD_SHAPE, dim))
    strides_pointer = _field(builder, argument, _STRIDES)
    has_strides = builder.icmp_unsigned("!=", strides_pointer, ir.Constant(strides_pointer.type, None))
    with builder.if_then(has_strides, likely=False):
        expected = 1
        for dim in reversed(range(len(shape))):
            actual = builder.load(builder.gep(strides_pointer, [I64(dim)], inbounds=True))
            # a dimension of extent 1 may carry any stride
            wrong = builder.icmp_signed("!=", actual, I64(expected))
            if shape[dim] == 1:
                wrong = ir.Constant(ir.IntType(1), 0)
            _fail_if(builder, wrong, encode_error(index, FIELD_STRIDES))
            expected *= shape[dim]
    return builder.bitcast(data, memory_type(buffer.dtype).as_pointer())


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

