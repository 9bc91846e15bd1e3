"""test_opencl_emitter.py: OpenCLEmitter turns hand-built PrimFuncs into OpenCL C that PoCL runs."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import LaunchGeometry, launch_geometry
from tensorkiln_opencl import OpenCLEmitter


def _c(value):
    return tir.const(value)


def _buffer(name, shape, dtype="float32", scope="global"):
    return tir.Buffer(name, tuple(_c(d) for d in shape), dtype, scope=scope)


def _loop(var, extent, body, kind=tir.ForKind.SERIAL, tag=None):
    return tir.For(var, _c(0), extent if isinstance(extent, tir.PrimExpr) else _c(extent), kind, body, thread_tag=tag)


def _bound(var, extent, body, tag):
    return _loop(var, extent, body, tir.ForKind.THREAD_BINDING, tag)


def test_elementwise_bound_to_blocks_and_threads(build_and_load):
    n = 1000   # not a multiple of the 64-thread block: the last block is guarded
    A, B, C = _buffer("A", (n,)), _buffer("B", (n,)), _buffer("C", (n,))
    bx, tx = tir.Var("bx"), tir.Var("tx")
    index = bx * 64 + tx
    store = tir.Store(C, tir.Call("float32", "exp", (tir.Load(A, index),)) * tir.Load(B, index)
                      + tir.Call("float32", "sigmoid", (tir.Load(B, index),)), index)
    guarded = tir.IfThenElse(tir.LT(index, _c(n)), store)
    func = tir.PrimFunc("scale", (A, B, C), _bound(bx, (n + 63) // 64, _bound(tx, 64, guarded, "threadIdx.x"),
                                                   "blockIdx.x"))
    module = build_and_load(func)
    a, b = np.linspace(-2, 2, n).astype("float32"), np.linspace(1, 3, n).astype("float32")
    c = np.zeros(n, "float32")
    module.get_function("scale")(a, b, c)
    np.testing.assert_allclose(c, np.exp(a) * b + 1 / (1 + np.exp(-b)), rtol=1e-5)
    assert launch_geometry(module.artifact, "scale") == LaunchGeometry(grid=(16, 1, 1), block=(64, 1, 1))
    assert "__kernel void scale(const __global float* restrict A" in module.get_source()
    assert "int bx = (int)get_group_id(0);" in module.get_source()


def test_shared_memory_tile_with_barrier_and_private_accumulator(build_and_load):
    """C[i, j] = sum_k A[i, k] * B[k, j] with 8x8 tiles of A and B in __local memory."""
    n, tile = 32, 8
    A, B, C = _buffer("A", (n, n)), _buffer("B", (n, n)), _buffer("C", (n, n))
    As, Bs = _buffer("A_shared", (tile, tile), scope="shared"), _buffer("B_shared", (tile, tile), scope="shared")
    acc = _buffer("acc", (1,), scope="local")
    by, bx, ty, tx, ko, ki = (tir.Var(x) for x in ("by", "bx", "ty", "tx", "ko", "ki"))
    row, col = by * tile + ty, bx * tile + tx
    load = tir.SeqStmt((
        tir.Store(As, tir.Load(A, row * n + ko * tile + tx), ty * tile + tx),
        tir.Store(Bs, tir.Load(B, (ko * tile + ty) * n + col), ty * tile + tx)))
    update = tir.Store(acc, tir.Load(acc, _c(0)) + tir.Load(As, ty * tile + ki) * tir.Load(Bs, ki * tile + tx), _c(0))
    k_loop = _loop(ko, n // tile, tir.SeqStmt((load, tir.Barrier("shared"),
                                               _loop(ki, tile, update, tir.ForKind.UNROLLED), tir.Barrier("shared"))))
    body = tir.Allocate(As, tir.Allocate(Bs, tir.Allocate(acc, tir.SeqStmt((
        tir.Store(acc, tir.const(0.0), _c(0)), k_loop, tir.Store(C, tir.Load(acc, _c(0)), row * n + col))))))
    nest = _bound(by, n // tile, _bound(bx, n // tile, _bound(ty, tile, _bound(tx, tile, body, "threadIdx.x"),
                                                               "threadIdx.y"), "blockIdx.x"), "blockIdx.y")
    module = build_and_load(tir.PrimFunc("matmul", (A, B, C), nest))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    c = np.zeros((n, n), "float32")
    module.get_function("matmul")(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
    source = module.get_source()
    assert "__local float A_shared[64];" in source and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    assert module.artifact.metadata["kernels"]["matmul"]["shared_bytes"] == 2 * 64 * 4
    assert launch_geometry(module.artifact, "matmul") == LaunchGeometry(grid=(4, 4, 1), block=(8, 8, 1))


@pytest.mark.parametrize("lanes", [4, 8])
def test_vector_loads_stores_and_math_use_opencl_vector_types(build_and_load, lanes):
    n = 64
    A, B = _buffer("A", (n,)), _buffer("B", (n,))
    tx = tir.Var("tx")
    index = tir.Ramp(tx * lanes, _c(1), lanes)
    value = tir.Call(f"float32x{lanes}", "fma", (tir.Load(A, index), tir.Broadcast(tir.const(2.0), lanes),
                                                 tir.Call(f"float32x{lanes}", "sqrt", (tir.Load(A, index),))))
    func = tir.PrimFunc("vec", (A, B), _bound(tx, n // lanes, tir.Store(B, tir.Max(value, tir.Broadcast(
        tir.const(3.0), lanes)), index), "threadIdx.x"))
    module = build_and_load(func)
    a = np.arange(n, dtype="float32")
    b = np.zeros(n, "float32")
    module.get_function("vec")(a, b)
    np.testing.assert_allclose(b, np.maximum(a * 2 + np.sqrt(a), 3.0), rtol=1e-6)
    assert f"vstore{lanes}(tk_nan_max_float{lanes}(fma(vload{lanes}(0, A + (tx * {lanes}))" in module.get_source()


def test_gathers_predicates_and_selects_fall_back_to_lanes(build_and_load):
    n = 16
    A, B = _buffer("A", (2 * n,), "int32"), _buffer("B", (n,), "int32")
    io = tir.Var("io")
    strided = tir.Ramp(io * 8, _c(2), 4)
    contiguous = tir.Ramp(io * 4, _c(1), 4)
    value = tir.Select(tir.GT(tir.Load(A, strided), tir.Broadcast(_c(10), 4)),
                       tir.FloorDiv(tir.Load(A, strided) - tir.Broadcast(_c(30), 4), tir.Broadcast(_c(4), 4)),
                       tir.Broadcast(_c(-1), 4))
    func = tir.PrimFunc("gather", (A, B), _loop(io, n // 4, tir.Store(B, value, contiguous,
                                                                  predicate=tir.LT(contiguous, tir.Broadcast(_c(14), 4)))))
    module = build_and_load(func)
    a = np.arange(2 * n, dtype="int32")
    b = np.full(n, 7, "int32")
    module.get_function("gather")(a, b)
    expected = np.where(a[::2] > 10, (a[::2] - 30) // 4, -1)
    expected[14:] = 7
    np.testing.assert_array_equal(b, expected)


def test_integer_dtypes_bools_and_int64_literals(build_and_load):
    n = 12
    A, F, Q, U = _buffer("A", (n,), "int8"), _buffer("F", (n,), "bool"), _buffer("Q", (n,), "int64"), \
        _buffer("U", (n,), "uint8")
    i = tir.Var("i")
    x = tir.Load(A, i)
    body = tir.SeqStmt((
        tir.Store(F, tir.And(tir.Load(F, i), tir.GT(x, tir.const(0, "int8"))), i),
        tir.Store(Q, tir.Cast("int64", x) * tir.const(5_000_000_000, "int64") + tir.Cast("int64", tir.Load(U, i)), i),
        tir.Store(U, tir.Cast("uint8", tir.Min(tir.Max(tir.Cast("int32", x) * 20, _c(0)), _c(255))), i)))
    module = build_and_load(tir.PrimFunc("ints", (A, F, Q, U), _loop(i, n, body)))
    a = np.arange(-6, 6, dtype="int8")
    f = np.array([True, False] * 6)
    q = np.zeros(n, "int64")
    u = np.arange(n, dtype="uint8")
    module.get_function("ints")(a, f, q, u)
    np.testing.assert_array_equal(f, np.array([True, False] * 6) & (a > 0))
    np.testing.assert_array_equal(q, a.astype("int64") * 5_000_000_000 + np.arange(n))
    np.testing.assert_array_equal(u, np.clip(a.astype("int32") * 20, 0, 255).astype("uint8"))


def test_private_intermediate_inside_a_work_item(build_and_load):
    n = 16
    A, B = _buffer("A", (n, n)), _buffer("B", (n, n))
    T = _buffer("T", (n,))
    bx, j, j2 = tir.Var("bx"), tir.Var("j"), tir.Var("j")
    body = tir.Allocate(T, tir.SeqStmt((_loop(j, n, tir.Store(T, tir.Load(A, bx * n + j) * 2.0, j)),
                                        _loop(j2, n, tir.Store(B, tir.Load(T, _c(n - 1) - j2), bx * n + j2)))))
    module = build_and_load(tir.PrimFunc("rev", (A, B), _bound(bx, n, body, "blockIdx.x")))
    a = np.arange(n * n, dtype="float32").reshape(n, n)
    b = np.zeros_like(a)
    module.get_function("rev")(a, b)
    np.testing.assert_array_equal(b, (a * 2)[:, ::-1])
    assert "float T[16];" in module.get_source()


def test_several_kernels_share_one_program(build_and_load):
    A = _buffer("A", (8,))
    i, j = tir.Var("i"), tir.Var("i")
    fill = tir.PrimFunc("fill", (A,), _loop(i, 8, tir.Store(A, tir.Cast("float32", tir.FloorMod(i - 3, _c(5))), i)))
    double = tir.PrimFunc("double", (A,), _loop(j, 8, tir.Store(A, tir.Load(A, j) * 2.0, j)))
    module = build_and_load(fill, double)
    a = np.zeros(8, "float32")
    module.get_function("fill")(a)
    module.get_function("double")(a)
    np.testing.assert_array_equal(a, ((np.arange(8) - 3) % 5) * 2.0)
    assert module.get_source().count("tk_floormod_int32(") == 2   # helper defined once, called once


def test_float64_uses_the_fp64_extension(build_and_load):
    A, i = _buffer("A", (4,), "float64"), tir.Var("i")
    func = tir.PrimFunc("dbl", (A,), _loop(i, 4, tir.Store(A, tir.Call("float64", "sigmoid", (tir.Load(A, i),)), i)))
    module = build_and_load(func)
    a = np.array([-1.0, 0.0, 1.0, 2.0])
    module.get_function("dbl")(a)
    np.testing.assert_allclose(a, 1 / (1 + np.exp(-np.array([-1.0, 0.0, 1.0, 2.0]))), rtol=1e-12)
    assert "#pragma OPENCL EXTENSION cl_khr_fp64 : enable" in module.get_source()


def test_opencl_source_has_no_c_library_calls():
    A, i = _buffer("A", (4,)), tir.Var("i")
    func = tir.PrimFunc("plain", (A,), _loop(i, 4, tir.Store(A, tir.Call("float32", "exp", (tir.Load(A, i),)), i),
                                              tir.ForKind.PARALLEL))
    source = OpenCLEmitter().emit([func]).source
    assert "#include" not in source and "expf" not in source and "omp" not in source
    assert "A[i] = exp(A[i]);" in source


def test_a_shared_global_intermediate_is_refused_with_advice():
    A, T = _buffer("A", (64,)), _buffer("T", (64,))
    tx, tx2 = tir.Var("tx"), tir.Var("tx")
    body = tir.Allocate(T, tir.SeqStmt((_bound(tx, 64, tir.Store(T, tir.const(1.0), tx), "threadIdx.x"),
                                        _bound(tx2, 64, tir.Store(A, tir.Load(T, tx2), tx2), "threadIdx.x"))))
    with pytest.raises(CompileError, match=r"compute it at \(compute_at\) the consumer's thread loops"):
        OpenCLEmitter().emit([tir.PrimFunc("bad", (A,), body)])


def test_a_kernel_named_like_an_opencl_keyword_gets_another_symbol(build_and_load):
    """`kernel`, `global`, ... are OpenCL C keywords: the emitted symbol differs, the name stays."""
    from tensorkiln import te, tir
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    module = build_and_load(te.lower(te.create_schedule(B.op), [A, B], name="kernel"))
    assert "__kernel void kernel(" not in module.get_source()
    b = np.zeros(4, "float32")
    module.get_function("kernel")(np.arange(4, dtype="float32"), b)
    np.testing.assert_array_equal(b, np.arange(4) + 1)


def test_small_integer_min_max_are_not_ambiguous():
    """uchar max(uchar, padded select) used to fail: C promotes the select to int, and
    OpenCL's overloaded max(uchar, int) is ambiguous; both operands are cast to uchar."""
    import tensorkiln as tk
    from tensorkiln import graph
    x = graph.var("x", shape=(1, 1, 5, 5), dtype="uint8")
    mod = graph.Module.from_expr(graph.nn.max_pool2d(x, pool_size=(5, 5), padding=(2, 2, 2, 2)))
    lib = tk.compile(mod, "opencl")
    a = np.arange(25, dtype="uint8").reshape(1, 1, 5, 5)
    np.testing.assert_array_equal(lib(a), graph.evaluate(mod, {"x": a}))
