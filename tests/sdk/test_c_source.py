"""tests/sdk/test_c_source.py: CSourceEmitter writes C99 that the system compiler builds and runs.

Every PrimFunc here is built by hand, emitted with the base emitter, compiled with `cc`
into a shared library, called through ctypes on numpy arrays and compared with numpy.
"""
from __future__ import annotations

import ctypes
import shutil
import subprocess

import numpy as np
import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import CSourceEmitter, LaunchGeometry, launch_geometry, parse_thread_tag

CC = shutil.which("cc") or shutil.which("gcc")
needs_cc = pytest.mark.skipif(CC is None, reason="no system C compiler (cc) on PATH")

_CTYPES = {"int32": ctypes.c_int32, "int64": ctypes.c_int64, "float32": ctypes.c_float, "float64": ctypes.c_double}


def _c(value: int) -> tir.IntImm:
    return tir.const(value)


def _buffer(name: str, shape, dtype: str = "float32", scope: str = "global") -> tir.Buffer:
    return tir.Buffer(name, tuple(_c(d) for d in shape), dtype, scope=scope)


def _loop(var: tir.Var, extent, body: tir.Stmt, kind=tir.ForKind.SERIAL, tag=None) -> tir.For:
    extent = extent if isinstance(extent, tir.PrimExpr) else _c(extent)
    return tir.For(var, _c(0), extent, kind, body, thread_tag=tag)


def _compile_and_run(tmp_path, func: tir.PrimFunc, *args, emitter: CSourceEmitter | None = None):
    """Emit `func` as C, build it with cc, call it on `args` (numpy arrays are updated in place)."""
    source = (emitter or CSourceEmitter()).emit([func]).source
    c_file, library = tmp_path / f"{func.name}.c", tmp_path / f"{func.name}.so"
    c_file.write_text(source)
    result = subprocess.run([CC, "-std=c99", "-O1", "-Wall", "-Werror", "-Wno-unknown-pragmas",
                             "-Wno-unused-variable", "-shared", "-fPIC", str(c_file), "-o", str(library), "-lm"],
                            capture_output=True, text=True)
    assert result.returncode == 0, f"cc failed:\n{result.stderr}\n{source}"
    function = getattr(ctypes.CDLL(str(library)), func.name)
    c_args = []
    for param, arg in zip(func.params, args):
        if isinstance(param, tir.Buffer):
            assert arg.flags.c_contiguous
            c_args.append(arg.ctypes.data_as(ctypes.c_void_p))
        else:
            c_args.append(_CTYPES[param.dtype](arg))
    function.restype = None
    function(*c_args)
    return source


# --- runs -------------------------------------------------------------------------------------

@needs_cc
def test_elementwise_math_with_scalar_parameter(tmp_path):
    n = 37
    A, B = _buffer("A", (n,)), _buffer("B", (n,))
    alpha, i = tir.Var("alpha", "float32"), tir.Var("i")
    x = tir.Load(A, i)
    value = (tir.Call("float32", "exp", (x,)) * alpha + tir.Call("float32", "sqrt", (tir.Call("float32", "fabs", (x,)),))
             + tir.Call("float32", "sigmoid", (x,)) + tir.Call("float32", "round", (x * 2.0,))
             + tir.Call("float32", "pow", (tir.Call("float32", "fabs", (x,)), tir.const(1.5))))
    func = tir.PrimFunc("elementwise", (A, B, alpha), _loop(i, n, tir.Store(B, value, i), tir.ForKind.PARALLEL))
    a = np.linspace(-3, 3, n).astype("float32")
    b = np.zeros(n, "float32")
    source = _compile_and_run(tmp_path, func, a, b, 0.5)
    expected = (np.exp(a) * 0.5 + np.sqrt(np.abs(a)) + 1 / (1 + np.exp(-a)) + np.round(a * 2) + np.abs(a) ** 1.5)
    np.testing.assert_allclose(b, expected, rtol=1e-5, atol=1e-6)
    assert "#pragma omp parallel for" in source
    assert "const float* restrict A" in source


@needs_cc
def test_floor_division_and_modulo_follow_floor_semantics_on_negative_values(tmp_path):
    n = 24
    A, D, M, T = _buffer("A", (n,), "int32"), _buffer("D", (n,), "int32"), _buffer("M", (n,), "int32"), \
        _buffer("T", (n,), "int32")
    i = tir.Var("i")
    x = tir.Load(A, i)
    body = tir.SeqStmt((tir.Store(D, tir.FloorDiv(x, _c(-5)) + tir.FloorDiv(x, _c(4)), i),
                        tir.Store(M, tir.FloorMod(x, _c(4)) * 10 + tir.FloorMod(x, _c(-3)), i),
                        tir.Store(T, tir.Div(x, _c(4)), i)))
    func = tir.PrimFunc("floor_ops", (A, D, M, T), _loop(i, n, body))
    a = np.arange(-12, 12, dtype="int32")
    d, m, t = (np.zeros(n, "int32") for _ in range(3))
    _compile_and_run(tmp_path, func, a, d, m, t)
    np.testing.assert_array_equal(d, a // -5 + a // 4)
    np.testing.assert_array_equal(m, (a % 4) * 10 + a % -3)
    np.testing.assert_array_equal(t, np.trunc(a / 4).astype("int32"))


@needs_cc
def test_nonnegative_floor_division_becomes_plain_c_division():
    i = tir.Var("i")
    A, B = _buffer("A", (64,), "int32"), _buffer("B", (16,), "int32")
    func = tir.PrimFunc("index", (A, B), _loop(i, 64, tir.Store(A, tir.Load(B, tir.FloorMod(tir.FloorDiv(i, _c(4)), _c(16))), i)))
    source = CSourceEmitter().emit([func]).source
    assert "B[(i / 4) % 16]" in source
    assert "tk_floordiv" not in source


@needs_cc
def test_matmul_with_local_accumulator(tmp_path):
    n, m, k_size = 8, 6, 5
    A, B, C = _buffer("A", (n, k_size)), _buffer("B", (k_size, m)), _buffer("C", (n, m))
    acc = _buffer("acc", (1,), scope="local")
    i, j, k = tir.Var("i"), tir.Var("j"), tir.Var("k")
    update = tir.Store(acc, tir.Load(acc, _c(0)) + tir.Load(A, i * k_size + k) * tir.Load(B, k * m + j), _c(0))
    body = tir.Allocate(acc, tir.SeqStmt((tir.Store(acc, tir.const(0.0), _c(0)), _loop(k, k_size, update),
                                          tir.Store(C, tir.Load(acc, _c(0)), i * m + j))))
    func = tir.PrimFunc("matmul", (A, B, C), _loop(i, n, _loop(j, m, body, tir.ForKind.UNROLLED)))
    a, b = np.random.default_rng(0).standard_normal((n, k_size), "float32"), \
        np.random.default_rng(1).standard_normal((k_size, m), "float32")
    c = np.zeros((n, m), "float32")
    _compile_and_run(tmp_path, func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


@needs_cc
def test_vector_loads_and_stores_run_lane_by_lane_in_c(tmp_path):
    n = 16
    A, B, C = _buffer("A", (2 * n,)), _buffer("B", (n,)), _buffer("C", (n,))
    io = tir.Var("io")
    contiguous = tir.Ramp(io * 4, _c(1), 4)
    strided = tir.Ramp(io * 8, _c(2), 4)   # every other element of A
    value = tir.Load(A, strided) * tir.Broadcast(tir.const(2.0), 4) + tir.Load(B, contiguous)
    mask = tir.LT(tir.Ramp(io * 4, _c(1), 4), tir.Broadcast(_c(13), 4))
    func = tir.PrimFunc("vectors", (A, B, C), _loop(io, n // 4, tir.Store(C, value, contiguous, predicate=mask)))
    a, b = np.arange(2 * n, dtype="float32"), np.arange(n, dtype="float32") * 10
    c = np.full(n, -1.0, "float32")
    _compile_and_run(tmp_path, func, a, b, c)
    expected = a[::2] * 2 + b
    expected[13:] = -1.0
    np.testing.assert_array_equal(c, expected)


@needs_cc
def test_selects_comparisons_casts_min_max_and_lets(tmp_path):
    n = 20
    A, B = _buffer("A", (n,), "int32"), _buffer("B", (n,), "float32")
    F, Q = _buffer("F", (n,), "bool"), _buffer("Q", (n,), "int64")
    i, t = tir.Var("i"), tir.Var("t", "int32")
    x = tir.Load(A, i)
    is_odd = tir.EQ(tir.FloorMod(x, _c(2)), _c(1))
    value = tir.Select(tir.And(tir.Not(is_odd), tir.Or(tir.GT(x, _c(-4)), tir.LE(x, _c(-8)))),
                       tir.Cast("float32", tir.Max(tir.Min(t, _c(3)), _c(-3))), tir.Cast("float32", x) * 0.5)
    body = tir.LetStmt(t, x * 2, tir.SeqStmt((
        tir.Store(B, tir.Max(value, tir.const(-2.0)), i),
        tir.Store(F, tir.NE(x, _c(0)), i),
        tir.Store(Q, tir.Cast("int64", x) * tir.const(3_000_000_000, "int64"), i))))
    func = tir.PrimFunc("mixed", (A, B, F, Q), _loop(i, n, body))
    a = np.arange(-10, 10, dtype="int32")
    b, f, q = np.zeros(n, "float32"), np.zeros(n, np.bool_), np.zeros(n, "int64")
    _compile_and_run(tmp_path, func, a, b, f, q)
    even_case = (a % 2 == 0) & ((a > -4) | (a <= -8))
    expected = np.where(even_case, np.clip(a * 2, -3, 3).astype("float32"), a * 0.5)
    np.testing.assert_array_equal(b, np.maximum(expected, -2.0))
    np.testing.assert_array_equal(f, a != 0)
    np.testing.assert_array_equal(q, a.astype("int64") * 3_000_000_000)


@needs_cc
def test_thread_bound_loops_run_serially_in_plain_c(tmp_path):
    A, B = _buffer("A", (10, 32)), _buffer("B", (10, 32))
    bx, tx = tir.Var("bx"), tir.Var("tx")
    index = bx * 32 + tx
    body = _loop(bx, 10, _loop(tx, 32, tir.Store(B, tir.Load(A, index) + 1.0, index),
                               tir.ForKind.THREAD_BINDING, "threadIdx.x"), tir.ForKind.THREAD_BINDING, "blockIdx.x")
    func = tir.PrimFunc("bound", (A, B), body)
    a = np.arange(320, dtype="float32").reshape(10, 32)
    b = np.zeros_like(a)
    _compile_and_run(tmp_path, func, a, b)
    np.testing.assert_array_equal(b, a + 1)
    assert launch_geometry(CSourceEmitter().emit([func]), "bound") == LaunchGeometry()


@needs_cc
def test_global_intermediate_is_heap_allocated(tmp_path):
    n = 1000
    A, C = _buffer("A", (n,)), _buffer("C", (n,))
    T = _buffer("T", (n,))
    i, j = tir.Var("i"), tir.Var("i")   # same name, different variables
    body = tir.Allocate(T, tir.SeqStmt((_loop(i, n, tir.Store(T, tir.Load(A, i) * 3.0, i)),
                                        _loop(j, n, tir.Store(C, tir.Load(T, _c(n - 1) - j), j)))))
    func = tir.PrimFunc("staged", (A, C), body)
    a = np.arange(n, dtype="float32")
    c = np.zeros(n, "float32")
    source = _compile_and_run(tmp_path, func, a, c)
    np.testing.assert_array_equal(c, (a * 3)[::-1])
    assert "malloc" in source and "free(T);" in source


@needs_cc
def test_intrinsic_call_uses_the_c_implementation(tmp_path):
    class Impl:
        language, symbol = "c", "tk_test_axpy4"
        code = ("static void tk_test_axpy4(float* y, const float* x, float a) "
                "{ for (int i = 0; i < 4; ++i) y[i] += a * x[i]; }")

    class Intrin:
        name = "axpy4"
        implementations = {"c": Impl()}

    X, Y = _buffer("X", (8,)), _buffer("Y", (8,))
    io = tir.Var("io")
    call = tir.Call("void", "axpy4", (tir.BufferPointer(Y, io * 4), tir.BufferPointer(X, io * 4), tir.const(2.0)))
    func = tir.PrimFunc("axpy", (X, Y), _loop(io, 2, tir.Evaluate(call)),
                        attrs=((tir.TENSOR_INTRINSICS_ATTR, (Intrin(),)),))
    x, y = np.arange(8, dtype="float32"), np.ones(8, "float32")
    _compile_and_run(tmp_path, func, x, y)
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(8, dtype="float32"))


@needs_cc
def test_identifiers_are_made_unique_and_legal(tmp_path):
    A = _buffer("A.shared", (4, 4))
    outer, inner = tir.Var("i"), tir.Var("i")
    clash, keyword = tir.Var("exp"), tir.Var("int")
    body = _loop(outer, 4, _loop(inner, 4, tir.LetStmt(clash, outer * 4, tir.LetStmt(
        keyword, clash + inner, tir.Store(A, tir.Call("float32", "exp", (tir.Cast("float32", keyword) * 0.0,)), keyword)))))
    func = tir.PrimFunc("names", (A,), body)
    a = np.zeros((4, 4), "float32")
    source = _compile_and_run(tmp_path, func, a)
    np.testing.assert_array_equal(a, np.ones((4, 4)))
    assert "A_shared" in source and "i_1" in source


@needs_cc
def test_symbolic_extent_and_special_float_literals(tmp_path):
    A = _buffer("A", (8,))
    n, i = tir.Var("n"), tir.Var("i")
    value = tir.Select(tir.LT(i, _c(2)), tir.const(float("inf")), tir.Min(tir.Load(A, i), tir.const(float("-inf"))))
    func = tir.PrimFunc("inf", (A, n), _loop(i, n, tir.Store(A, value, i)))
    a = np.zeros(8, "float32")
    _compile_and_run(tmp_path, func, a, 5)
    np.testing.assert_array_equal(a, [np.inf, np.inf, -np.inf, -np.inf, -np.inf, 0, 0, 0])


# --- errors and dialect points -----------------------------------------------------------------

def test_barrier_under_serial_thread_loops_is_refused():
    A = _buffer("A", (32,))
    tx = tir.Var("tx")
    body = _loop(tx, 32, tir.SeqStmt((tir.Store(A, tir.const(1.0), tx), tir.Barrier("shared"))),
                 tir.ForKind.THREAD_BINDING, "threadIdx.x")
    with pytest.raises(CompileError, match=r"barrier\(shared\) inside thread-bound loops"):
        CSourceEmitter().emit([tir.PrimFunc("sync", (A,), body)])


def test_unknown_call_names_the_function_and_the_registered_intrinsics():
    A, i = _buffer("A", (4,)), tir.Var("i")
    func = tir.PrimFunc("bad", (A,), _loop(i, 4, tir.Store(A, tir.Call("float32", "frobnicate", (tir.Load(A, i),)), i)))
    with pytest.raises(CompileError, match=r"calls 'frobnicate', which is neither a math function .* \(it has: none\)"):
        CSourceEmitter().emit([func])


def test_unsupported_dtype_and_thread_tag_are_refused():
    A, i = _buffer("A", (4,), "float16"), tir.Var("i")
    with pytest.raises(CompileError, match=r"cannot emit dtype 'float16'"):
        CSourceEmitter().emit([tir.PrimFunc("half", (A,), _loop(i, 4, tir.Store(A, tir.Load(A, i), i)))])
    with pytest.raises(CompileError, match=r"unknown thread tag 'vthread'"):
        parse_thread_tag("vthread")


class _ThreadedC(CSourceEmitter):
    """A made-up dialect with threads and hoisted shared memory, for testing the override points."""

    target_name = "threaded_c"
    kernel_prefix = "KERNEL void"
    buffer_prefix = "GLOBAL "
    scope_prefix = {"global": "", "shared": "SHARED ", "local": ""}
    hoisted_scopes = ("shared",)
    thread_index = {"blockIdx": "group({dim})", "threadIdx": "item({dim})"}
    barriers = {"shared": "sync();"}
    vector_lanes = (4,)
    vector_load = "load{lanes}({pointer})"
    vector_store = "store{lanes}({value}, {pointer});"


def _tiled_copy() -> tir.PrimFunc:
    A, B = _buffer("A", (64, 48)), _buffer("B", (64, 48))
    S = _buffer("S", (48,), scope="shared")
    by, tx, ty2 = tir.Var("by"), tir.Var("tx"), tir.Var("ty")
    load = _loop(tx, 48, tir.Store(S, tir.Load(A, by * 48 + tx), tx), tir.ForKind.THREAD_BINDING, "threadIdx.x")
    vec = tir.Ramp(ty2 * 4, _c(1), 4)
    store = _loop(ty2, 12, tir.Store(B, tir.Load(S, vec) + tir.Broadcast(tir.const(1.0), 4),
                                     tir.Ramp(by * 48 + ty2 * 4, _c(1), 4)), tir.ForKind.THREAD_BINDING, "threadIdx.x")
    body = _loop(by, 64, tir.Allocate(S, tir.SeqStmt((load, tir.Barrier("shared"), store))),
                 tir.ForKind.THREAD_BINDING, "blockIdx.y")
    return tir.PrimFunc("tiled", (A, B), body)


def test_dialect_override_points_shape_the_source_and_the_launch():
    artifact = _ThreadedC().emit([_tiled_copy()])
    source = artifact.source
    assert "KERNEL void tiled(const GLOBAL float* restrict A, GLOBAL float* restrict B) {\n    SHARED float S[48];" \
        in source
    assert "int32_t by = (int32_t)group(1);" in source
    assert "int32_t tx = (int32_t)item(0);" in source
    assert "if ((int32_t)item(0) < 12) {" in source   # the 12-thread loop under a 48-thread launch
    assert "sync();" in source
    assert "store4(load4(S + (ty * 4)) + ((float4)(1.0f)), B + ((by * 48) + (ty * 4)));" in source
    geometry = launch_geometry(artifact, "tiled")
    assert geometry == LaunchGeometry(grid=(1, 64, 1), block=(48, 1, 1))
    assert geometry.global_size == (48, 64, 1) and geometry.ndim == 2
    assert artifact.metadata["kernels"]["tiled"]["shared_bytes"] == 48 * 4


def test_barrier_under_a_partial_thread_guard_is_refused():
    A = _buffer("A", (64,))
    tx, tx2 = tir.Var("tx"), tir.Var("tx")
    wide = _loop(tx, 64, tir.Store(A, tir.const(0.0), tx), tir.ForKind.THREAD_BINDING, "threadIdx.x")
    narrow = _loop(tx2, 32, tir.SeqStmt((tir.Barrier("shared"), tir.Store(A, tir.const(1.0), tx2))),
                   tir.ForKind.THREAD_BINDING, "threadIdx.x")
    with pytest.raises(CompileError, match=r"holds a barrier that the idle threads would skip"):
        _ThreadedC().emit([tir.PrimFunc("divergent", (A,), tir.SeqStmt((wide, narrow)))])


def test_global_intermediate_shared_between_threads_is_refused():
    A, T = _buffer("A", (64,)), _buffer("T", (64,))
    tx, tx2 = tir.Var("tx"), tir.Var("tx")
    produce = _loop(tx, 64, tir.Store(T, tir.const(1.0), tx), tir.ForKind.THREAD_BINDING, "threadIdx.x")
    consume = _loop(tx2, 64, tir.Store(A, tir.Load(T, _c(63) - tx2), tx2), tir.ForKind.THREAD_BINDING, "threadIdx.x")
    func = tir.PrimFunc("shared_global", (A,), tir.Allocate(T, tir.SeqStmt((produce, consume))))
    with pytest.raises(CompileError, match=r"intermediate T \(scope global\) is written by loop tx bound to threadIdx.x"):
        _ThreadedC().emit([func])


def test_duplicate_kernel_names_are_refused():
    A, i = _buffer("A", (4,)), tir.Var("i")
    func = tir.PrimFunc("same", (A,), _loop(i, 4, tir.Store(A, tir.const(1.0), i)))
    with pytest.raises(CompileError, match=r"two kernels are named 'same'"):
        CSourceEmitter().emit([func, func])


def test_a_kernel_named_like_c_gets_a_fresh_symbol_recorded_in_the_artifact():
    A, i = _buffer("A", (4,)), tir.Var("i")
    body = _loop(i, 4, tir.Store(A, tir.const(1.0), i))
    artifact = CSourceEmitter().emit([tir.PrimFunc("main", (A,), body), tir.PrimFunc("main_1", (A,), body),
                                      tir.PrimFunc("int", (A,), body)])
    symbols = {name: artifact.kernel_symbol(name) for name in ("main", "main_1", "int")}
    assert symbols == {"main": "main_2", "main_1": "main_1", "int": "int_1"}
    assert all(f"void {symbol}(" in artifact.source for symbol in symbols.values())


def test_help_names_every_override_point():
    """help(CSourceEmitter) documents each public attribute and method of the class, backquoted."""
    import pydoc

    text = pydoc.render_doc(CSourceEmitter)
    documented = text[:text.index("Method resolution order")]
    points = [name for name in vars(CSourceEmitter) if not name.startswith("_")]
    assert len(points) > 30
    missing = [name for name in points if f"`{name}`" not in documented]
    assert not missing, f"add these to the CSourceEmitter class docstring: {missing}"


@needs_cc
def test_float_min_max_propagate_nan_like_numpy(tmp_path):
    n = 6
    A, B, C, D = (_buffer(name, (n,), "float32") for name in "ABCD")
    i = tir.Var("i")
    body = tir.SeqStmt((tir.Store(C, tir.Max(tir.Load(A, i), tir.Load(B, i)), i),
                        tir.Store(D, tir.Min(tir.Load(A, i), tir.Load(B, i)), i)))
    func = tir.PrimFunc("nan_min_max", (A, B, C, D), _loop(i, n, body))
    a = np.array([1, np.nan, 3, np.nan, -1, 2], "float32")
    b = np.array([2, 0, np.nan, np.nan, -2, 2], "float32")
    c, d = np.zeros(n, "float32"), np.zeros(n, "float32")
    _compile_and_run(tmp_path, func, a, b, c, d)
    np.testing.assert_array_equal(c, np.maximum(a, b))
    np.testing.assert_array_equal(d, np.minimum(a, b))
