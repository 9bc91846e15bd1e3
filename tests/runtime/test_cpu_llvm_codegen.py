"""tests/runtime/test_cpu_llvm_codegen.py: cpu_llvm code generation of hand-built tir kernels, compared with numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import tir
from tensorkiln.ir.errors import CompileError

from .kernels import buf, build, elementwise, loop, rand

F = tir.ForKind


def test_elementwise_add_mul():
    a, b, c = buf("A", (100,)), buf("B", (100,)), buf("C", (100,))
    f = build(elementwise("axpy", 100, [a, b], c, lambda x, y: x * tir.const(2.0) + y))
    x, y, out = rand(100, "float32"), rand(100, "float32"), np.zeros(100, np.float32)
    f(x, y, out)
    np.testing.assert_allclose(out, x * 2 + y, rtol=1e-6)
    assert "llvm.fmuladd" in f.get_source("llvm-unoptimized")  # x * y + z may become one FMA


def test_vector_ramp_load_store_and_broadcast():
    a, b = buf("A", (64,)), buf("B", (64,))
    io = tir.Var("io")
    index = tir.Ramp(io * 16, tir.const(1), 16)
    body = tir.Store(b, tir.Load(a, index) * tir.Broadcast(tir.const(3.0), 16), index)
    f = build(tir.PrimFunc("vec", (a, b), loop(io, 4, body)))
    x, out = rand(64, "float32"), np.zeros(64, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x * 3, rtol=1e-6)
    assert "<16 x float>" in f.get_source()


def test_strided_ramp_is_a_gather_and_scatter():
    a, b = buf("A", (32,)), buf("B", (32,))
    io = tir.Var("io")
    # B[2*k + 1] = A[2*k] for a vector of 8 lanes, twice
    read = tir.Ramp(io * 16, tir.const(2), 8)
    write = tir.Ramp(io * 16 + 1, tir.const(2), 8)
    f = build(tir.PrimFunc("gather", (a, b), loop(io, 2, tir.Store(b, tir.Load(a, read), write))))
    x, out = rand(32, "float32"), np.zeros(32, np.float32)
    f(x, out)
    expected = np.zeros(32, np.float32)
    expected[1::2] = x[0::2]
    np.testing.assert_array_equal(out, expected)


def test_predicated_vector_load_and_store():
    a, b = buf("A", (20,)), buf("B", (20,))
    io = tir.Var("io")
    index = tir.Ramp(io * 8, tir.const(1), 8)
    mask = tir.LT(index, tir.Broadcast(tir.const(20), 8))
    body = tir.Store(b, tir.Load(a, index, mask) + tir.Broadcast(tir.const(1.0), 8), index, mask)
    f = build(tir.PrimFunc("masked", (a, b), loop(io, 3, body)))
    x, out = rand(20, "float32"), np.zeros(20, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x + 1, rtol=1e-6)


def test_reduction_row_sum():
    a, s = buf("A", (16, 33)), buf("S", (16,))
    i, k = tir.Var("i"), tir.Var("k")
    body = tir.SeqStmt((
        tir.Store(s, tir.const(0.0), i),
        loop(k, 33, tir.Store(s, tir.Load(s, i) + tir.Load(a, i * 33 + k), i)),
    ))
    f = build(tir.PrimFunc("rowsum", (a, s), loop(i, 16, body)))
    x, out = rand((16, 33), "float32"), np.zeros(16, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x.sum(axis=1), rtol=1e-5)


@pytest.mark.parametrize("threads", [1, 2])
def test_parallel_loop_with_thread_count(threads):
    n = 1000
    a, b = buf("A", (n,)), buf("B", (n,))
    f = build(elementwise("par", n, [a], b, lambda x: x + tir.const(1.0), kind=F.PARALLEL),
              target=f"llvm -num_threads={threads}")
    assert f.loaded.get_num_threads() == threads
    x, out = rand(n, "float32"), np.zeros(n, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x + 1, rtol=1e-6)
    assert "tk_parallel" in f.get_source()   # the thread pool (thread_pool.c)


def test_parallel_body_sees_outer_variables_and_allocates_per_thread():
    # for i in parallel(8): tmp[4] local; tmp[j] = A[i*4+j] * i; B[i*4+j] = tmp[j] + s
    a, b = buf("A", (32,)), buf("B", (32,))
    s = tir.Var("s", "float32")
    tmp = buf("tmp", (4,), scope="local")
    i, j, j2 = tir.Var("i"), tir.Var("j"), tir.Var("j2")
    inner = tir.SeqStmt((
        loop(j, 4, tir.Store(tmp, tir.Load(a, i * 4 + j) * tir.Cast("float32", i), j)),
        loop(j2, 4, tir.Store(b, tir.Load(tmp, j2) + s, i * 4 + j2)),
    ))
    f = build(tir.PrimFunc("par_alloc", (a, b, s), loop(i, 8, tir.Allocate(tmp, inner), F.PARALLEL)),
              target="llvm -num_threads=2")
    x, out = rand(32, "float32"), np.zeros(32, np.float32)
    f(x, out, 0.5)
    np.testing.assert_allclose(out, x * np.repeat(np.arange(8), 4) + 0.5, rtol=1e-6)


def test_runtime_set_num_threads_overrides_modules():
    a, b = buf("A", (10,)), buf("B", (10,))
    f = build(elementwise("threads", 10, [a], b, lambda x: x, kind=F.PARALLEL), target="llvm -num_threads=2")
    try:
        tk.runtime.set_num_threads(1)
        assert f.loaded.get_num_threads() == 1
        g = build(elementwise("threads2", 10, [a], b, lambda x: x, kind=F.PARALLEL))
        assert g.loaded.get_num_threads() == 1
    finally:
        tk.runtime.set_num_threads(0)
    assert f.loaded.get_num_threads() == 0


@pytest.mark.parametrize("size", [8, 100_000])  # stack, heap
def test_allocate_global_buffer(size):
    a, b = buf("A", (size,)), buf("B", (size,))
    tmp = buf("tmp", (size,), scope="global")
    i, j = tir.Var("i"), tir.Var("j")
    body = tir.Allocate(tmp, tir.SeqStmt((
        loop(i, size, tir.Store(tmp, tir.Load(a, i) * tir.const(2.0), i)),
        loop(j, size, tir.Store(b, tir.Load(tmp, size - 1 - j), j)),
    )))
    f = build(tir.PrimFunc("alloc", (a, b), body))
    x, out = rand(size, "float32"), np.zeros(size, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, (x * 2)[::-1], rtol=1e-6)
    assert ("aligned_alloc" in f.get_source()) == (size * 4 > 64 * 1024)


def test_select_and_if_then_else():
    a, b = buf("A", (50,)), buf("B", (50,))
    i = tir.Var("i")
    x = tir.Load(a, i)
    body = tir.IfThenElse(tir.LT(i, tir.const(25)),
                          tir.Store(b, tir.Select(tir.GT(x, tir.const(0.0)), x, tir.const(0.0)), i),
                          tir.Store(b, tir.const(-1.0), i))
    f = build(tir.PrimFunc("relu_half", (a, b), loop(i, 50, body)))
    data, out = rand(50, "float32"), np.zeros(50, np.float32)
    f(data, out)
    np.testing.assert_array_equal(out, np.concatenate([np.maximum(data[:25], 0), -np.ones(25, np.float32)]))


CAST_DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "float16", "float32", "float64"]


def test_cast_between_all_dtypes():
    funcs, pairs = [], []
    for source in CAST_DTYPES:
        for target in CAST_DTYPES:
            a, b = buf("A", (16,), source), buf("B", (16,), target)
            funcs.append(elementwise(f"cast_{source}_{target}", 16, [a], b, lambda x, t=target: tir.Cast(t, x)))
            pairs.append((source, target))
    module = tk.build(funcs, target="llvm")
    rng = np.random.default_rng(1)
    for source, target in pairs:
        # values every dtype holds exactly, so casts have one right answer
        x = rand(16, source, rng, low=0, high=100) if source != "bool" else rand(16, "bool", rng)
        out = np.zeros(16, target)
        module.get_function(f"cast_{source}_{target}")(x, out)
        np.testing.assert_array_equal(out, x.astype(target), err_msg=f"{source} -> {target}")


def test_signed_casts_and_float_truncation():
    a, b = buf("A", (6,), "float32"), buf("B", (6,), "int32")
    f = build(elementwise("f2i", 6, [a], b, lambda x: tir.Cast("int32", x)))
    x, out = np.array([-2.7, -0.5, 0.0, 0.5, 2.7, -100.9], np.float32), np.zeros(6, np.int32)
    f(x, out)
    np.testing.assert_array_equal(out, x.astype(np.int32))


UNARY = {
    "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "rsqrt": lambda x: 1 / np.sqrt(x), "tanh": np.tanh,
    "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "fabs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "erf": None, "sin": np.sin, "cos": np.cos, "log2": np.log2, "exp2": np.exp2,
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_math_functions_match_numpy(dtype):
    import math
    UNARY["erf"] = np.vectorize(math.erf)
    funcs = []
    for name in UNARY:
        a, b = buf("A", (64,), dtype), buf("B", (64,), dtype)
        funcs.append(elementwise(f"m_{name}", 64, [a], b, lambda x, name=name: tir.Call(dtype, name, (x,))))
    funcs.append(elementwise("m_pow", 64, [buf("A", (64,), dtype), buf("B", (64,), dtype)], buf("C", (64,), dtype),
                             lambda x, y: tir.Call(dtype, "pow", (x, y))))
    funcs.append(elementwise("m_fma", 64, [buf("A", (64,), dtype), buf("B", (64,), dtype)], buf("C", (64,), dtype),
                             lambda x, y: tir.Call(dtype, "fma", (x, y, x))))
    module = tk.build(funcs, target="llvm")
    x = np.linspace(0.1, 3.3, 64).astype(dtype)
    rtol = 2e-6 if dtype == "float32" else 1e-12
    for name, reference in UNARY.items():
        out = np.zeros(64, dtype)
        module.get_function(f"m_{name}")(x, out)
        np.testing.assert_allclose(out, reference(x).astype(dtype), rtol=rtol, atol=1e-7, err_msg=name)
    y, out = x[::-1].copy(), np.zeros(64, dtype)
    module.get_function("m_pow")(x, y, out)
    np.testing.assert_allclose(out, x ** y, rtol=rtol * 4)
    module.get_function("m_fma")(x, y, out)
    np.testing.assert_allclose(out, x * y + x, rtol=rtol)


def test_vector_math_call_and_half_precision():
    a, b = buf("A", (32,), "float16"), buf("B", (32,), "float16")
    io = tir.Var("io")
    index = tir.Ramp(io * 8, tir.const(1), 8)
    body = tir.Store(b, tir.Call("float16x8", "tanh", (tir.Load(a, index),)), index)
    f = build(tir.PrimFunc("tanh_h", (a, b), loop(io, 4, body)))
    x, out = np.linspace(-2, 2, 32).astype(np.float16), np.zeros(32, np.float16)
    f(x, out)
    np.testing.assert_allclose(out, np.tanh(x), rtol=2e-3)


def test_integer_floor_div_mod_min_max():
    a, b = buf("A", (40,), "int32"), buf("B", (40,), "int32")
    ops = {"div": tir.Div, "floordiv": tir.FloorDiv, "floormod": tir.FloorMod, "min": tir.Min, "max": tir.Max}
    funcs = [elementwise(name, 40, [a, b], buf("C", (40,), "int32"), lambda x, y, op=op: op(x, y))
             for name, op in ops.items()]
    module = tk.build(funcs, target="llvm")
    x = np.arange(-20, 20, dtype=np.int32)
    y = np.where(np.arange(40) % 2 == 0, 3, -7).astype(np.int32)
    expected = {"div": (np.trunc(x / y)).astype(np.int32), "floordiv": x // y, "floormod": x % y,
                "min": np.minimum(x, y), "max": np.maximum(x, y)}
    for name in ops:
        out = np.zeros(40, np.int32)
        module.get_function(name)(x, y, out)
        np.testing.assert_array_equal(out, expected[name], err_msg=name)


def test_float_floor_div_mod():
    a, b = buf("A", (8,)), buf("B", (8,))
    funcs = [elementwise("fdiv", 8, [a, b], buf("C", (8,)), tir.FloorDiv),
             elementwise("fmod", 8, [a, b], buf("C", (8,)), tir.FloorMod)]
    module = tk.build(funcs, target="llvm")
    x = np.array([-7.5, -3, -1, 0, 1, 3, 7.5, 9], np.float32)
    y = np.array([2, 2, -2, 3, -3, 2, -2, 4], np.float32)
    out = np.zeros(8, np.float32)
    module.get_function("fdiv")(x, y, out)
    np.testing.assert_array_equal(out, x // y)
    module.get_function("fmod")(x, y, out)
    np.testing.assert_array_equal(out, x % y)


def test_bool_logic_and_comparisons():
    a, b, c = buf("A", (30,), "int32"), buf("B", (30,), "bool"), buf("C", (30,), "bool")
    f = build(elementwise("logic", 30, [a, b], c,
                          lambda x, y: tir.Or(tir.And(tir.GE(x, tir.const(3)), tir.Not(y)), tir.EQ(x, tir.const(0)))))
    x, y, out = np.arange(-15, 15, dtype=np.int32), rand(30, "bool"), np.zeros(30, np.bool_)
    f(x, y, out)
    np.testing.assert_array_equal(out, ((x >= 3) & ~y) | (x == 0))


def test_unrolled_vectorized_loops_and_let():
    a, b = buf("A", (64, 4)), buf("B", (64, 4))
    i, j, t = tir.Var("i"), tir.Var("j"), tir.Var("t", "float32")
    inner = loop(j, 4, tir.LetStmt(t, tir.Load(a, i * 4 + j), tir.Store(b, t * t, i * 4 + j)), F.UNROLLED)
    f = build(tir.PrimFunc("unroll", (a, b), loop(i, 64, inner, F.VECTORIZED)))
    x, out = rand((64, 4), "float32"), np.zeros((64, 4), np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x * x, rtol=1e-6)
    # a VECTORIZED loop left to LLVM is not forced (forcing only printed "loop not vectorized")
    assert "llvm.loop.vectorize.enable" not in f.get_source("llvm-unoptimized")


def test_long_unrolled_loop_gets_unroll_metadata():
    a, b = buf("A", (100,)), buf("B", (100,))
    f = build(elementwise("long_unroll", 100, [a], b, lambda x: x + tir.const(1.0), kind=F.UNROLLED))
    assert "llvm.loop.unroll.count" in f.get_source("llvm-unoptimized")
    x, out = rand(100, "float32"), np.zeros(100, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, x + 1)


def test_scalar_parameters_of_every_kind():
    a, b = buf("A", (10,), "float64"), buf("B", (10,), "float64")
    scale, shift, flag = tir.Var("scale", "float32"), tir.Var("shift", "int64"), tir.Var("flag", "bool")
    i = tir.Var("i")
    value = tir.Select(flag, tir.Load(a, i) * tir.Cast("float64", scale) + tir.Cast("float64", shift),
                       tir.const(0.0, "float64"))
    f = build(tir.PrimFunc("scalars", (a, b, scale, shift, flag), loop(i, 10, tir.Store(b, value, i))))
    x, out = rand(10, "float64"), np.zeros(10)
    f(x, out, 1.5, 7, True)
    np.testing.assert_allclose(out, x * 1.5 + 7)
    f(x, out, 1.5, 7, False)
    np.testing.assert_array_equal(out, 0)


def test_thread_binding_is_refused():
    a, b = buf("A", (4,)), buf("B", (4,))
    i = tir.Var("i")
    func = tir.PrimFunc("gpu", (a, b), tir.For(i, tir.const(0), tir.const(4), F.THREAD_BINDING,
                                                 tir.Store(b, tir.Load(a, i), i), thread_tag="threadIdx.x"))
    with pytest.raises(CompileError, match=r"bound to 'threadIdx.x'.*use parallel\(\)"):
        build(func)


def test_unknown_call_is_a_compile_error():
    a, b = buf("A", (4,)), buf("B", (4,))
    func = elementwise("unknown", 4, [a], b, lambda x: tir.Call("float32", "no_such_fn", (x,)))
    with pytest.raises(CompileError, match="unknown function or intrinsic 'no_such_fn'"):
        build(func)
