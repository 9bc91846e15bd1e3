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


def _float_fmod(a, b):
    """C fmod: exact (no a / b rounding), NaN for x fmod 0 and inf fmod y, x for finite x fmod inf."""
    return n.Call(a.dtype, "fmod", (a, b))


def _floor_mod(a, b):
    if dtype_of(a.dtype).is_float:
        # numpy's npy_divmod: C fmod moved to the divisor's sign, and a zero result takes the
        # divisor's sign; -3 mod inf == inf and 1 mod -inf == -inf (a - floor(a / b) * b gives NaN)
        rest = _float_fmod(a, b)
        zero = const_like(0, a.dtype)
        moved = select(n.And(n.NE(rest, zero), n.NE(rest < zero, b < zero)), rest + b, rest)
        signed_zero = select(b < zero, const_like(-0.0, a.dtype), zero)
        return select(n.EQ(rest, zero), signed_zero, moved)
    return n.FloorMod(a, _safe_divisor(b)[0])  # x % 1 == 0: numpy's x % 0 and x % -1


def _fmod(a, b):
    if dtype_of(a.dtype).is_float:
        return _float_fmod(a, b)
    divisor = _safe_divisor(b)[0]
    return a - n.Div(a, divisor) * divisor  # 0 where b is 0 or -1, as numpy's fmod


# ---- bitwise ops and shifts ---------------------------------------------------------------
# tir's bit nodes need integer operands and shift amounts in [0, bits); numpy (the reference)
# defines every amount: a left shift by >= bits or by a negative amount gives 0, a right shift
# gives the sign fill (0 or -1). The amount is clamped into range and a select picks that result.

def _bitwise(node: type, logical: Callable) -> Callable:
    def apply(a, b):
        return logical(a, b) if dtype_of(a.dtype).is_bool else node(a, b)
    return apply


def _shift(node: type) -> Callable:
    def apply(a, b):
        bits = dtype_of(a.dtype).bits
        zero = const_like(0, b.dtype)
        out_of_range = n.Or(b >= const_like(bits, b.dtype), b < zero) if dtype_of(b.dtype).is_signed \
            else b >= const_like(bits, b.dtype)
        shifted = node(a, select(out_of_range, zero, b))
        if node is n.ShiftLeft or not dtype_of(a.dtype).is_signed:
            overflow = const_like(0, a.dtype)
        else:
            overflow = select(a < const_like(0, a.dtype), const_like(-1, a.dtype), const_like(0, a.dtype))
        return select(out_of_range, overflow, shifted)
    return apply


BINARY_EXPRESSIONS: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "subtract": lambda a, b: a - b,
    "multiply": lambda a, b: a * b,
    "divide": _divide,
    "maximum": lambda a, b: te.max(a, b),
    "minimum": lambda a, b: te.min(a, b),
    "mod": _floor_mod,
    "fmod": _fmod,
    "bitwise_and": _bitwise(n.BitAnd, n.And),
    "bitwise_or": _bitwise(n.BitOr, n.Or),
    "bitwise_xor": _bitwise(n.BitXor, n.NE),
    "left_shift": _shift(n.ShiftLeft),
    "right_shift": _shift(n.ShiftRight),
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
