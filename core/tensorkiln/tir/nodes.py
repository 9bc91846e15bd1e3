"""Loop IR nodes: expressions, statements, buffers and PrimFunc.

Every node is a small frozen dataclass. Nodes compare by identity (`eq=False`);
`tensorkiln.tir.structural_equal` compares structure. Variables and buffers are
identified by object identity, never by name, so two loops named `i` never clash.

Indices into buffers are *flat* element offsets: lowering (te/schedule_ops.py)
emits them row-major, so codegen sees `Load(buf, index)` with one integer (or Ramp)
index. Vector values carry dtypes like "float32x8".
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import ClassVar, Union

from ..ir.dtypes import dtype_of, to_python, with_lanes
from ..ir.errors import CompileError

__all__ = [
    "PrimExpr", "IntImm", "FloatImm", "StringImm", "Var", "BinaryOp", "Add", "Sub", "Mul", "Div",
    "FloorDiv", "FloorMod", "Min", "Max", "BitAnd", "BitOr", "BitXor", "ShiftLeft", "ShiftRight",
    "BITWISE_OPS", "CompareOp", "EQ", "NE", "LT", "LE", "GT", "GE", "And", "Or",
    "Not", "Select", "Cast", "Reinterpret", "Load", "Ramp", "Broadcast", "Call", "BufferPointer", "Buffer",
    "Stmt", "Store", "ForKind", "For", "SeqStmt", "IfThenElse", "Allocate", "LetStmt", "Evaluate",
    "Barrier", "CommCombiner", "ThreadAllReduce", "PrimFunc", "const", "as_expr", "NO_OP", "TENSOR_INTRINSICS_ATTR",
    "PREFETCH_CALL",
]


class PrimExpr:
    """Base of scalar/vector expressions. Subclasses define `dtype`."""

    __slots__ = ()
    dtype: str

    @property
    def lanes(self) -> int:
        return dtype_of(self.dtype).lanes

    # Operator sugar so te lambdas and passes can write `i * 4 + j`.
    def __add__(self, other): return Add(self, as_expr(other, self.dtype))
    def __radd__(self, other): return Add(as_expr(other, self.dtype), self)
    def __sub__(self, other): return Sub(self, as_expr(other, self.dtype))
    def __rsub__(self, other): return Sub(as_expr(other, self.dtype), self)
    def __mul__(self, other): return Mul(self, as_expr(other, self.dtype))
    def __rmul__(self, other): return Mul(as_expr(other, self.dtype), self)
    def __truediv__(self, other): return Div(self, as_expr(other, self.dtype))
    def __rtruediv__(self, other): return Div(as_expr(other, self.dtype), self)
    def __floordiv__(self, other): return FloorDiv(self, as_expr(other, self.dtype))
    def __mod__(self, other): return FloorMod(self, as_expr(other, self.dtype))
    def __neg__(self): return Sub(as_expr(0, self.dtype), self)
    def __lt__(self, other): return LT(self, as_expr(other, self.dtype))
    def __le__(self, other): return LE(self, as_expr(other, self.dtype))
    def __gt__(self, other): return GT(self, as_expr(other, self.dtype))
    def __ge__(self, other): return GE(self, as_expr(other, self.dtype))
    # == and hash stay identity-based: nodes live in dicts and sets everywhere.
    __hash__ = object.__hash__

    def astype(self, dtype: str) -> "PrimExpr":
        """`expr.astype("float16")`: a Cast, or self when the dtype already matches."""
        dtype_of(dtype)
        return self if self.dtype == dtype else Cast(dtype, self)

    def equal(self, other) -> "EQ":
        """Build `self == other` as IR (Python's == is identity on IR nodes)."""
        return EQ(self, as_expr(other, self.dtype))

    def __bool__(self):
        raise TypeError(
            "a tensorkiln expression has no truth value; use te.if_then_else / tir.Select "
            "instead of Python `if`/`and`/`or` on symbolic values")

    def __str__(self) -> str:
        from .printer import format_expr
        return format_expr(self)

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class IntImm(PrimExpr):
    dtype: str
    value: int


@dataclass(frozen=True, eq=False)
class FloatImm(PrimExpr):
    dtype: str
    value: float


@dataclass(frozen=True, eq=False)
class StringImm(PrimExpr):
    value: str
    dtype: str = "handle"


@dataclass(frozen=True, eq=False)
class Var(PrimExpr):
    """A scalar variable (loop variable, let-bound value, scalar parameter)."""

    name: str
    dtype: str = "int32"


@dataclass(frozen=True, eq=False)
class BinaryOp(PrimExpr):
    a: PrimExpr
    b: PrimExpr
    symbol: ClassVar[str] = "?"

    @property
    def dtype(self) -> str:
        return self.a.dtype


class Add(BinaryOp): symbol = "+"
class Sub(BinaryOp): symbol = "-"
class Mul(BinaryOp): symbol = "*"
class Div(BinaryOp):
    """True division for floats; truncating division for ints (C semantics)."""
    symbol = "/"
class FloorDiv(BinaryOp): symbol = "//"
class FloorMod(BinaryOp): symbol = "%"
class Min(BinaryOp): symbol = "min"
class Max(BinaryOp): symbol = "max"


# Bit operations on integers of one dtype (never bool or float: logic on bool is And/Or/NE).
# ~x is BitXor(x, all ones). A shift amount must lie in [0, bits of the dtype), as in C and
# LLVM (anything else is undefined there); ops that accept other amounts select around it.
class BitAnd(BinaryOp): symbol = "&"
class BitOr(BinaryOp): symbol = "|"
class BitXor(BinaryOp): symbol = "^"
class ShiftLeft(BinaryOp): symbol = "<<"
class ShiftRight(BinaryOp):
    """Arithmetic (sign-filling) for signed dtypes, logical for unsigned ones."""
    symbol = ">>"


BITWISE_OPS = (BitAnd, BitOr, BitXor, ShiftLeft, ShiftRight)
"""The bit-operation node classes (integer operands only)."""


class CompareOp(BinaryOp):
    @property
    def dtype(self) -> str:
        return with_lanes("bool", self.a.lanes)


class EQ(CompareOp): symbol = "=="
class NE(CompareOp): symbol = "!="
class LT(CompareOp): symbol = "<"
class LE(CompareOp): symbol = "<="
class GT(CompareOp): symbol = ">"
class GE(CompareOp): symbol = ">="
class And(CompareOp): symbol = "&&"
class Or(CompareOp): symbol = "||"


@dataclass(frozen=True, eq=False)
class Not(PrimExpr):
    a: PrimExpr

    @property
    def dtype(self) -> str:
        return self.a.dtype


@dataclass(frozen=True, eq=False)
class Select(PrimExpr):
    """`condition ? true_value : false_value`; both sides may be evaluated.

    Emitters may compute both branches (cpu_llvm's `select`, every lane of vector code),
    and the interpreter does, so a branch must be safe to evaluate on its own: a Load
    that only `condition` keeps in bounds carries it as its `predicate` (lowering of
    te.if_then_else does this; see te/schedule_ops.py `predicate_select_loads`).
    """

    condition: PrimExpr
    true_value: PrimExpr
    false_value: PrimExpr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@dataclass(frozen=True, eq=False)
class Cast(PrimExpr):
    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=False)
class Reinterpret(PrimExpr):
    """The bits of `value` read as `dtype`, of the same width (bool counts as 8 bits, 0 or 1)."""

    dtype: str
    value: PrimExpr


@dataclass(frozen=True, eq=False)
class Ramp(PrimExpr):
    """Vector `[base, base + stride, ..., base + (lanes - 1) * stride]`."""

    base: PrimExpr
    stride: PrimExpr
    lanes_count: int

    @property
    def dtype(self) -> str:
        return with_lanes(self.base.dtype, self.lanes_count)


@dataclass(frozen=True, eq=False)
class Broadcast(PrimExpr):
    value: PrimExpr
    lanes_count: int

    @property
    def dtype(self) -> str:
        return with_lanes(self.value.dtype, self.lanes_count)


@dataclass(frozen=True, eq=False)
class Call(PrimExpr):
    """Call of a math function ("exp", "sqrt", "fma", ...) or a registered intrinsic.

    Math names are the te names (exp, log, sqrt, rsqrt, tanh, sigmoid, erf, pow, fabs,
    floor, ceil, round, fma); a code emitter maps them to its dialect. Intrinsic calls
    (from tensorize) use the intrinsic's registered name and dtype "void"/"int32".
    """

    dtype: str
    name: str
    args: tuple[PrimExpr, ...]


@dataclass(frozen=True, eq=False)
class Buffer:
    """A region of memory: shape, dtype, strides (None = compact row-major), scope.

    scope is "global" (arguments, heap), "shared" (GPU work-group memory) or "local"
    (registers / private memory).
    """

    name: str
    shape: tuple[PrimExpr, ...]
    dtype: str = "float32"
    strides: tuple[PrimExpr, ...] | None = None
    scope: str = "global"
    elem_offset: PrimExpr | None = None

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __str__(self) -> str:
        return self.name

    __hash__ = object.__hash__


@dataclass(frozen=True, eq=False)
class Load(PrimExpr):
    """Read `buffer[index]`; a Ramp index gives a vector load. `predicate` masks lanes."""

    buffer: Buffer
    index: PrimExpr
    predicate: PrimExpr | None = None

    @property
    def dtype(self) -> str:
        return with_lanes(self.buffer.dtype, self.index.lanes)


@dataclass(frozen=True, eq=False)
class BufferPointer(PrimExpr):
    """Address of `buffer[index]`, passed to intrinsics that take pointers."""

    buffer: Buffer
    index: PrimExpr
    dtype: str = "handle"


class Stmt:
    __slots__ = ()
    __hash__ = object.__hash__

    def __str__(self) -> str:
        from .printer import format_stmt
        return format_stmt(self)

    __repr__ = __str__


@dataclass(frozen=True, eq=False)
class Store(Stmt):
    buffer: Buffer
    value: PrimExpr
    index: PrimExpr
    predicate: PrimExpr | None = None


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"
    THREAD_BINDING = "thread_binding"


@dataclass(frozen=True, eq=False)
class For(Stmt):
    """`for loop_var in range(min, min + extent)`.

    kind THREAD_BINDING maps the loop onto a GPU index named by `thread_tag`
    ("blockIdx.x", "threadIdx.y", ...). `annotations` carries pragmas.
    """

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: ForKind
    body: Stmt
    thread_tag: str | None = None
    annotations: tuple[tuple[str, object], ...] = ()


@dataclass(frozen=True, eq=False)
class SeqStmt(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, eq=False)
class IfThenElse(Stmt):
    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None


@dataclass(frozen=True, eq=False)
class Allocate(Stmt):
    """Allocate `buffer` (its scope says where) for the duration of `body`."""

    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, eq=False)
class LetStmt(Stmt):
    var: Var
    value: PrimExpr
    body: Stmt


@dataclass(frozen=True, eq=False)
class Evaluate(Stmt):
    """Evaluate an expression for its effect (an intrinsic call)."""

    value: PrimExpr


@dataclass(frozen=True, eq=False)
class Barrier(Stmt):
    """Synchronise threads of a work-group over memory of `scope` ("shared" or "global")."""

    scope: str = "shared"


@dataclass(frozen=True, eq=False)
class CommCombiner:
    """A commutative, associative combination of value tuples, as data (TVM's CommReducer).

    `result` are expressions over the `lhs` and `rhs` Vars; `identity` is the neutral tuple.
    One element for sum / max / min / prod, two for argmax's (value, index):

        x, y = Var("x", "float32"), Var("y", "float32")
        total = CommCombiner((x,), (y,), (Add(x, y),), (FloatImm("float32", 0.0),), "sum")
        total.combine((a,), (b,))     # (a + b,)
    """

    lhs: tuple[Var, ...]
    rhs: tuple[Var, ...]
    result: tuple[PrimExpr, ...]
    identity: tuple[PrimExpr, ...]
    name: str = "reduce"

    def combine(self, a, b) -> tuple[PrimExpr, ...]:
        """`result` with lhs := a and rhs := b (tuples of expressions of the element dtypes)."""
        from .visit import substitute
        mapping = {**dict(zip(self.lhs, a)), **dict(zip(self.rhs, b))}
        return tuple(substitute(r, mapping) for r in self.result)

    @property
    def dtypes(self) -> tuple[str, ...]:
        return tuple(v.dtype for v in self.lhs)


@dataclass(frozen=True, eq=False)
class ThreadAllReduce(Stmt):
    """A reduction across GPU threads: afterwards every thread bound to one of `thread_tags`
    (in the enclosing thread loops) holds `combiner` over all those threads' `values` in
    `results[i][0]` (one-element "local" buffers).

    Written by te lowering where a reduction axis is bound to threadIdx; every thread of
    the work-group must reach it (no thread-dependent branch around it). Emitters do not
    print it directly: `tir.passes.lower_thread_allreduce` turns it into a tree in shared
    memory with barriers, or warp shuffles where the target has them.
    """

    combiner: CommCombiner
    values: tuple[PrimExpr, ...]
    results: tuple[Buffer, ...]
    thread_tags: tuple[str, ...]
    _opaque_fields: ClassVar[tuple[str, ...]] = ("combiner", "results", "thread_tags")


NO_OP = SeqStmt(())

Param = Union[Buffer, Var]

TENSOR_INTRINSICS_ATTR = "tensor_intrinsics"
PREFETCH_CALL = "prefetch"
"""`Evaluate(Call("void", PREFETCH_CALL, (BufferPointer(buffer, first), elements)))`: a hint (te's
Stage.prefetch) that `elements` contiguous elements from `first` will be read soon. An emitter asks the
memory system for their cache lines, or drops the call; it never changes a result."""
"""PrimFunc attribute holding the tensor intrinsics its `Call`s name: a tuple of
`te.TensorIntrin` (anything with `.name` and `.implementations`). Written by tensorize
lowering, read through `PrimFunc.tensor_intrinsics()` by every emitter and the interpreter."""


@dataclass(frozen=True, eq=False)
class PrimFunc:
    """A kernel: parameters (buffers, then scalar vars) and a body.

    `attrs` holds facts for codegen, e.g. ("launch", ...) for GPU launch bounds, and
    (TENSOR_INTRINSICS_ATTR, (intrin, ...)) for the tensor intrinsics it calls.
    """

    name: str
    params: tuple[Param, ...]
    body: Stmt
    attrs: tuple[tuple[str, object], ...] = field(default=())

    def attr(self, key: str, default=None):
        return dict(self.attrs).get(key, default)

    def tensor_intrinsics(self) -> dict[str, object]:
        """{name: TensorIntrin} of the intrinsics under TENSOR_INTRINSICS_ATTR ({} when none).

        Emitters resolve `Call(..., name, ...)` here before asking the target's registry:

            func = te.lower(s, [A, B, C])        # s tensorized onto `gemm`
            func.tensor_intrinsics()             # {"gemm": gemm}
        """
        value = self.attr(TENSOR_INTRINSICS_ATTR) or ()
        found: dict[str, object] = {}
        for intrin in value:
            name = getattr(intrin, "name", None)
            if not isinstance(name, str):
                raise CompileError(
                    f"PrimFunc {self.name}: attribute {TENSOR_INTRINSICS_ATTR!r} must be a tuple of tensor "
                    f"intrinsics (te.TensorIntrin), got an item {intrin!r}; write "
                    f"({TENSOR_INTRINSICS_ATTR!r}, (intrin, ...))")
            found[name] = intrin
        return found

    def __str__(self) -> str:
        from .printer import format_func
        return format_func(self)

    __repr__ = __str__
    __hash__ = object.__hash__


def const(value, dtype: str | None = None) -> PrimExpr:
    """An immediate: int -> IntImm("int32"), float -> FloatImm("float32"), bool -> IntImm("bool").

    numpy scalars count as the Python number they hold (np.float32(1.5) is a float).
    """
    value = to_python(value)
    if isinstance(value, bool):
        return IntImm(dtype or "bool", int(value))
    if dtype is None:
        dtype = "float32" if isinstance(value, float) else "int32"
    if dtype_of(dtype).is_float:
        return FloatImm(dtype, float(value))
    return IntImm(dtype, int(value))


def as_expr(value, dtype: str = "int32") -> PrimExpr:
    """Wrap Python numbers as immediates of `dtype`'s element type."""
    if isinstance(value, PrimExpr):
        return value
    value = to_python(value)
    element = dtype_of(dtype).element
    if isinstance(value, float) and not dtype_of(element).is_float:
        element = "float32"
    return const(value, element if not isinstance(value, bool) else "bool")
