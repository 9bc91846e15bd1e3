"""ops/broadcast.py: binary arithmetic, comparisons, logic, where, bias_add and broadcast_to
with numpy broadcasting (tag "broadcast").

Broadcasting is generic: each input is read at `broadcast_indices(out_index, in_shape,
out_shape)`, so any pair of shapes the graph type rule accepts works.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .. import te
from ..ir.dtypes import dtype_of
from ..tir import nodes as n
from . import tags
from ._common import broadcast_indices, const_like, name_of, normalize_axis, select

__all__ = ["broadcast_compute", "binary_compute", "BINARY_EXPRESSIONS", "where", "bias_add", "broadcast_to",
           "power"]


def broadcast_compute(inputs: Sequence[te.Tensor], body: Callable, out_shape: Sequence[int], name: str,
                      tag: str = tags.BROADCAST) -> te.Tensor:
    """`out[i] = body(*(t[broadcast(i)] for t in inputs))` over `out_shape`."""
    out_shape = tuple(out_shape)

    def value(*index):
        return body(*(t[broadcast_indices(index, t.shape, out_shape)] for t in inputs))
    return te.compute(out_shape, value, name=name, tag=tag)


# ---- integer division without traps ------------------------------------------------------
# A machine division by 0, and INT_MIN / -1, trap (SIGFPE on x86) or are undefined in C.
# Generated code has no error channel per element, so integer divide/mod/fmod give numpy's
# documented results instead: x / 0 == x % 0 == fmod(x, 0) == 0, and INT_MIN / -1 == INT_MIN
# (wraparound), x % -1 == 0. The divisor is replaced by 1 where it is 0 or -1 (signed), so
# the division instruction never sees a trapping operand, and a select picks the result.

def _safe_divisor(b):
    """(divisor that never traps, b == 0, b == -1 or None for unsigned) for integer `b`."""
    zero, one = const_like(0, b.dtype), const_like(1, b.dtype)
    is_zero = n.EQ(b, zero)
    if not dtype_of(b.dtype).is_signed:
        return select(is_zero, one, b), is_zero, None
    is_minus_one = n.EQ(b, const_like(-1, b.dtype))
    return select(n.Or(is_zero, is_minus_one), one, b), is_zero, is_minus_one


def _divide(a, b):
    if dtype_of(a.dtype).is_float or dtype_of(a.dtype).is_bool:
        return a / b
    divisor, is_zero, is_minus_one = _safe_divisor(b)
    quotient = n.Div(a, divisor)  # tir.Div truncates integers toward zero, as C and ONNX do
    if is_minus_one is not None:
        quotient = select(is_minus_one, const_like(0, a.dtype) - a, quotient)  # wraps for INT_MIN
    return select(is_zero, const_like(0, a.dtype), quotient)


def _floor_mod(a, b):
    if dtype_of(a.dtype).is_float:
        return a - te.floor(a / b) * b
    return n.FloorMod(a, _safe_divisor(b)[0])  # x % 1 == 0: numpy's x % 0 and x % -1


def _trunc(value):
    return select(value < 0.0, te.ceil(value), te.floor(value))


def _fmod(a, b):
    if dtype_of(a.dtype).is_float:
        return a - _trunc(a / b) * b
    divisor = _safe_divisor(b)[0]
    return a - n.Div(a, divisor) * divisor  # 0 where b is 0 or -1, as numpy's fmod


# ---- bitwise ops from integer arithmetic -------------------------------------------------
# tir has no bitwise nodes (reported to the tir owner: BitAnd/BitOr/BitXor/Shl/Shr); until
# then each bit is extracted with floor division, which gives two's-complement bits for
# negative values too, and the result is summed back with the bit weights. The arithmetic
# runs in a wider signed type and is cast back, which wraps exactly like the bit operation.

def _wide(dtype: str) -> str:
    return "int64" if dtype_of(dtype).bits >= 32 else "int32"


def _bit(value, k: int, bits: int, signed: bool):
    if signed and k == bits - 1:
        return select(value < 0, const_like(1, value.dtype), const_like(0, value.dtype))
    return n.FloorMod(n.FloorDiv(value, const_like(1 << k, value.dtype)), const_like(2, value.dtype))


def _bitwise(combine: Callable) -> Callable:
    def apply(a, b):
        parsed = dtype_of(a.dtype)
        if parsed.is_bool:
            return combine(a, b, boolean=True)
        wide = _wide(a.dtype)
        a, b = te.cast(a, wide), te.cast(b, wide)
        total = const_like(0, wide)
        for k in range(parsed.bits):
            weight = -(1 << k) if parsed.is_signed and k == parsed.bits - 1 else 1 << k
            bit = combine(_bit(a, k, parsed.bits, parsed.is_signed), _bit(b, k, parsed.bits, parsed.is_signed))
            total = total + bit * const_like(weight, wide)
        return te.cast(total, parsed.element)
    return apply


def _bit_and(x, y, boolean=False):
    return n.And(x, y) if boolean else x * y


def _bit_or(x, y, boolean=False):
    return n.Or(x, y) if boolean else x + y - x * y


def _bit_xor(x, y, boolean=False):
    return n.NE(x, y) if boolean else (x + y) % 2


def _power_of_two(amount, dtype: str, bits: int):
    """2**amount for 0 <= amount < bits - 1, as a select chain (no integer pow in tir)."""
    result = const_like(0, dtype)
    for k in reversed(range(bits - 1)):
        result = select(amount.equal(const_like(k, amount.dtype)), const_like(1 << k, dtype), result)
    return result


def _left_shift(a, b):
    dtype, bits = a.dtype, dtype_of(a.dtype).bits
    wide = _wide(dtype)
    a, b = te.cast(a, wide), te.cast(b, wide)
    # 2**(bits-1) may not fit `wide` (int64): shift by bits-2 and double
    top = a * const_like(1 << (bits - 2), wide) * const_like(2, wide)
    shifted = select(b.equal(const_like(bits - 1, wide)), top, a * _power_of_two(b, wide, bits))
    # numpy semantics: a shift by >= the width, or by a negative amount, gives 0
    out_of_range = n.Or(b >= const_like(bits, wide), b < const_like(0, wide))
    return te.cast(select(out_of_range, const_like(0, wide), shifted), dtype)


def _right_shift(a, b):
    dtype, bits = a.dtype, dtype_of(a.dtype).bits
    wide = _wide(dtype)
    a, b = te.cast(a, wide), te.cast(b, wide)
    sign_fill = select(a < 0, const_like(-1, wide), const_like(0, wide))
    shifted = n.FloorDiv(a, te.max(_power_of_two(b, wide, bits), const_like(1, wide)))
    # numpy semantics: a shift by >= width - 1, or by a negative amount, leaves only the sign
    saturated = n.Or(b >= const_like(bits - 1, wide), b < const_like(0, wide))
    return te.cast(select(saturated, sign_fill, shifted), dtype)


BINARY_EXPRESSIONS: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": _divide,
    "maximum": lambda a, b: te.max(a, b),
    "minimum": lambda a, b: te.min(a, b),
    "mod": _floor_mod,
    "fmod": _fmod,
    "bitwise_and": _bitwise(_bit_and),
    "bitwise_or": _bitwise(_bit_or),
    "bitwise_xor": _bitwise(_bit_xor),
    "left_shift": _left_shift,
    "right_shift": _right_shift,
    "nn.prelu": lambda x, slope: select(x < const_like(0, x.dtype), x * slope, x),
    "equal": lambda a, b: n.EQ(a, b),
    "not_equal": lambda a, b: n.NE(a, b),
    "less": lambda a, b: n.LT(a, b),
    "less_equal": lambda a, b: n.LE(a, b),
    "greater": lambda a, b: n.GT(a, b),
    "greater_equal": lambda a, b: n.GE(a, b),
    "logical_and": lambda a, b: n.And(a, b),
    "logical_or": lambda a, b: n.Or(a, b),
    "logical_xor": lambda a, b: n.NE(a, b),
}
"""Graph op name -> `(lhs_expr, rhs_expr) -> expr` for the broadcasting binary ops."""


def binary_compute(op_name: str) -> Callable:
    """The registry compute of the broadcasting binary op `op_name`."""
    body = BINARY_EXPRESSIONS[op_name]

    def compute(inputs, attrs, out_type):
        return broadcast_compute(inputs, body, out_type.shape, name_of(op_name))
    compute.__name__ = f"compute_{name_of(op_name)[2:]}"
    compute.__doc__ = f"te compute of {op_name}: numpy broadcasting, tag 'broadcast'."
    return compute


def power(inputs, attrs, out_type):
    """x ** y in x's dtype; integer powers go through float64 (exact for the results int64 holds)."""
    dtype = out_type.dtype

    def body(a, b):
        if dtype_of(dtype).is_float:
            return te.pow(a, te.cast(b, dtype))
        return te.cast(te.round(te.pow(te.cast(a, "float64"), te.cast(b, "float64"))), dtype)
    return broadcast_compute(inputs, body, out_type.shape, "T_power")


def where(inputs, attrs, out_type):
    """where(condition, x, y) with three-way broadcasting."""
    return broadcast_compute(inputs, lambda c, a, b: n.Select(c, a, b), out_type.shape, "T_where")


def bias_add(inputs, attrs, out_type):
    """data + bias along `axis` (bias has one entry per channel)."""
    data, bias = inputs
    axis = normalize_axis(attrs.axis, data.ndim)
    return te.compute(data.shape, lambda *i: data[i] + bias[i[axis]], name="T_bias_add", tag=tags.BROADCAST)


def broadcast_to(inputs, attrs, out_type):
    """Read the input at the broadcast index of every output element."""
    (data,) = inputs
    return broadcast_compute([data], lambda v: v, out_type.shape, "T_broadcast_to")
