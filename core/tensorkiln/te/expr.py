"""te/expr.py: tensor-expression nodes (IterVar, TensorRead, Reduce) and the math API.

te expressions are tir PrimExprs plus three nodes that only exist before lowering:
`IterVar` (a loop axis with its domain), `TensorRead` (`A[i, j]` on a te Tensor) and
`Reduce` (`te.sum(...)`). Math functions build `tir.Call(dtype, name, args)` with the
names listed in `MATH_FUNCTIONS`; a code emitter maps the names to its dialect.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, ClassVar, Sequence

from ..ir.dtypes import dtype_of
from ..ir.errors import DTypeError, ShapeError
from ..tir import nodes as n

__all__ = [
    "Range", "IterVar", "TensorRead", "Reduce", "CommReducer", "comm_reducer", "sum", "max", "min",
    "prod", "if_then_else", "const", "var", "cast", "exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid",
    "erf", "pow", "abs", "fabs", "floor", "ceil", "round", "min_value", "max_value", "MATH_FUNCTIONS",
    "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "exp2", "log2", "log10",
]

# Every name here is known to the tir interpreter, the C-source emitter base
# (sdk/c_source.py math_functions) and cpu_llvm (math_calls.MATH_NAMES). asinh, acosh,
# atanh, log1p and expm1 are left out until every one of those knows them.
MATH_FUNCTIONS = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "pow", "fabs", "floor",
                  "ceil", "round", "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh",
                  "exp2", "log2", "log10")


@dataclass(frozen=True)
class Range:
    """Half-open range [min, min + extent); extent may be a Var in intrinsic descriptions."""

    min: object
    extent: object


@dataclass(frozen=True, eq=False)
class IterVar(n.PrimExpr):
    """A loop axis: data (op.axis), reduce (reduce_axis), or thread (thread_axis).

    Usable inside index expressions (`A[i, k]`); lowering uses `var`.
    """

    name: str
    var: n.Var
    dom: Range | None
    kind: str = "data"          # "data" | "reduce" | "thread"
    thread_tag: str | None = None
    _opaque_fields: ClassVar[tuple[str, ...]] = ("name", "var", "dom", "kind", "thread_tag")

    @property
    def dtype(self) -> str:
        return self.var.dtype

    @property
    def is_reduce(self) -> bool:
        return self.kind == "reduce"

    def __str__(self) -> str:
        return f"iter_var({self.name}, {self.kind})"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class TensorRead(n.PrimExpr):
    """`tensor[indices]` in a te expression; lowering turns it into a Load."""

    tensor: object
    indices: tuple[n.PrimExpr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    def __str__(self) -> str:
        return f"{self.tensor.name}[{', '.join(str(i) for i in self.indices)}]"

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class CommReducer:
    """A commutative reduction: `combine(lhs, rhs)` and `identity(dtype)`."""

    name: str
    combine: Callable[[n.PrimExpr, n.PrimExpr], n.PrimExpr]
    identity: Callable[[str], n.PrimExpr]

    def __call__(self, expr, axis, where=None) -> "Reduce":
        axes = tuple(axis) if isinstance(axis, (list, tuple)) else (axis,)
        for a in axes:
            if not isinstance(a, IterVar) or a.kind != "reduce":
                raise ShapeError(f"te.{self.name}: axis {a} is not a reduce_axis; create it with te.reduce_axis((lo, hi), name)")
        expr = n.as_expr(expr, "float32")
        condition = None if where is None else n.as_expr(where, "bool")
        return Reduce(self, expr, axes, condition)


@dataclass(frozen=True, eq=False)
class Reduce(n.PrimExpr):
    """`combiner` over `axis` of `source`; must be the whole body of a compute."""

    combiner: CommReducer
    source: n.PrimExpr
    axis: tuple[IterVar, ...]
    condition: n.PrimExpr | None = None
    _opaque_fields: ClassVar[tuple[str, ...]] = ("combiner", "axis")

    @property
    def dtype(self) -> str:
        return self.source.dtype

    def __str__(self) -> str:
        axes = ", ".join(a.name for a in self.axis)
        return f"{self.combiner.name}({self.source}, axis=[{axes}])"

    __repr__ = __str__


def comm_reducer(combine: Callable, identity: Callable, name: str = "reduce") -> CommReducer:
    """Make a reducer: `mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0, t))`.

    Use it like te.sum: `mysum(A[i, k], axis=k)`. `identity` takes the dtype string.
    """
    def identity_expr(dtype):
        value = identity(dtype)
        return n.as_expr(value, dtype) if not isinstance(value, n.PrimExpr) else value
    return CommReducer(name, combine, identity_expr)


def min_value(dtype: str) -> n.PrimExpr:
    """The smallest value of dtype (-inf for floats)."""
    d = dtype_of(dtype)
    if d.is_float:
        return n.FloatImm(dtype, float("-inf"))
    if d.is_bool:
        return n.IntImm("bool", 0)
    return n.IntImm(dtype, -(1 << (d.bits - 1)) if d.is_signed else 0)


def max_value(dtype: str) -> n.PrimExpr:
    """The largest value of dtype (+inf for floats)."""
    d = dtype_of(dtype)
    if d.is_float:
        return n.FloatImm(dtype, float("inf"))
    if d.is_bool:
        return n.IntImm("bool", 1)
    return n.IntImm(dtype, (1 << (d.bits - 1)) - 1 if d.is_signed else (1 << d.bits) - 1)


sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")
prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
_max_reducer = comm_reducer(lambda x, y: n.Max(x, y), min_value, name="max")
_min_reducer = comm_reducer(lambda x, y: n.Min(x, y), max_value, name="min")


def _binary_or_reduce(reducer: CommReducer, node: type):
    def apply(a, b=None, axis=None, where=None):
        if axis is not None or (b is not None and isinstance(b, (IterVar, list, tuple))):
            return reducer(a, axis if axis is not None else b, where=where)
        if b is None:
            raise TypeError(f"te.{reducer.name} needs two operands or an axis=")
        a, b = _promote(a, b)
        return node(a, b)
    apply.__name__ = reducer.name
    apply.__doc__ = (f"te.{reducer.name}(a, b) elementwise, or te.{reducer.name}(expr, axis=k) "
                     "as a reduction.")
    return apply


max = _binary_or_reduce(_max_reducer, n.Max)
min = _binary_or_reduce(_min_reducer, n.Min)


def const(value, dtype: str | None = None) -> n.PrimExpr:
    """An immediate of dtype (default float32 for floats, int32 for ints)."""
    return n.const(value, dtype)


def var(name: str = "v", dtype: str = "int32") -> n.Var:
    """A symbolic scalar, e.g. a symbolic extent in a tensor intrinsic description."""
    return n.Var(name, dtype)


def cast(value, dtype: str) -> n.PrimExpr:
    dtype_of(dtype)
    value = n.as_expr(value, dtype)
    return value if value.dtype == dtype else n.Cast(dtype, value)


def _promote(a, b):
    a = n.as_expr(a, b.dtype if isinstance(b, n.PrimExpr) else "float32")
    b = n.as_expr(b, a.dtype)
    if a.dtype != b.dtype:
        da, db = dtype_of(a.dtype), dtype_of(b.dtype)
        if da.is_float and not db.is_float:
            b = n.Cast(a.dtype, b)
        elif db.is_float and not da.is_float:
            a = n.Cast(b.dtype, a)
        elif da.bits >= db.bits:
            b = n.Cast(a.dtype, b)
        else:
            a = n.Cast(b.dtype, a)
    return a, b


def if_then_else(condition, true_value, false_value) -> n.PrimExpr:
    """`condition ? true_value : false_value`: reads in a branch happen only where it is taken.

    Lowered to tir.Select, which may evaluate both sides; reads in a branch that may be
    out of bounds become Loads predicated on the branch's condition, so padded reads
    (`te.if_then_else(i >= 1, A[i - 1], 0.0)`) are safe and still vectorize.
    """
    condition = n.as_expr(condition, "bool")
    if not dtype_of(condition.dtype).is_bool:
        condition = n.NE(condition, n.as_expr(0, condition.dtype))
    t, f = _promote(true_value, false_value)
    return n.Select(condition, t, f)


def _float_call(name: str, *args) -> n.PrimExpr:
    exprs = [n.as_expr(a, "float32") for a in args]
    dtype = exprs[0].dtype
    if not dtype_of(dtype).is_float:
        raise DTypeError(f"te.{name} needs a float argument, got {dtype} ({exprs[0]}); cast it with .astype('float32')")
    exprs = [e if e.dtype == dtype else cast(e, dtype) for e in exprs]
    return n.Call(dtype, name, tuple(exprs))


def exp(x): return _float_call("exp", x)
def log(x): return _float_call("log", x)
def sqrt(x): return _float_call("sqrt", x)
def rsqrt(x): return _float_call("rsqrt", x)
def tanh(x): return _float_call("tanh", x)
def sigmoid(x): return _float_call("sigmoid", x)
def erf(x): return _float_call("erf", x)
def pow(x, y): return _float_call("pow", x, y)
def floor(x): return _float_call("floor", x)
def ceil(x): return _float_call("ceil", x)
def sin(x): return _float_call("sin", x)
def cos(x): return _float_call("cos", x)
def tan(x): return _float_call("tan", x)
def asin(x): return _float_call("asin", x)
def acos(x): return _float_call("acos", x)
def atan(x): return _float_call("atan", x)
def sinh(x): return _float_call("sinh", x)
def cosh(x): return _float_call("cosh", x)
def exp2(x): return _float_call("exp2", x)
def log2(x): return _float_call("log2", x)
def log10(x): return _float_call("log10", x)


def round(x):
    """Round to the nearest integer, ties to even: round(0.5) == 0, round(1.5) == 2, round(-2.5) == -2.

    The same as numpy.round / numpy.rint and ONNX Round (C `rint` in the default rounding
    mode, LLVM `llvm.roundeven`), not C `round`, which rounds ties away from zero.
    """
    return _float_call("round", x)


def fabs(x): return _float_call("fabs", x)


def abs(x):
    """|x|: tir.Call("fabs") for floats, a Select for integers."""
    x = n.as_expr(x, "float32")
    if dtype_of(x.dtype).is_float:
        return fabs(x)
    return n.Select(n.LT(x, n.as_expr(0, x.dtype)), n.Sub(n.as_expr(0, x.dtype), x), x)


for _f in (exp, log, sqrt, rsqrt, tanh, sigmoid, erf, pow, floor, ceil, fabs, sin, cos, tan, asin, acos, atan,
           sinh, cosh, exp2, log2, log10):
    _f.__doc__ = f"te.{_f.__name__}: tir.Call(dtype, {_f.__name__!r}, args) on float operands."
del _f


def flatten_indices(indices: Sequence) -> tuple:
    if len(indices) == 1 and isinstance(indices[0], (tuple, list)):
        indices = indices[0]
    return tuple(indices)
