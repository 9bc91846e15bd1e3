"""tir/interpreter.py: the numpy reference interpreter for loop IR, the spec every backend meets.

    func = te.lower(s, [A, B, C])
    a, b, c = ..., ..., np.zeros((64, 64), "float32")
    tir.interpret(func, a, b, c)      # fills c in place (and returns the arrays)

The PrimFunc is translated to Python source once (loops stay loops; vectors are numpy
arrays) and executed on flat views of the arrays. Loads and stores are bounds-checked,
allocations start filled with garbage (NaN for floats), so a lowering bug shows up as a
wrong value or an IndexError rather than a lucky result. Intrinsic calls from
tensorize run the intrinsic's te description (lowered and interpreted) on the tiles.
"""
from __future__ import annotations

import math
import weakref
from typing import Mapping

import numpy as np

from ..ir.dtypes import dtype_of, to_numpy
from ..ir.errors import CompileError, DTypeError, InternalError, ShapeError
from . import nodes as n
from .functor import ExprFunctor, StmtFunctor

__all__ = ["interpret", "compile_to_python"]

_MAX_BLOCK_DEPTH = 15   # CPython refuses more than 20 statically nested blocks per function
_cache: "weakref.WeakKeyDictionary[n.PrimFunc, object]" = weakref.WeakKeyDictionary()


def interpret(func: n.PrimFunc, *arrays: np.ndarray, intrinsics: Mapping[str, object] | None = None,
              check_bounds: bool = True):
    """Run `func` on numpy arrays (one per buffer param, in order); outputs are written in place."""
    buffers = [p for p in func.params if isinstance(p, n.Buffer)]
    if len(arrays) != len(buffers):
        raise ShapeError(f"interpret {func.name}: expected {len(buffers)} arrays "
                         f"({', '.join(b.name for b in buffers)}), got {len(arrays)}")
    flats, copies = [], []
    for buf, arr in zip(buffers, arrays):
        shape = tuple(int(s.value) for s in buf.shape)
        if not isinstance(arr, np.ndarray):
            raise ShapeError(f"interpret {func.name}: argument {buf.name} must be a numpy array, got {type(arr).__name__}")
        if tuple(arr.shape) != shape:
            raise ShapeError(f"interpret {func.name}: argument {buf.name} has shape {arr.shape}, expected {shape}")
        if arr.dtype != to_numpy(buf.dtype):
            raise DTypeError(f"interpret {func.name}: argument {buf.name} has dtype {arr.dtype}, expected {buf.dtype}")
        if arr.flags.c_contiguous:
            flats.append(arr.reshape(-1))
        else:
            flat = np.ascontiguousarray(arr).reshape(-1)
            copies.append((arr, flat))
            flats.append(flat)
    key = (check_bounds,)
    entry = _cache.get(func)
    if entry is None or entry[0] != key:
        entry = (key, compile_to_python(func, check_bounds))
        _cache[func] = entry
    program = entry[1]
    known = {**func.tensor_intrinsics(), **(intrinsics or {})}
    with np.errstate(all="ignore"):
        program(flats, _IntrinsicRunner(known, check_bounds))
    for arr, flat in copies:
        arr[...] = flat.reshape(arr.shape)
    return arrays


# ---- translation to Python -----------------------------------------------------------------

def _ramp(base, stride, lanes):
    return base + stride * np.arange(lanes, dtype=np.int64)


def _tdiv(a, b):
    q = np.abs(a) // np.abs(b)
    return np.where((np.asarray(a) >= 0) == (np.asarray(b) >= 0), q, -q)[()]


def _cast(value, np_dtype):
    return np.asarray(value).astype(np_dtype)[()] if np.ndim(value) == 0 else np.asarray(value).astype(np_dtype)


def _shift(fn, value, amount, np_dtype):
    """`fn` (np.left_shift / np.right_shift) in the dtype's width: int32/int64 values may be
    Python ints here, whose << would not wrap. An amount outside [0, bits) is undefined in tir:
    it raises rather than mimic one machine's answer."""
    amount = np.asarray(amount)
    if np.any((amount < 0) | (amount >= np_dtype.itemsize * 8)):
        raise InternalError(f"tir shift by {amount} outside [0, {np_dtype.itemsize * 8}) for {np_dtype}")
    return fn(_cast(value, np_dtype), _cast(amount, np_dtype))


def _reinterpret(value, source, target):
    arr = np.asarray(value).astype(source)
    return arr.view(target)[()] if arr.ndim == 0 else arr.view(target)


def _erf(x):
    arr = np.asarray(x)
    out = np.vectorize(math.erf, otypes=[np.float64])(arr).astype(arr.dtype)
    return out[()] if out.ndim == 0 else out


def _rsqrt(x):
    arr = np.asarray(x)
    return (arr.dtype.type(1) / np.sqrt(arr))[()]


def _sigmoid(x):
    arr = np.asarray(x)
    return (arr.dtype.type(1) / (arr.dtype.type(1) + np.exp(-arr)))[()]


# "round" is ties-to-even (np.rint), as numpy.round, ONNX Round, C rint and llvm.roundeven.
_MATH = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": _rsqrt, "tanh": np.tanh, "sigmoid": _sigmoid,
    "erf": _erf, "pow": np.power, "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "round": np.rint, "fma": lambda a, b, c: a * b + c,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "exp2": np.exp2, "log2": np.log2, "log10": np.log10,
    "fmod": np.fmod,
}


class _Check:
    def __init__(self, buffers: dict):
        self.buffers = buffers


def _select(condition, true_value, false_value):
    return true_value if condition else false_value


def _masked_load(buffer, check, index, predicate, zero):
    mask = np.broadcast_to(np.asarray(predicate, dtype=bool), np.shape(index))
    safe = np.where(mask, index, 0)
    if check is not None and mask.any():
        check(np.asarray(index)[mask])
    return np.where(mask, buffer[safe], zero)


def _alloc(size, np_dtype):
    if np.issubdtype(np_dtype, np.floating):
        return np.full(size, np.nan, dtype=np_dtype)
    if np_dtype == np.bool_:
        return np.ones(size, dtype=np_dtype)
    return np.full(size, 0x5A, dtype=np_dtype)


def _oob(name, index, size):
    raise IndexError(f"buffer {name}: index {index} out of bounds [0, {size})")


class _Emitter(StmtFunctor, ExprFunctor):
    """PrimFunc -> Python source: `visit_<Expr>(e)` returns Python text, `visit_<Stmt>(s, depth,
    blocks)` appends lines at indentation `depth` inside `blocks` nested Python blocks."""

    def __init__(self, func: n.PrimFunc, check_bounds: bool):
        self.func = func
        self.check = check_bounds
        self.names: dict[int, str] = {}
        self.consts: dict[str, object] = {}
        self.lines: list[str] = []
        self.counter = 0

    def name(self, obj, prefix: str) -> str:
        key = id(obj)
        if key not in self.names:
            self.names[key] = f"{prefix}{len(self.names)}"
        return self.names[key]

    def const(self, value) -> str:
        self.counter += 1
        name = f"k{self.counter}"
        self.consts[name] = value
        return name

    def visit_default(self, node, *args):
        if isinstance(node, n.Stmt):
            raise InternalError(f"interpreter: cannot execute statement {type(node).__name__}")
        raise InternalError(f"interpreter: cannot execute {type(node).__name__}: {node}")

    # expressions
    def expr(self, e: n.PrimExpr) -> str:
        return self.visit_expr(e)

    def visit_IntImm(self, e):
        if e.dtype == "bool":
            return "True" if e.value else "False"
        if e.dtype in ("int32", "int64"):
            return repr(e.value)
        return self.const(to_numpy(e.dtype).type(e.value))

    def visit_FloatImm(self, e):
        return self.const(to_numpy(e.dtype).type(e.value))

    def visit_StringImm(self, e):
        return repr(e.value)

    def visit_Var(self, e):
        return self.name(e, "v")

    def visit_Add(self, e):
        return f"({self.expr(e.a)} + {self.expr(e.b)})"

    def visit_Sub(self, e):
        return f"({self.expr(e.a)} - {self.expr(e.b)})"

    def visit_Mul(self, e):
        return f"({self.expr(e.a)} * {self.expr(e.b)})"

    def visit_Div(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        return f"({a} / {b})" if dtype_of(e.dtype).is_float else f"_tdiv({a}, {b})"

    def visit_FloorDiv(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        return f"({a} // {b})" if not dtype_of(e.dtype).is_float else f"np.floor_divide({a}, {b})"

    def visit_FloorMod(self, e):
        return f"({self.expr(e.a)} % {self.expr(e.b)})"

    def visit_BitAnd(self, e):
        return f"np.bitwise_and({self.expr(e.a)}, {self.expr(e.b)})"

    def visit_BitOr(self, e):
        return f"np.bitwise_or({self.expr(e.a)}, {self.expr(e.b)})"

    def visit_BitXor(self, e):
        return f"np.bitwise_xor({self.expr(e.a)}, {self.expr(e.b)})"

    def visit_ShiftLeft(self, e):
        return f"_shift(np.left_shift, {self.expr(e.a)}, {self.expr(e.b)}, {self._element_type(e)})"

    def visit_ShiftRight(self, e):
        return f"_shift(np.right_shift, {self.expr(e.a)}, {self.expr(e.b)}, {self._element_type(e)})"

    def _element_type(self, e) -> str:
        return self.const(to_numpy(dtype_of(e.dtype).element))

    def visit_Min(self, e):
        a, b, d = self.expr(e.a), self.expr(e.b), dtype_of(e.dtype)
        return f"min({a}, {b})" if d.lanes == 1 and d.is_int else f"np.minimum({a}, {b})"

    def visit_Max(self, e):
        a, b, d = self.expr(e.a), self.expr(e.b), dtype_of(e.dtype)
        return f"max({a}, {b})" if d.lanes == 1 and d.is_int else f"np.maximum({a}, {b})"

    def visit_CompareOp(self, e):
        return f"({self.expr(e.a)} {e.symbol} {self.expr(e.b)})"

    def visit_And(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        return f"np.logical_and({a}, {b})" if e.lanes > 1 else f"({a} and {b})"

    def visit_Or(self, e):
        a, b = self.expr(e.a), self.expr(e.b)
        return f"np.logical_or({a}, {b})" if e.lanes > 1 else f"({a} or {b})"

    def visit_Not(self, e):
        return f"np.logical_not({self.expr(e.a)})" if e.lanes > 1 else f"(not {self.expr(e.a)})"

    def visit_Select(self, e):
        # both branches are evaluated, as emitters may do (see tir.Select): a Load that only
        # its branch's condition keeps in bounds must carry that condition as its predicate
        c, t, f = self.expr(e.condition), self.expr(e.true_value), self.expr(e.false_value)
        if e.condition.lanes > 1 or e.lanes > 1:
            return f"np.where({c}, {t}, {f})"
        return f"_select({c}, {t}, {f})"

    def visit_Cast(self, e):
        return f"_cast({self.expr(e.value)}, {self.const(to_numpy(dtype_of(e.dtype).element))})"

    def visit_Reinterpret(self, e):
        source = self.const(to_numpy(dtype_of(e.value.dtype).element))
        return f"_reinterpret({self.expr(e.value)}, {source}, {self._element_type(e)})"

    def visit_Ramp(self, e):
        return f"_ramp({self.expr(e.base)}, {self.expr(e.stride)}, {e.lanes_count})"

    def visit_Broadcast(self, e):
        dt = self.const(to_numpy(dtype_of(e.dtype).element))
        return f"np.full({e.lanes_count}, {self.expr(e.value)}, dtype={dt})"

    def index(self, buf: n.Buffer, index: n.PrimExpr) -> str:
        text = self.expr(index)
        if not self.check:
            return text
        return f"_ck{self.name(buf, 'b')}({text})"

    def visit_Load(self, e):
        b = self.name(e.buffer, "b")
        if e.predicate is None:
            return f"{b}[{self.index(e.buffer, e.index)}]"
        # masked-off lanes read nothing (and are not bounds-checked); they yield 0
        zero = self.const(to_numpy(dtype_of(e.buffer.dtype).element).type(0))
        predicate, index = self.expr(e.predicate), self.expr(e.index)
        check = f"_ck{b}" if self.check else "None"
        if e.lanes == 1 and e.predicate.lanes == 1:
            return f"({b}[{self.index(e.buffer, e.index)}] if {predicate} else {zero})"
        return f"_masked_load({b}, {check}, {index}, {predicate}, {zero})"

    def visit_BufferPointer(self, e):
        return f"({self.name(e.buffer, 'b')}, {self.expr(e.index)})"

    def visit_Call(self, e):
        args = ", ".join(self.expr(a) for a in e.args)
        if e.name in _MATH and e.dtype != "void":
            return f"_math[{e.name!r}]({args})"
        return f"_intrin({e.name!r}, ({args},))"

    # statements
    def emit(self, line: str, depth: int):
        self.lines.append("    " * depth + line)

    def stmt(self, s: n.Stmt, depth: int, blocks: int):
        if blocks >= _MAX_BLOCK_DEPTH:
            self.counter += 1
            fname = f"_part{self.counter}"
            self.emit(f"def {fname}():", depth)
            self.stmt(s, depth + 1, 0)
            self.emit(f"{fname}()", depth)
            return
        self.visit_stmt(s, depth, blocks)

    def visit_SeqStmt(self, s, depth, blocks):
        if not s.stmts:
            self.emit("pass", depth)
        for x in s.stmts:
            self.stmt(x, depth, blocks)

    def visit_For(self, s, depth, blocks):
        v = self.name(s.loop_var, "v")
        lo = self.expr(s.min)
        self.emit(f"for {v} in range({lo}, {lo} + {self.expr(s.extent)}):", depth)
        self.stmt(s.body, depth + 1, blocks + 1)

    def visit_Store(self, s, depth, blocks):
        b = self.name(s.buffer, "b")
        index = self.index(s.buffer, s.index)
        value = self.expr(s.value)
        if s.predicate is not None:
            p = self.expr(s.predicate)
            self.emit(f"_m = np.asarray({p}); {b}[np.asarray({self.expr(s.index)})[_m]] = np.asarray({value})[_m]",
                      depth)
        else:
            self.emit(f"{b}[{index}] = {value}", depth)

    def visit_IfThenElse(self, s, depth, blocks):
        self.emit(f"if {self.expr(s.condition)}:", depth)
        self.stmt(s.then_case, depth + 1, blocks + 1)
        if s.else_case is not None:
            self.emit("else:", depth)
            self.stmt(s.else_case, depth + 1, blocks + 1)

    def visit_Allocate(self, s, depth, blocks):
        b = self.name(s.buffer, "b")
        size = math.prod(int(x.value) for x in s.buffer.shape)
        self.emit(f"{b} = _alloc({size}, {self.const(to_numpy(s.buffer.dtype))})", depth)
        self._checker(s.buffer, depth)
        self.stmt(s.body, depth, blocks)

    def visit_LetStmt(self, s, depth, blocks):
        self.emit(f"{self.name(s.var, 'v')} = {self.expr(s.value)}", depth)
        self.stmt(s.body, depth, blocks)

    def visit_Evaluate(self, s, depth, blocks):
        if isinstance(s.value, n.Call) and s.value.name == n.PREFETCH_CALL:   # a hint: nothing to do here
            self.emit("pass  # prefetch", depth)
            return
        self.emit(self.expr(s.value), depth)

    def visit_Barrier(self, s, depth, blocks):
        self.emit("pass  # barrier", depth)

    def visit_ThreadAllReduce(self, s, depth, blocks):
        # threads run one after another here, so none can see the others' values
        raise CompileError(f"interpret {self.func.name}: a reduction across {', '.join(s.thread_tags)} (a reduction "
                         "axis bound to a thread index) needs threads that run together; build it for a GPU "
                         "target (opencl, cuda) instead of interpreting it")

    def _checker(self, buf: n.Buffer, depth: int):
        if self.check:
            b = self.name(buf, "b")
            self.emit(f"_ck{b} = _checker({b}, {buf.name!r})", depth)

    def program(self) -> str:
        self.emit("def _program(_args, _intrin_runner):", 0)
        self.emit("_intrin = _intrin_runner", 1)
        for i, p in enumerate(q for q in self.func.params if isinstance(q, n.Buffer)):
            self.emit(f"{self.name(p, 'b')} = _args[{i}]", 1)
            self._checker(p, 1)
        self.stmt(self.func.body, 1, 0)
        return "\n".join(self.lines)


def _checker(buf, name):
    size = buf.shape[0]

    def check(index):
        if np.ndim(index) == 0:
            if not 0 <= index < size:
                _oob(name, index, size)
        elif index.size and (index.min() < 0 or index.max() >= size):
            _oob(name, index, size)
        return index
    return check


def compile_to_python(func: n.PrimFunc, check_bounds: bool = True):
    """Translate `func` to a Python function `program(flat_arrays, intrinsic_runner)`."""
    emitter = _Emitter(func, check_bounds)
    source = emitter.program()
    namespace = {"np": np, "_ramp": _ramp, "_tdiv": _tdiv, "_cast": _cast, "_shift": _shift,
                 "_reinterpret": _reinterpret, "_math": _MATH, "_alloc": _alloc, "_checker": _checker,
                 "_select": _select, "_masked_load": _masked_load, **emitter.consts}
    exec(compile(source, f"<tir {func.name}>", "exec"), namespace)
    program = namespace["_program"]
    program.source = source
    return program


# ---- tensor intrinsics -----------------------------------------------------------------

_REDUCE_UFUNC = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}


class _IntrinsicRunner:
    """Executes `Call(void, name, args)` from tensorize with the intrinsic's description."""

    def __init__(self, known: Mapping[str, object], check_bounds: bool):
        self.known = known
        self.check_bounds = check_bounds
        self.lowered: dict = {}

    def __call__(self, name: str, args: tuple):
        intrin = self.known.get(name)
        if intrin is None:
            raise InternalError(f"interpreter: call of unknown intrinsic {name!r}; pass intrinsics={{name: intrin}}")
        tensors = [*intrin.inputs, intrin.output]
        pointers = args[:len(tensors)]
        rest = list(args[len(tensors):])
        strides = []
        for t in tensors:
            strides.append([int(x) for x in rest[:t.ndim - 1]] + [1])
            rest = rest[t.ndim - 1:]
        extents = [int(x) for x in rest[:len(intrin.extent_vars)]]
        accumulate = int(rest[len(intrin.extent_vars)])
        bindings = dict(zip(intrin.extent_vars, extents))
        func, concrete = self._lowered(intrin, tuple(extents), bindings)
        tiles = []
        for (flat, offset), t, st, shape in zip(pointers, tensors, strides, concrete):
            itemsize = flat.itemsize
            view = np.lib.stride_tricks.as_strided(flat[int(offset):], shape=shape,
                                                   strides=[s * itemsize for s in st])
            tiles.append(view)
        inputs = [np.ascontiguousarray(v) for v in tiles[:-1]]
        result = np.zeros(concrete[-1], dtype=tiles[-1].dtype)
        interpret(func, *inputs, result, check_bounds=self.check_bounds)
        out = tiles[-1]
        if accumulate:
            combiner = getattr(intrin.op.body, "combiner", None)
            ufunc = _REDUCE_UFUNC.get(getattr(combiner, "name", "sum"))
            if ufunc is None:
                raise InternalError(f"interpreter: cannot accumulate with reducer {combiner.name!r}")
            result = ufunc(out, result).astype(out.dtype)
        out[...] = result

    def _lowered(self, intrin, key, bindings):
        hit = self.lowered.get((intrin.name, key))
        if hit is None:
            hit = intrin.instantiate(bindings)   # te.TensorIntrin: its description, lowered
            self.lowered[(intrin.name, key)] = hit
        return hit

