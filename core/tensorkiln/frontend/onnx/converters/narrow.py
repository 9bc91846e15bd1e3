"""narrow.py: graph expressions that convert to and from the narrow storage formats (ir/narrow_dtypes.py).

A narrow value lives in the graph as its carrier (uint8 bit patterns for the float formats, the value
in int8/uint8 for int4/uint4/int2/uint2), so these are plain graph ops every target already runs:

- decode (float format -> float32): a lookup of the bit pattern in the format's value table (`take`).
- encode (float -> float format), round to nearest even as ml_dtypes and onnx's reference do: the code of
  |x| is the number of midpoints between neighbouring values that |x| lies above, a tie going to the even
  code; then the sign bit, NaN, and overflow (saturated to the largest value, or inf/NaN with
  saturate=0). The count compares with every midpoint (127 for float8): fine for casts at a model's
  edges, not meant for a hot loop.
- float8_e8m0fnu (a bare exponent) encodes from the float32 bits, as onnx.numpy_helper.to_float8e8m0
  (round_mode "up", "down" or "nearest").
- int formats: from a float, truncation toward zero with an out-of-range value giving 0; from an integer,
  the low bits (two's complement wrap-around), both as ml_dtypes converts.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.dtypes import dtype_of
from ....ir.narrow_dtypes import NarrowFormat, float_code_table
from ..node import OnnxNode
from ._util import scalar

__all__ = ["decode", "encode", "convert"]


def decode(node: OnnxNode, carrier: Expr, fmt: NarrowFormat) -> Expr:
    """The values of `carrier` (format `fmt`) as float32 (a float format) or as the carrier (an int one)."""
    if not fmt.is_float:
        return carrier
    table = np.arange(1 << fmt.bits, dtype=np.uint8).view(fmt.numpy_dtype).astype(np.float32)
    return node.call("take", Constant(table), node.call("cast", carrier, dtype="int32"), axis=0)


def encode(node: OnnxNode, value: Expr, fmt: NarrowFormat, saturate: bool = True, round_mode: str = "up") -> Expr:
    """`value` (any float or integer dtype) converted to format `fmt`, as its carrier."""
    if not fmt.is_float:
        return _encode_int(node, value, fmt)
    source = dtype_of(value.dtype)
    if not source.is_float or source.kind == "bfloat" or source.bits == 16:
        value = node.call("cast", value, dtype="float32")   # exact for every float16/bfloat16 and small int
    if fmt.name == "float8_e8m0fnu":
        return _encode_e8m0(node, node.call("cast", value, dtype="float32"), saturate, round_mode)
    return _encode_float(node, value, fmt, saturate)


def convert(node: OnnxNode, value: Expr, source: NarrowFormat | None, target: NarrowFormat | str,
            saturate: bool = True, round_mode: str = "up") -> Expr:
    """Cast `value` (format `source`, or a plain dtype when None) to `target` (a format or a dtype)."""
    if source is not None:
        value = decode(node, value, source)
    if isinstance(target, NarrowFormat):
        return encode(node, value, target, saturate, round_mode)
    return node.call("cast", value, dtype=target)


def _encode_float(node: OnnxNode, value: Expr, fmt: NarrowFormat, saturate: bool) -> Expr:
    table = float_code_table(fmt.name)
    dtype = value.dtype
    magnitude = node.call("expand_dims", node.call("abs", value), axis=value.ndim)
    # a tie at midpoint i goes up when code i is odd, so that the even neighbour wins
    ties_up = table.codes % 2 == 1
    index = None
    for op, chosen in (("greater", ~ties_up), ("greater_equal", ties_up)):
        if not chosen.any():
            continue
        above = node.call(op, magnitude, Constant(table.midpoints[chosen].astype(dtype)))
        count = node.call("sum", node.call("cast", above, dtype="int32"), axis=(value.ndim,), keepdims=False)
        index = count if index is None else node.call("add", index, count)
    overflow = int(table.codes[-1]) if saturate else table.overflow
    codes = Constant(np.append(table.codes, overflow).astype(np.int32))
    code = node.call("take", codes, index, axis=0)
    negative = _sign_bit(node, value)
    signed = node.call("bitwise_or", code, scalar(table.sign, "int32"))
    if table.has_negative_zero:
        code = node.call("where", negative, signed, code)
    else:   # fnuz: no -0 (0x80 is NaN), so a negative value that rounds to 0 is +0
        is_nonzero = node.call("not_equal", code, scalar(0, "int32"))
        code = node.call("where", node.call("logical_and", negative, is_nonzero), signed, code)
    nan = node.call("where", negative, scalar(table.negative_nan, "int32"), scalar(table.nan, "int32"))
    code = node.call("where", node.call("isnan", value), nan, code)
    return node.call("cast", code, dtype="uint8")


def _sign_bit(node: OnnxNode, value: Expr) -> Expr:
    """True where the sign bit is set (-0.0 and -NaN included)."""
    bits = dtype_of(value.dtype).bits
    as_int = node.call("bitcast", value, dtype=f"int{bits}")
    return node.call("less", as_int, scalar(0, f"int{bits}"))


def _encode_e8m0(node: OnnxNode, value: Expr, saturate: bool, round_mode: str) -> Expr:
    """onnx.numpy_helper.to_float8e8m0 on the float32 bits: the exponent field, rounded by the mantissa."""
    if round_mode not in ("up", "down", "nearest"):
        raise node.unsupported(f"round_mode={round_mode!r}; use 'up', 'down' or 'nearest'")
    bits = node.call("bitcast", value, dtype="int32")

    def field(shift: int, mask: int) -> Expr:
        shifted = node.call("right_shift", bits, scalar(shift, "int32")) if shift else bits
        return node.call("bitwise_and", shifted, scalar(mask, "int32"))

    def is_set(mask: int) -> Expr:
        return node.call("not_equal", field(0, mask), scalar(0, "int32"))

    exponent = field(23, 0xFF)
    special = node.call("equal", exponent, scalar(0xFF, "int32"))
    if round_mode == "down":
        return node.call("cast", exponent, dtype="uint8")
    if round_mode == "up":
        round_up = is_set(0x7FFFFF)
    else:   # guard and (round or sticky or "lsb", which the reference takes as exponent > 0)
        lsb = node.call("greater", exponent, scalar(0, "int32"))
        rest = node.call("logical_or", node.call("logical_or", is_set(0x200000), is_set(0x1FFFFF)), lsb)
        round_up = node.call("logical_and", is_set(0x400000), rest)
    round_up = node.call("logical_and", round_up, node.call("logical_not", special))
    if saturate:
        at_max = node.call("equal", exponent, scalar(0xFE, "int32"))
        round_up = node.call("logical_and", round_up, node.call("logical_not", at_max))
    rounded = node.call("add", exponent, node.call("cast", round_up, dtype="int32"))
    return node.call("cast", rounded, dtype="uint8")


def _encode_int(node: OnnxNode, value: Expr, fmt: NarrowFormat) -> Expr:
    low, high = fmt.int_range
    source = dtype_of(value.dtype)
    if source.is_bool:
        return node.call("cast", value, dtype=fmt.carrier)
    if source.is_int:   # the low bits, read as the format (two's complement wrap-around)
        wide = node.call("cast", value, dtype="int32")
        wrapped = node.call("bitwise_and", node.call("subtract", wide, scalar(low, "int32")),
                            scalar((1 << fmt.bits) - 1, "int32"))
        return node.call("cast", node.call("add", wrapped, scalar(low, "int32")), dtype=fmt.carrier)
    if source.kind == "bfloat" or source.bits == 16:
        value = node.call("cast", value, dtype="float32")
    dtype = value.dtype
    zero = scalar(0, dtype)
    truncated = node.call("where", node.call("less", value, zero), node.call("ceil", value), node.call("floor", value))
    in_range = node.call("logical_and", node.call("greater_equal", truncated, scalar(low, dtype)),
                         node.call("less_equal", truncated, scalar(high, dtype)))
    # NaN fails both comparisons and becomes 0, as ml_dtypes converts it
    return node.call("cast", node.call("where", in_range, truncated, zero), dtype=fmt.carrier)
