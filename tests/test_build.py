"""tests/test_build.py: tk.build: te schedules (the seed's examples) and PrimFuncs -> runtime.Module, compared with numpy."""
from __future__ import annotations

import inspect

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import TargetError, TensorkilnError


def matmul(n: int, m: int | None = None, k_extent: int | None = None):
    m, k_extent = m or n, k_extent or n
    a = te.placeholder((n, k_extent), name="A")
    b = te.placeholder((k_extent, m), name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    c = te.compute((n, m), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return a, b, c


@pytest.fixture(scope="module")
def operands():
    rng = np.random.default_rng(0)
    a = rng.random((64, 64), dtype=np.float32)
    b = rng.random((64, 64), dtype=np.float32)
    return a, b, a @ b


def _run(module, a, b):
    c = np.zeros((a.shape[0], b.shape[1]), np.float32)
    module(a, b, c)
    return c


def test_seed_loop_unrolling(operands):
    a, b, reference = operands
    A, B, C = matmul(64)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].unroll(i)
    s[C].unroll(j)
    np.testing.assert_allclose(_run(tk.build(s, [A, B, C], target="llvm"), a, b), reference, rtol=1e-5)


def test_seed_cache_read_and_cache_write(operands):
    a, b, reference = operands
    A, B, C = matmul(64)
    s = te.create_schedule(C.op)
    s.cache_read(A, "shared", [C])
    s.cache_read(B, "shared", [C])
    s.cache_write(C, "local")
    np.testing.assert_allclose(_run(tk.build(s, [A, B, C], target="llvm"), a, b), reference, rtol=1e-5)


def test_seed_parallel(operands):
    a, b, reference = operands
    A, B, C = matmul(64)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].parallel(i)
    s[C].parallel(j)
    f = tk.build(s, [A, B, C], target="llvm -num_threads=2")
    np.testing.assert_allclose(_run(f, a, b), reference, rtol=1e-5)
    assert "tk_parallel" in f.get_source()   # parallel regions run on the thread pool (thread_pool.c)


def test_seed_tensorize_gemm_accelerator_and_get_source():
    rng = np.random.default_rng(1)
    a, b = rng.random((128, 96), dtype=np.float32), rng.random((96, 128), dtype=np.float32)
    A, B, C = matmul(128, 128, 96)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    i_outer, i_inner = s[C].split(i, factor=32)
    j_outer, j_inner = s[C].split(j, factor=32)
    s[C].reorder(i_outer, j_outer, i_inner, j_inner)
    s[C].tensorize(i_inner, tk.intrinsic("gemm_accelerator", target="llvm"))
    f = tk.build(s, [A, B, C], target="llvm", name="gemm")
    np.testing.assert_allclose(_run(f, a, b), a @ b, rtol=1e-5)
    source = f.get_source()
    assert "define" in source and "@gemm(" in source and "tk_gemm_accelerator" in source
    assert "vfmadd" in f.get_source("asm")


def test_vectorized_split_schedule(operands):
    a, b, reference = operands
    A, B, C = matmul(64)
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    j_outer, j_inner = s[C].split(j, factor=16)
    s[C].reorder(i, j_outer, k, j_inner)
    s[C].vectorize(j_inner)
    f = tk.build(s, [A, B, C], target="llvm")
    np.testing.assert_allclose(_run(f, a, b), reference, rtol=1e-5)


def test_module_api(operands):
    a, b, reference = operands
    A, B, C = matmul(64)
    f = tk.build(te.create_schedule(C.op), [A, B, C], target="llvm", name="mm")
    assert f.kernel_names == ["mm"] and f.entry_name == "mm"
    assert str(f.target).startswith("cpu_llvm") and f.artifact.format == "llvm-ir"
    assert f.artifact.binary and f.get_source("asm") and f.get_source("llvm-unoptimized")
    c = np.zeros((64, 64), np.float32)
    f.get_function("mm")(a, b, c)
    np.testing.assert_allclose(c, reference, rtol=1e-5)
    timing = f.time_evaluator(number=3, repeat=2)(a, b, c)
    assert len(timing.results) == 2 and 0 < timing.median and timing.mean > 0
    with pytest.raises(KeyError, match=r"module has no kernel 'nope'; it has \['mm'\]"):
        f.get_function("nope")
    with pytest.raises(KeyError, match="no 'ptx' source"):
        f.get_source("ptx")


def test_build_and_compile_default_to_the_same_target():
    build_default = inspect.signature(tk.build).parameters["target"].default
    assert build_default == inspect.signature(tk.compile).parameters["target"].default == "cpu_llvm"
    A, B, C = matmul(8)
    assert str(tk.build(te.create_schedule(C.op), [A, B, C]).target) == str(tk.target(build_default))


def test_build_errors():
    A, B, C = matmul(8)
    s = te.create_schedule(C.op)
    with pytest.raises(TensorkilnError, match="a schedule needs its argument tensors"):
        tk.build(s)
    with pytest.raises(TargetError, match="unknown target 'tpu'"):
        tk.build(s, [A, B, C], target="tpu")
    with pytest.raises(TargetError, match="has no option -bogus"):
        tk.build(s, [A, B, C], target="llvm -bogus=1")


def test_build_from_primfuncs_and_opt_levels():
    a, b = tir.Buffer("A", (tir.const(8),)), tir.Buffer("B", (tir.const(8),))
    i = tir.Var("i")
    func = tir.PrimFunc("inc", (a, b), tir.For(i, tir.const(0), tir.const(8), tir.ForKind.SERIAL,
                                               tir.Store(b, tir.Load(a, i) + tir.const(1.0), i)))
    for level in (0, 3):
        f = tk.build([func], target=f"llvm -opt_level={level}", name="inc")
        x, out = np.arange(8, dtype=np.float32), np.zeros(8, np.float32)
        f(x, out)
        np.testing.assert_array_equal(out, x + 1)
