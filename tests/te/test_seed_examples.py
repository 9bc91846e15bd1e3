"""The four loop-optimization examples of the seed document (section 2), in tensorkiln names.

Each is lowered and interpreted at N=64 against numpy; each also lowers at N=1024.
"""
import time

import numpy as np
import pytest

from tensorkiln import te, tir


def matmul(n):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def gemm_intrinsic():
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), name="a")
    b = te.placeholder((K, N), name="b")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    return te.decl_tensor_intrin(c, "gemm_accelerator", implementations={"llvm": "gemm_impl"})


def schedule_unroll(A, B, C):
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].unroll(i)
    s[C].unroll(j)
    return s


def schedule_cache(A, B, C):
    s = te.create_schedule(C.op)
    s.cache_read(A, "shared", [C])
    s.cache_read(B, "shared", [C])
    s.cache_write(C, "local")
    return s


def schedule_parallel(A, B, C):
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    s[C].parallel(i)
    s[C].parallel(j)
    return s


def schedule_tensorize(A, B, C):
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    i_outer, i_inner = s[C].split(i, factor=32)
    j_outer, j_inner = s[C].split(j, factor=32)
    s[C].reorder(i_outer, j_outer, i_inner, j_inner)
    s[C].tensorize(i_inner, gemm_intrinsic())
    return s


SEEDS = [schedule_unroll, schedule_cache, schedule_parallel, schedule_tensorize]


@pytest.mark.parametrize("make_schedule", SEEDS, ids=lambda f: f.__name__)
def test_seed_example_matches_numpy(make_schedule):
    A, B, C = matmul(64)
    func = te.lower(make_schedule(A, B, C), [A, B, C], name="gemm")
    rng = np.random.default_rng(0)
    a, b = rng.random((64, 64), dtype="float32"), rng.random((64, 64), dtype="float32")
    c = np.zeros((64, 64), "float32")
    tir.interpret(func, a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


@pytest.mark.parametrize("make_schedule", SEEDS, ids=lambda f: f.__name__)
def test_seed_example_lowers_quickly_at_1024(make_schedule):
    A, B, C = matmul(1024)
    start = time.perf_counter()
    func = te.lower(make_schedule(A, B, C), [A, B, C], name="gemm")
    assert time.perf_counter() - start < 5.0   # guards against unrolling 1024x1024 copies
    assert [p.name for p in func.params] == ["A", "B", "C"]


def test_unroll_of_large_loops_keeps_unrolled_for():
    A, B, C = matmul(1024)
    func = te.lower(schedule_unroll(A, B, C), [A, B, C])
    outer = func.body
    assert isinstance(outer, tir.For) and outer.kind is tir.ForKind.UNROLLED
    assert outer.body.kind is tir.ForKind.UNROLLED


def test_parallel_marks_both_loops():
    A, B, C = matmul(64)
    func = te.lower(schedule_parallel(A, B, C), [A, B, C])
    assert func.body.kind is tir.ForKind.PARALLEL and func.body.body.kind is tir.ForKind.PARALLEL


def test_cache_stages_allocate_in_their_scopes():
    A, B, C = matmul(64)
    func = te.lower(schedule_cache(A, B, C), [A, B, C])
    scopes = {}
    stmt = func.body
    while isinstance(stmt, tir.Allocate):
        scopes[stmt.buffer.name] = stmt.buffer.scope
        stmt = stmt.body
    assert scopes["A.shared"] == "shared" and scopes["B.shared"] == "shared"
    text = str(func)
    assert "allocate C.local: float32[4096] in local" in text


def test_tensorize_emits_one_call_per_tile():
    A, B, C = matmul(64)
    func = te.lower(schedule_tensorize(A, B, C), [A, B, C])
    calls = []

    def visit(stmt):
        if isinstance(stmt, tir.Evaluate):
            calls.append(stmt.value)
        for child in getattr(stmt, "stmts", ()) or ([stmt.body] if hasattr(stmt, "body") else []):
            visit(child)
    visit(func.body)
    assert len(calls) == 1 and calls[0].name == "gemm_accelerator"
    assert dict(func.attrs)["tensor_intrinsics"][0].name == "gemm_accelerator"
