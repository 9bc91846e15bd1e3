"""Cross-thread reductions: a reduction axis bound to threadIdx (tir.ThreadAllReduce, expanded by
tir.passes.lower_thread_allreduce) and s.rfactor, lowered, printed and run against numpy.

The IR tests run everywhere; the numeric ones build for opencl (PoCL runs it on the CPU) and for
cuda on its CPU shim (g++, one OS thread per CUDA thread), and skip with the target's reason
where it is not available.
"""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import CompileError, ScheduleError
from tensorkiln.tir.passes import lower_thread_allreduce
from tensorkiln.tir.visit import post_order_visit

_REDUCERS = {"sum": (te.sum, np.sum), "max": (te.max, np.max), "min": (te.min, np.min), "prod": (te.prod, np.prod)}


def _nodes(func, kind) -> list:
    found = []
    post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, kind) else None)
    return found


def _calls(func, name: str) -> int:
    return sum(1 for call in _nodes(func, tir.Call) if call.name == name)


def _row_reduction(rows: int, length: int, threads: int, reducer: str = "sum", rfactor: bool = False,
                   rows_per_block: int = 1):
    """B[i] = reduce_k A[i, k]: rows over blockIdx.x (and threadIdx.y when rows_per_block > 1), the
    reduction split by `threads` with the inner part bound to threadIdx.x (through rfactor if asked)."""
    A = te.placeholder((rows, length), name="A")
    k = te.reduce_axis((0, length), name="k")
    B = te.compute((rows,), lambda i: _REDUCERS[reducer][0](A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=threads)
    if rfactor:
        BF = s.rfactor(B, ki)
        ki = s[B].op.reduce_axis[0]
        s[BF].compute_at(s[B], ki)
        s[BF].set_scope("local")
    i = s[B].op.axis[0]
    if rows_per_block > 1:
        bo, bi = s[B].split(i, factor=rows_per_block)
        s[B].bind(bo, te.thread_axis("blockIdx.x"))
        s[B].bind(bi, te.thread_axis("threadIdx.y"))
    else:
        s[B].bind(i, te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return s, A, B


# ---- loop IR -----------------------------------------------------------------------------------


def test_a_reduction_axis_bound_to_threadidx_lowers_to_one_thread_allreduce():
    s, A, B = _row_reduction(4, 300, 64)
    func = te.lower(s, [A, B])
    (node,) = _nodes(func, tir.ThreadAllReduce)
    assert node.thread_tags == ("threadIdx.x",) and node.combiner.name == "sum"
    assert "thread_allreduce<sum>" in str(func)
    stores = [x for x in _nodes(func, tir.Store) if x.buffer.name == "B"]
    assert len(stores) == 1   # one writer per row, after the combination


def test_the_shared_memory_tree_has_a_barrier_after_every_halving_step():
    for threads, steps in ((64, 6), (48, 6)):   # 48: one step folds 32..47 onto 0..15, then 16 .. 1
        s, A, B = _row_reduction(3, 200, threads)
        tree = lower_thread_allreduce(te.lower(s, [A, B]))
        assert not _nodes(tree, tir.ThreadAllReduce)
        shared = [a.buffer for a in _nodes(tree, tir.Allocate) if a.buffer.scope == "shared"]
        assert [b.shape[0].value for b in shared] == [threads]
        # the first store, each step, and the read of the result are followed by a barrier
        assert len(_nodes(tree, tir.Barrier)) == steps + 2


def test_the_warp_form_uses_shuffles_and_meets_in_shared_memory_only_across_warps():
    s, A, B = _row_reduction(3, 200, 32)
    one_warp = lower_thread_allreduce(te.lower(s, [A, B]), warp_size=32, shuffle_dtypes=("float32",))
    assert _calls(one_warp, "tk_shfl_down") == 5 and _calls(one_warp, "tk_shfl") == 1
    assert not _nodes(one_warp, tir.Barrier)
    s, A, B = _row_reduction(3, 500, 128)
    four_warps = lower_thread_allreduce(te.lower(s, [A, B]), warp_size=32, shuffle_dtypes=("float32",))
    assert _calls(four_warps, "tk_shfl_down") == 5 + 2 and len(_nodes(four_warps, tir.Barrier)) == 2
    # a dtype the target cannot shuffle, or no warp size: the shared-memory tree
    assert not _calls(lower_thread_allreduce(te.lower(s, [A, B]), warp_size=32), "tk_shfl_down")


def test_rows_on_threadidx_y_reduce_in_separate_groups():
    s, A, B = _row_reduction(8, 100, 16, rows_per_block=4)
    tree = lower_thread_allreduce(te.lower(s, [A, B]))
    shared = [a.buffer for a in _nodes(tree, tir.Allocate) if a.buffer.scope == "shared"]
    assert [b.shape[0].value for b in shared] == [4 * 16]


def test_binding_a_reduction_axis_to_a_block_index_is_refused():
    s, A, B = _row_reduction(2, 64, 16)
    with pytest.raises(ScheduleError, match=r"bind on stage B, axis k.outer: .*only threadIdx"):
        s[B].bind(s[B].leaf_iter_vars[1], te.thread_axis("blockIdx.y"))


def test_a_data_axis_inside_the_thread_reduction_is_refused():
    A = te.placeholder((4, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    B = te.compute((4,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    ko, ki = s[B].split(k, factor=16)
    s[B].reorder(ko, B.op.axis[0], ki)
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"cross-thread reduction on stage B: data axis i is inside"):
        te.lower(s, [A, B])


def test_the_interpreter_refuses_a_cross_thread_reduction_with_the_reason():
    s, A, B = _row_reduction(2, 64, 16)
    with pytest.raises(CompileError, match=r"reduction across threadIdx.x .* GPU target"):
        tir.interpret(te.lower(s, [A, B]), np.zeros((2, 64), "float32"), np.zeros(2, "float32"))


def test_a_reduction_under_a_thread_dependent_branch_is_refused():
    s, A, B = _row_reduction(2, 64, 16)
    func = te.lower(s, [A, B])
    tx = next(x for x in _nodes(func, tir.For) if x.thread_tag == "threadIdx.x")
    guarded = tir.PrimFunc(func.name, func.params, _guard_allreduce(func.body, tx.loop_var), func.attrs)
    with pytest.raises(CompileError, match=r"sits under `if .*differs between threads"):
        lower_thread_allreduce(guarded)


def _guard_allreduce(body, var):
    from tensorkiln.tir.visit import rewrite
    return rewrite(body, post=lambda x: tir.IfThenElse(tir.LT(var, tir.const(8)), x)
                   if isinstance(x, tir.ThreadAllReduce) else None)


# ---- rfactor -------------------------------------------------------------------------------------


@given(rows=st.integers(1, 4), length=st.integers(1, 70), factor=st.integers(1, 16),
       reducer=st.sampled_from(sorted(_REDUCERS)), factor_axis=st.integers(0, 1), fuse_first=st.booleans())
@settings(max_examples=25, deadline=None, derandomize=True)
def test_rfactor_matches_numpy_when_interpreted(rows, length, factor, reducer, factor_axis, fuse_first):
    A = te.placeholder((rows, length, 3), name="A")
    k, m = te.reduce_axis((0, length), name="k"), te.reduce_axis((0, 3), name="m")
    B = te.compute((rows,), lambda i: _REDUCERS[reducer][0](A[i, k, m], axis=[k, m]), name="B")
    s = te.create_schedule(B.op)
    axis = s[B].fuse(k, m) if fuse_first else k
    _, ki = s[B].split(axis, factor=factor)
    BF = s.rfactor(B, ki, factor_axis=factor_axis)
    assert BF.shape[factor_axis] == min(factor, length * 3 if fuse_first else length)
    a = np.random.default_rng(length).uniform(0.5, 1.5, (rows, length, 3)).astype("float32")
    b = np.zeros(rows, "float32")
    tir.interpret(te.lower(s, [A, B]), a, b)
    np.testing.assert_allclose(b, _REDUCERS[reducer][1](a, axis=(1, 2)), rtol=1e-4)


def test_rfactor_is_a_trace_record_that_replays_and_round_trips_through_json():
    s, A, B = _row_reduction(3, 100, 16, rfactor=True)
    assert any(isinstance(r, te.trace.RFactor) for r in s.trace)
    A2 = te.placeholder((3, 100), name="A")
    k = te.reduce_axis((0, 100), name="k")
    B2 = te.compute((3,), lambda i: te.sum(A2[i, k], axis=k), name="B")
    s2 = te.create_schedule(B2.op)
    te.replay(te.trace.from_json(te.trace.to_json(s.trace)), s2)
    assert tir.structural_equal(te.lower(s, [A, B]), te.lower(s2, [A2, B2]))
    assert json.loads(te.trace.to_json(s.trace))


def test_rfactor_errors_name_the_stage_and_axis():
    s, A, B = _row_reduction(2, 64, 16)
    with pytest.raises(ScheduleError, match=r"rfactor on stage B, axis i: it is a data axis"):
        s.rfactor(B, B.op.axis[0])
    with pytest.raises(ScheduleError, match=r"rfactor on stage B, axis k.inner: the stage was already annotated"):
        s.rfactor(B, "k.inner")


# ---- numerics on the GPU targets ------------------------------------------------------------------


def _gpu_target(name: str):
    target = tk.target("cuda -device=cpu_shim" if name == "cuda" else name)
    if name == "cuda" and shutil.which("g++") is None:
        pytest.skip("the cuda CPU shim needs g++")
    reason = getattr(target.spec, "unavailable_reason", None)
    try:
        target.spec.require_available()
    except Exception as error:   # the target says why it cannot run here
        pytest.skip(f"{name}: {reason or error}")
    return target


@pytest.mark.parametrize("target_name", ["opencl", "cuda"])
@given(rows=st.integers(1, 5), length=st.integers(1, 400), threads=st.sampled_from([8, 16, 24, 32, 64, 96]),
       reducer=st.sampled_from(sorted(_REDUCERS)), rfactor=st.booleans(), rows_per_block=st.sampled_from([1, 2]))
@settings(max_examples=6, deadline=None, derandomize=True)
def test_cross_thread_reductions_match_numpy(target_name, rows, length, threads, reducer, rfactor, rows_per_block):
    target = _gpu_target(target_name)
    rows = rows * rows_per_block
    s, A, B = _row_reduction(rows, length, threads, reducer, rfactor, rows_per_block)
    f = tk.build(s, [A, B], target=target, name="row_reduce")
    a = np.random.default_rng(length).uniform(0.9, 1.1, (rows, length)).astype("float32")
    b = np.zeros(rows, "float32")
    f(a, b)
    np.testing.assert_allclose(b, _REDUCERS[reducer][1](a, axis=1), rtol=1e-4)


def _argmax_func(rows: int, length: int, threads: int) -> tir.PrimFunc:
    """B[i] = the first k with the largest A[i, k], through a two-element ThreadAllReduce (value, index)."""
    A, B = tir.Buffer("A", (tir.const(rows), tir.const(length)), "float32"), tir.Buffer("B", (tir.const(rows),), "int32")
    x = (tir.Var("xv", "float32"), tir.Var("xi", "int32"))
    y = (tir.Var("yv", "float32"), tir.Var("yi", "int32"))
    x_wins = tir.Or(tir.GT(x[0], y[0]), tir.And(tir.EQ(x[0], y[0]), tir.LT(x[1], y[1])))
    combiner = tir.CommCombiner(x, y, (tir.Select(x_wins, x[0], y[0]), tir.Select(x_wins, x[1], y[1])),
                                (tir.FloatImm("float32", float("-inf")), tir.const(length)), "argmax")
    i, t, ko = tir.Var("i"), tir.Var("t"), tir.Var("ko")
    value, index = (tir.Buffer(n, (tir.const(1),), d, None, "local") for n, d in (("v", "float32"), ("j", "int32")))
    best = [tir.Buffer(n, (tir.const(1),), d, None, "local") for n, d in (("bv", "float32"), ("bj", "int32"))]
    zero, k = tir.const(0), ko * threads + t
    ours = (tir.Load(value, zero), tir.Load(index, zero))
    new = combiner.combine(ours, (tir.Load(A, i * length + k), k))
    nv, nj = tir.Var("nv", "float32"), tir.Var("nj", "int32")
    update = tir.IfThenElse(tir.LT(k, tir.const(length)), tir.LetStmt(nv, new[0], tir.LetStmt(nj, new[1], tir.SeqStmt(
        (tir.Store(value, nv, zero), tir.Store(index, nj, zero))))))
    body = tir.SeqStmt((
        tir.Store(value, combiner.identity[0], zero), tir.Store(index, combiner.identity[1], zero),
        tir.For(ko, zero, tir.const(-(-length // threads)), tir.ForKind.SERIAL, update),
        tir.ThreadAllReduce(combiner, ours, tuple(best), ("threadIdx.x",)),
        tir.IfThenElse(tir.EQ(t, zero), tir.Store(B, tir.Load(best[1], zero), i))))
    for buffer in (value, index, *best):
        body = tir.Allocate(buffer, body)
    body = tir.For(t, zero, tir.const(threads), tir.ForKind.THREAD_BINDING, body, "threadIdx.x")
    body = tir.For(i, zero, tir.const(rows), tir.ForKind.THREAD_BINDING, body, "blockIdx.x")
    return tir.PrimFunc("argmax_rows", (A, B), body)


@pytest.mark.parametrize("target_name", ["opencl", "cuda"])
@pytest.mark.parametrize("threads", [24, 64])
def test_a_tuple_reduction_argmax_keeps_the_first_index_of_the_maximum(target_name, threads):
    target = _gpu_target(target_name)
    rows, length = 3, 150
    f = tk.build(_argmax_func(rows, length, threads), target=target, name="argmax_rows")
    a = np.random.default_rng(threads).integers(0, 20, (rows, length)).astype("float32")   # many ties
    b = np.zeros(rows, "int32")
    f(a, b)
    np.testing.assert_array_equal(b, a.argmax(axis=1))
