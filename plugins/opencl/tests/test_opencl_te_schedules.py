"""test_opencl_te_schedules.py: the seed's te examples with GPU schedules, built for opencl vs numpy.

Each test schedules a te compute the way a GPU wants it (bind to blockIdx/threadIdx,
cache_read into "shared", cache_write into "local", vectorize), builds it with
`tk.build(..., target="opencl")` and compares with numpy.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import RuntimeLaunchError


def _matmul(n: int, m: int, k_size: int):
    A = te.placeholder((n, k_size), name="A")
    B = te.placeholder((k_size, m), name="B")
    k = te.reduce_axis((0, k_size), name="k")
    C = te.compute((n, m), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def _run(f, *arrays):
    arrays = [np.array(a) for a in arrays]
    f(*arrays)
    return arrays


def _check_matmul(f, n):
    source = f.get_source()
    assert "__local float" in source and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    _, _, c = _run(f, a, b, np.zeros((n, n), "float32"))
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_with_block_tiles_in_shared_memory():
    """The seed's cache_read(A, "shared") / cache_write(C, "local"), tiles fetched once per block."""
    n, tile = 64, 8
    A, B, C = _matmul(n, n, n)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], tj)
    s[AA].compute_at(s[C], bj)
    s[BB].compute_at(s[C], bj)
    f = tk.build(s, [A, B, C], target="opencl", name="matmul")
    _check_matmul(f, n)
    assert f.artifact.metadata["kernels"]["matmul"]["shared_bytes"] == 2 * tile * n * 4


def test_matmul_tiled_over_k_with_shared_memory_and_local_accumulator():
    """The classic GPU GEMM: per k-tile, the block fetches A and B tiles into __local memory."""
    n, tile, k_tile = 64, 8, 8
    A, B, C = _matmul(n, n, n)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bi, ti = s[C].split(i, factor=tile)
    bj, tj = s[C].split(j, factor=tile)
    s[C].reorder(bi, bj, ti, tj)
    s[C].bind(bi, te.thread_axis("blockIdx.y"))
    s[C].bind(bj, te.thread_axis("blockIdx.x"))
    s[C].bind(ti, te.thread_axis("threadIdx.y"))
    s[C].bind(tj, te.thread_axis("threadIdx.x"))
    s[CC].compute_at(s[C], tj)
    (k,) = s[CC].op.reduce_axis
    ko, ki = s[CC].split(k, factor=k_tile)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    f = tk.build(s, [A, B, C], target="opencl", name="matmul")
    _check_matmul(f, n)


@pytest.mark.parametrize("n", [1024, 1000])
def test_elementwise_fused_and_bound(n):
    A = te.placeholder((n,), name="A")
    B = te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: te.exp(A[i]) * B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    f = tk.build(s, [A, B, C], target="opencl", name="ew")
    a, b = np.linspace(-2, 2, n).astype("float32"), np.linspace(0, 1, n).astype("float32")
    _, _, c = _run(f, a, b, np.zeros(n, "float32"))
    np.testing.assert_allclose(c, np.exp(a) * b + 1.0, rtol=1e-5)


def test_elementwise_2d_fused_bound_and_vectorized():
    A = te.placeholder((32, 64), name="A")
    B = te.compute((32, 64), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    i, j = B.op.axis
    jo, ji = s[B].split(j, factor=4)
    fused = s[B].fuse(i, jo)
    bx, tx = s[B].split(fused, factor=64)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].vectorize(ji)
    f = tk.build(s, [A, B], target="opencl", name="vec")
    assert "vload4" in f.get_source() and "vstore4" in f.get_source()
    a = np.arange(32 * 64, dtype="float32").reshape(32, 64)
    _, b = _run(f, a, np.zeros_like(a))
    np.testing.assert_allclose(b, a * 2 + 1)


def test_row_reduction_one_thread_per_row():
    n, m = 96, 50
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.sum(A[i, k] * A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = tk.build(s, [A, B], target="opencl", name="sumsq")
    a = np.random.default_rng(1).standard_normal((n, m), "float32")
    _, b = _run(f, a, np.zeros(n, "float32"))
    np.testing.assert_allclose(b, (a * a).sum(axis=1), rtol=1e-4)


def test_max_reduction_with_local_cache_write():
    n, m = 64, 33
    A = te.placeholder((n, m), name="A")
    k = te.reduce_axis((0, m), name="k")
    B = te.compute((n,), lambda i: te.max(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    BL = s.cache_write(B, "local")
    bx, tx = s[B].split(B.op.axis[0], factor=16)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[BL].compute_at(s[B], tx)
    f = tk.build(s, [A, B], target="opencl", name="rowmax")
    a = np.random.default_rng(2).standard_normal((n, m), "float32")
    _, b = _run(f, a, np.zeros(n, "float32"))
    np.testing.assert_array_equal(b, a.max(axis=1))


def test_unscheduled_compute_runs_on_one_work_item():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[j, i] + 1.0, name="B")
    f = tk.build(te.create_schedule(B.op), [A, B], target="opencl", name="transpose")
    a = np.arange(64, dtype="float32").reshape(8, 8)
    _, b = _run(f, a, np.zeros_like(a))
    np.testing.assert_array_equal(b, a.T + 1)


def test_wrong_argument_sizes_are_refused_before_launch():
    A = te.placeholder((128,), name="A")
    B = te.compute((128,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bx, tx = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    f = tk.build(s, [A, B], target="opencl", name="inc")
    b = np.full(64, 5.0, "float32")
    with pytest.raises(RuntimeLaunchError, match=r"argument 1 'B' has shape \(64,\), expected \(128,\)"):
        f(np.zeros(128, "float32"), b)
    np.testing.assert_array_equal(b, 5.0)


def test_tensorize_with_an_opencl_source_intrinsic():
    from tensorkiln.sdk.intrinsic_impl import SourceImpl
    a = te.placeholder((4,), name="a")
    b = te.placeholder((4,), name="b")
    c = te.compute((4,), lambda i: a[i] + b[i], name="c")
    code = ("inline void tk_vadd4(const __global float* a, const __global float* b, __global float* c, int acc) {\n"
            "    float4 r = vload4(0, a) + vload4(0, b);\n"
            "    vstore4(acc ? r + vload4(0, c) : r, 0, c);\n"
            "}")
    vadd4 = te.decl_tensor_intrin(c, "vadd4", implementations={"opencl": SourceImpl("opencl", code, "tk_vadd4")})
    n = 64
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=4)
    bx, tx = s[C].split(outer, factor=8)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].tensorize(inner, vadd4)
    f = tk.build(s, [A, B, C], target="opencl", name="vadd")
    assert "tk_vadd4(A + " in f.get_source()
    a_np, b_np = np.arange(n, dtype="float32"), np.ones(n, "float32")
    _, _, c_np = _run(f, a_np, b_np, np.zeros(n, "float32"))
    np.testing.assert_array_equal(c_np, a_np + b_np)
