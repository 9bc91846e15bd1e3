"""te.lower: loop nests from schedules, checked through tir.interpret and by IR shape."""
import io
import mmap
import subprocess
import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import InternalError
from tensorkiln.passes import Pass, PassContext, PassTimingInstrument, PrintIRInstrument
from tensorkiln.tir import LoopPassManager
from tensorkiln.tir.visit import post_order_visit


def matmul(n=16, m=None, k=None):
    m, k = m or n, k or n
    A = te.placeholder((m, k), name="A")
    B = te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, r] * B[r, j], axis=r), name="C")
    return A, B, C


def run(func, *inputs, out_shapes, dtype="float32"):
    outs = [np.zeros(s, dtype) for s in out_shapes]
    tir.interpret(func, *inputs, *outs)
    return outs


def rand(*shape, seed=0):
    return np.random.default_rng(seed).uniform(-1, 1, shape).astype("float32")


def collect(stmt, kind):
    found = []

    def visit(x):
        if isinstance(x, kind):
            found.append(x)
        for child in (getattr(x, "stmts", None) or ()):
            visit(child)
        for name in ("body", "then_case", "else_case"):
            child = getattr(x, name, None)
            if isinstance(child, tir.Stmt):
                visit(child)
    visit(stmt)
    return found


def loads_of(node):
    found = []
    post_order_visit(node, lambda x: found.append(x) if isinstance(x, tir.Load) else None)
    return found


def test_lower_is_exported_at_top_level():
    A, B, C = matmul(4)
    s = te.create_schedule(C.op)
    assert tk.lower is te.lower
    assert tir.structural_equal(tk.lower(s, [A, B, C]), te.lower(s, [A, B, C]))


def _unrolled_matmul():
    A, B, C = matmul(8)
    s = te.create_schedule(C.op)
    _, inner = s[C].split(C.op.axis[1], factor=4)
    s[C].unroll(inner)
    return s, [A, B, C]


def test_loop_passes_run_through_the_pass_manager_with_instruments():
    s, args = _unrolled_matmul()
    stream, timing = io.StringIO(), PassTimingInstrument()
    context = PassContext(verify=True, instruments=[timing, PrintIRInstrument(after=["unroll_loops"], stream=stream)])
    func = te.lower(s, args, context=context)
    assert set(timing.times) == set(te.LOWER_PIPELINE)
    assert stream.getvalue().startswith("# IR after unroll_loops\n")
    assert func.attr("skipped_passes") is None


def test_disabled_loop_passes_are_recorded_on_the_func():
    s, args = _unrolled_matmul()
    func = te.lower(s, args, disabled=("unroll_loops",))
    assert func.attr("skipped_passes") == (("unroll_loops", "disabled by PassContext"),)
    assert any(loop.kind is tir.ForKind.UNROLLED for loop in collect(func.body, tir.For))
    context = PassContext(disabled={"unroll_loops", "fold_constants"})   # one context names graph and loop passes
    tir.assert_structural_equal(te.lower(s, args, context=context), func)


def test_verify_catches_a_loop_pass_that_drops_a_loop():
    s, args = _unrolled_matmul()

    def drop_outer_loop(func):
        return tir.PrimFunc(func.name, func.params, func.body.body, func.attrs)

    with pytest.raises(InternalError, match=r"pass 'drop_outer_loop' produced invalid IR: .*unbound variables"):
        LoopPassManager(PassContext(verify=True)).run(te.lower(s, args), (Pass("drop_outer_loop", drop_outer_loop),))


def test_params_are_the_args_in_order():
    A, B, C = matmul(4, m=3, k=5)
    func = te.lower(te.create_schedule(C.op), [B, A, C], name="mm")
    assert func.name == "mm"
    assert [(p.name, tuple(x.value for x in p.shape), p.dtype) for p in func.params] == \
        [("B", (5, 4), "float32"), ("A", (3, 5), "float32"), ("C", (3, 4), "float32")]


def test_dividing_split_is_branch_free_and_tail_split_is_guarded():
    A, B, C = matmul(16)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4)
    assert not collect(te.lower(s, [A, B, C]).body, tir.IfThenElse)
    A, B, C = matmul(10)
    s = te.create_schedule(C.op)
    s[C].split(C.op.axis[0], factor=4)
    func = te.lower(s, [A, B, C])
    assert collect(func.body, tir.IfThenElse)
    a, b = rand(10, 10), rand(10, 10, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(10, 10)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_split_reduction_with_tail():
    A, B, C = matmul(6, k=7)
    s = te.create_schedule(C.op)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=3)
    s[C].reorder(ko, *C.op.axis, ki)
    func = te.lower(s, [A, B, C])
    a, b = rand(6, 7), rand(7, 6, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(6, 6)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_elementwise_vectorize_gives_vector_code():
    A = te.placeholder((4, 16), name="A")
    B = te.compute((4, 16), lambda i, j: A[i, j] * 2.0 + 1.0, name="B")
    s = te.create_schedule(B.op)
    jo, ji = s[B].split(B.op.axis[1], factor=8)
    s[B].vectorize(ji)
    func = te.lower(s, [A, B])
    stores = collect(func.body, tir.Store)
    assert len(stores) == 1 and isinstance(stores[0].index, tir.Ramp) and stores[0].value.dtype == "float32x8"
    a = rand(4, 16)
    np.testing.assert_allclose(run(func, a, out_shapes=[(4, 16)])[0], a * 2 + 1, rtol=1e-6, atol=1e-6)


def test_compute_at_computes_only_the_needed_region():
    A = te.placeholder((12,), name="A")
    B = te.compute((12,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((10,), lambda i: B[i] + B[i + 2], name="C")
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[B].compute_at(s[C], io)
    func = te.lower(s, [A, C])
    alloc = collect(func.body, tir.Allocate)
    assert [a.buffer.shape[0].value for a in alloc] == [6]
    a = rand(12)
    b = a + 1
    np.testing.assert_allclose(run(func, a, out_shapes=[(10,)])[0], b[:10] + b[2:12], rtol=1e-6, atol=1e-6)


def test_compute_inline_substitutes_the_producer():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_inline()
    func = te.lower(s, [A, C])
    assert not collect(func.body, tir.Allocate)
    a = rand(8)
    np.testing.assert_allclose(run(func, a, out_shapes=[(8,)])[0], a * 3 + 1, rtol=1e-6, atol=1e-6)


def test_global_intermediate_is_allocated():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    func = te.lower(te.create_schedule(C.op), [A, C])
    (alloc,) = collect(func.body, tir.Allocate)
    assert alloc.buffer.scope == "global" and alloc.buffer.name == "B"


def test_intermediate_in_args_is_written_to_its_param():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] * 3.0, name="B")
    C = te.compute((8,), lambda i: B[i] + 1.0, name="C")
    func = te.lower(te.create_schedule(C.op), [A, B, C])
    a = rand(8)
    b, c = run(func, a, out_shapes=[(8,), (8,)])
    np.testing.assert_allclose(b, a * 3, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(c, a * 3 + 1, rtol=1e-6, atol=1e-6)


def gpu_matmul_schedule(n=32, tile=8, chunk=4):
    A, B, C = matmul(n)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    BB = s.cache_read(B, "shared", [C])
    CC = s.cache_write(C, "local")
    i, j = s[C].op.axis
    bx, tx = s[C].split(i, factor=tile)
    by, ty = s[C].split(j, factor=tile)
    s[C].reorder(bx, by, tx, ty)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(by, te.thread_axis("blockIdx.y"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].bind(ty, te.thread_axis("threadIdx.y"))
    s[CC].compute_at(s[C], ty)
    ko, ki = s[CC].split(s[CC].op.reduce_axis[0], factor=chunk)
    s[AA].compute_at(s[CC], ko)
    s[BB].compute_at(s[CC], ko)
    return s, (A, B, C)


def test_gpu_schedule_lowers_to_shared_local_barriers_and_bindings():
    s, (A, B, C) = gpu_matmul_schedule()
    func = te.lower(s, [A, B, C])
    allocs = {a.buffer.name: a.buffer for a in collect(func.body, tir.Allocate)}
    assert allocs["A.shared"].scope == "shared" and allocs["B.shared"].scope == "shared"
    assert allocs["C.local"].scope == "local"
    assert isinstance(func.body, tir.Allocate) and func.body.buffer.scope == "shared"  # hoisted
    assert len(collect(func.body, tir.Barrier)) == 2   # after the cooperative load, and before the next chunk
    tags = {f.thread_tag for f in collect(func.body, tir.For) if f.kind is tir.ForKind.THREAD_BINDING}
    assert tags == {"blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"}
    assert dict(func.attrs)["thread_extents"] == (("blockIdx.x", 4), ("blockIdx.y", 4), ("threadIdx.x", 8),
                                                  ("threadIdx.y", 8))
    a, b = rand(32, 32), rand(32, 32, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(32, 32)])[0], a @ b, rtol=1e-4, atol=1e-5)


def test_shared_cache_at_block_axis_uses_cooperative_thread_loops():
    A, B, C = matmul(16)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    i, j = s[C].op.axis
    bx, tx = s[C].split(i, factor=4)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[C], bx)
    func = te.lower(s, [A, B, C])
    loader = [f for f in collect(func.body, tir.For) if f.kind is tir.ForKind.THREAD_BINDING
              and f.thread_tag == "threadIdx.x" and "A.shared" in str(f)]
    assert loader, str(func)
    barriers = collect(func.body, tir.Barrier)
    assert len(barriers) == 1   # block-level attach: no enclosing serial loop, no trailing barrier
    a, b = rand(16, 16), rand(16, 16, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(16, 16)])[0], a @ b, rtol=1e-4, atol=1e-5)


def test_storage_align_pads_the_row_stride():
    A, B, C = matmul(8)
    s = te.create_schedule(C.op)
    AA = s.cache_read(A, "shared", [C])
    s[AA].storage_align(AA.op.axis[0], 16, 1)
    func = te.lower(s, [A, B, C])
    alloc = [a for a in collect(func.body, tir.Allocate) if a.buffer.name == "A.shared"][0]
    assert alloc.buffer.shape[0].value == 8 * 17
    a, b = rand(8, 8), rand(8, 8, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(8, 8)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_pragma_reaches_for_annotations():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].pragma(B.op.axis[0], "pipeline", 2)
    func = te.lower(s, [A, B])
    assert func.body.annotations == (("pipeline", 2),)


def gemm_intrinsic():
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), name="a")
    b = te.placeholder((K, N), name="b")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    return te.decl_tensor_intrin(c, "gemm_acc")


def test_tensorize_call_convention_with_full_reduction():
    A, B, C = matmul(8, m=12, k=6)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=2)
    s[C].reorder(io, jo, ii, ji)
    s[C].tensorize(ii, gemm_intrinsic())
    func = te.lower(s, [A, B, C])
    (call_stmt,) = collect(func.body, tir.Evaluate)
    call = call_stmt.value
    assert call.dtype == "void" and call.name == "gemm_acc"
    pointers = call.args[:3]
    assert [p.buffer.name for p in pointers] == ["A", "B", "C"]
    assert all(isinstance(p, tir.BufferPointer) for p in pointers)
    io_v, jo_v = io.var, jo.var
    tir.assert_structural_equal(pointers[0].index, io_v * 24)
    tir.assert_structural_equal(pointers[1].index, jo_v * 2)
    tir.assert_structural_equal(pointers[2].index, io_v * 32 + jo_v * 2)
    rest = call.args[3:]
    # strides (A: 6, B: 8, C: 8), extents in order of first appearance (M, K, N), accumulate
    assert [(x.dtype, x.value) for x in rest[:6]] == [("int64", 6), ("int64", 8), ("int64", 8),
                                                       ("int64", 4), ("int64", 6), ("int64", 2)]
    assert (rest[6].dtype, rest[6].value) == ("int32", 0)
    assert len(rest) == 7
    a, b = rand(12, 6), rand(6, 8, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(12, 8)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_tensorize_inside_split_reduction_accumulates_after_first_chunk():
    A, B, C = matmul(8)
    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    jo, ji = s[C].split(C.op.axis[1], factor=4)
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=2)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, gemm_intrinsic())
    func = te.lower(s, [A, B, C])
    (call_stmt,) = collect(func.body, tir.Evaluate)
    accumulate = call_stmt.value.args[-1]
    expected = tir.Select(tir.EQ(ko.var, tir.IntImm("int32", 0)), tir.IntImm("int32", 0), tir.IntImm("int32", 1))
    tir.assert_structural_equal(accumulate, expected)
    assert not collect(func.body, tir.Store)   # no separate reset of C
    a, b = rand(8, 8), rand(8, 8, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(8, 8)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_tensorize_batched_matmul_with_leading_fixed_axis():
    A = te.placeholder((2, 4, 4), name="A")
    B = te.placeholder((2, 4, 4), name="B")
    r = te.reduce_axis((0, 4), name="k")
    C = te.compute((2, 4, 4), lambda b, i, j: te.sum(A[b, i, r] * B[b, r, j], axis=r), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[1], gemm_intrinsic())
    func = te.lower(s, [A, B, C])
    a, b = rand(2, 4, 4), rand(2, 4, 4, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(2, 4, 4)])[0], a @ b, rtol=1e-5, atol=1e-5)


def test_tensorize_on_a_local_cache_stage():
    A, B, C = matmul(8)
    s = te.create_schedule(C.op)
    CC = s.cache_write(C, "local")
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[CC].compute_at(s[C], io)
    s[CC].tensorize(CC.op.axis[0], gemm_intrinsic())
    func = te.lower(s, [A, B, C])
    a, b = rand(8, 8), rand(8, 8, seed=1)
    np.testing.assert_allclose(run(func, a, b, out_shapes=[(8, 8)])[0], a @ b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "float64", "int8", "int16", "int32", "int64", "uint8"])
def test_dtypes_roundtrip(dtype):
    A = te.placeholder((6,), dtype, name="A")
    B = te.compute((6,), lambda i: A[i] + A[i], name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = (np.arange(6) - 2).astype(dtype)
    np.testing.assert_array_equal(run(func, a, out_shapes=[(6,)], dtype=dtype)[0], a + a)


def test_bool_and_casts():
    A = te.placeholder((6,), "float32", name="A")
    M = te.compute((6,), lambda i: A[i] > 0.0, name="M")
    C = te.compute((6,), lambda i: te.if_then_else(M[i], A[i].astype("int32"), te.const(-1)), name="C")
    func = te.lower(te.create_schedule(C.op), [A, C])
    a = np.array([-1.5, 2.7, 0.0, 3.2, -0.1, 9.9], "float32")
    out = run(func, a, out_shapes=[(6,)], dtype="int32")[0]
    np.testing.assert_array_equal(out, np.where(a > 0, a.astype("int32"), -1))


MATH = [
    (te.exp, np.exp), (te.log, lambda x: np.log(np.abs(x) + 1)), (te.sqrt, lambda x: np.sqrt(np.abs(x))),
    (te.tanh, np.tanh), (te.sigmoid, lambda x: 1 / (1 + np.exp(-x))), (te.abs, np.abs),
    (te.floor, np.floor), (te.ceil, np.ceil),
]


@pytest.mark.parametrize("fn, ref", MATH, ids=lambda x: getattr(x, "__name__", "ref"))
def test_math_functions_lower_to_named_calls(fn, ref):
    A = te.placeholder((8,), name="A")
    if fn is te.log:
        B = te.compute((8,), lambda i: te.log(te.abs(A[i]) + 1.0), name="B")
    elif fn is te.sqrt:
        B = te.compute((8,), lambda i: te.sqrt(te.abs(A[i])), name="B")
    else:
        B = te.compute((8,), lambda i: fn(A[i]), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    assert fn.__name__ in str(func) or (fn is te.abs and "fabs" in str(func))
    a = rand(8) * 3
    np.testing.assert_allclose(run(func, a, out_shapes=[(8,)])[0], ref(a), rtol=1e-5, atol=1e-6)


def test_custom_comm_reducer_and_multi_axis_reduction():
    A = te.placeholder((3, 4, 5), name="A")
    mysum = te.comm_reducer(lambda x, y: x + y, lambda t: te.const(0.0, t), name="mysum")
    r1, r2 = te.reduce_axis((0, 4), name="r1"), te.reduce_axis((0, 5), name="r2")
    B = te.compute((3,), lambda i: mysum(A[i, r1, r2], axis=[r1, r2]), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = rand(3, 4, 5)
    np.testing.assert_allclose(run(func, a, out_shapes=[(3,)])[0], a.sum(axis=(1, 2)), rtol=1e-5, atol=1e-5)


def test_reduction_with_where_condition_and_min():
    A = te.placeholder((4, 6), name="A")
    k = te.reduce_axis((0, 6), name="k")
    B = te.compute((4,), lambda i: te.min(A[i, k], axis=k, where=k < 3), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = rand(4, 6)
    np.testing.assert_allclose(run(func, a, out_shapes=[(4,)])[0], a[:, :3].min(axis=1))


def test_trace_records_and_replays():
    def build():
        A = te.placeholder((16, 16), name="A")
        B = te.compute((16, 16), lambda i, j: A[i, j] * 2.0, name="B")
        return A, B
    A, B = build()
    s = te.create_schedule(B.op)
    xo, yo, xi, yi = s[B].tile(B.op.axis[0], B.op.axis[1], 4, 8)
    s[B].vectorize(yi)
    s[B].parallel(xo)
    assert [type(r).__name__ for r in s.trace] == ["Tile", "Vectorize", "Parallel"]
    assert s.trace[0] == te.trace.Tile(stage="B", x="i", y="j", x_factor=4, y_factor=8)
    A2, B2 = build()
    s2 = te.replay(s.trace, te.create_schedule(B2.op))
    tir.assert_structural_equal(te.lower(s, [A, B]), te.lower(s2, [A2, B2]))


def test_vectorize_turns_guarded_padding_reads_into_masked_loads():
    A = te.placeholder((6,), name="A")
    P = te.compute((8,), lambda i: te.if_then_else(tir.And(i >= 1, i < 7), A[i - 1], 0.0), name="P")
    s = te.create_schedule(P.op)
    s[P].vectorize(P.op.axis[0])
    func = te.lower(s, [A, P])
    assert isinstance(func.body, tir.Store) and func.body.value.lanes == 8, str(func)
    (load,) = loads_of(func.body.value)
    assert load.lanes == 8 and load.predicate is not None and load.predicate.lanes == 8
    a = rand(6)
    np.testing.assert_allclose(run(func, a, out_shapes=[(8,)])[0], np.pad(a, 1))

def test_shared_stage_inside_thread_loops_is_sized_for_the_whole_block():
    # TVM's NeedRelax: a shared tile serves every threadIdx of the block; a local one, one thread
    s, (A, B, C) = gpu_matmul_schedule(n=32, tile=8, chunk=4)
    func = te.lower(s, [A, B, C])
    allocs = {a.buffer.name: a.buffer for a in collect(func.body, tir.Allocate)}
    assert allocs["A.shared"].shape[0].value == 8 * 4      # rows of the block x k chunk, not 1 x 4
    assert allocs["B.shared"].shape[0].value == 4 * 8
    assert allocs["C.local"].shape[0].value == 1


def test_global_stage_inside_thread_loops_covers_every_block_and_thread():
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    C = te.compute((64,), lambda i: B[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bx, tx = s[C].split(C.op.axis[0], factor=16)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[B].compute_at(s[C], tx)
    func = te.lower(s, [A, C])
    (alloc,) = collect(func.body, tir.Allocate)
    assert alloc.buffer.name == "B" and alloc.buffer.shape[0].value == 64
    a = rand(64)
    np.testing.assert_allclose(run(func, a, out_shapes=[(64,)])[0], a * 2 + 1, rtol=1e-6)


def test_reads_guarded_by_if_then_else_become_predicated_loads():
    A = te.placeholder((1, 1, 4, 4), name="A")
    P = te.compute((1, 1, 6, 6), lambda n, c, i, j: te.if_then_else(
        tir.And(tir.And(i >= 1, i < 5), tir.And(j >= 1, j < 5)), A[n, c, i - 1, j - 1], 0.0), name="P")
    inside = te.compute((1, 1, 4, 4), lambda n, c, i, j: te.if_then_else(A[n, c, i, j] > 0.0, A[n, c, i, j], 0.0),
                        name="R")
    func = te.lower(te.create_schedule(P.op), [A, P])
    (load,) = loads_of(func.body)
    assert load.predicate is not None, str(func)
    # an index the loop bounds keep in range needs no predicate
    func = te.lower(te.create_schedule(inside.op), [A, inside])
    assert all(load.predicate is None for load in loads_of(func.body)), str(func)


def test_duplicate_tensor_names_get_unique_buffer_names():
    A = te.placeholder((4,), name="T_add")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="T_add")
    func = te.lower(te.create_schedule(B.op), [A, B])
    assert [p.name for p in func.params] == ["T_add", "T_add.1"]


_GUARDED_PADDING = """
import ctypes, mmap, numpy as np, tensorkiln as tk
from tensorkiln import te, tir
n = mmap.PAGESIZE // 4
memory = mmap.mmap(-1, 3 * mmap.PAGESIZE)
base = ctypes.addressof(ctypes.c_char.from_buffer(memory))
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base, mmap.PAGESIZE, 0) == 0 and libc.mprotect(base + 2 * mmap.PAGESIZE, mmap.PAGESIZE, 0) == 0
a = np.frombuffer(memory, "float32", n, offset=mmap.PAGESIZE)   # one page between two unreadable ones
a[...] = 1.0
A = te.placeholder((n,), name="A")
P = te.compute((n + 2,), lambda i: te.if_then_else(tir.And(i >= 1, i < n + 1), A[i - 1], 0.0), name="P")
f = tk.build(te.create_schedule(P.op), [A, P], target="llvm", name="pad")
p = np.full(n + 2, 7.0, "float32")
f(a, p)
assert p[0] == 0 and p[-1] == 0 and (p[1:-1] == 1).all(), p
print("ok")
"""


def test_padded_read_at_the_edge_of_an_allocation_stays_in_bounds_on_llvm():
    """cpu_llvm evaluates both sides of a Select; an unpredicated A[i - 1] read A[-1] (a crash here)."""
    done = subprocess.run([sys.executable, "-c", _GUARDED_PADDING], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and done.stdout.strip() == "ok", (done.returncode, done.stderr[-2000:])
