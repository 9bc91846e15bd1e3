"""Every illegal schedule request raises ScheduleError naming the stage, the axis and why."""
import pytest

from tensorkiln import te, tir
from tensorkiln.ir.errors import ScheduleError, ShapeError


def matmul(n=16):
    A = te.placeholder((n, n), name="A")
    B = te.placeholder((n, n), name="B")
    k = te.reduce_axis((0, n), name="k")
    C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return A, B, C


def gemm(name="gemm", fixed=None, op="mul"):
    M, N, K = (te.var("M"), te.var("N"), te.var("K")) if fixed is None else fixed
    a = te.placeholder((M, K), name="a")
    b = te.placeholder((K, N), name="b")
    k = te.reduce_axis((0, K), name="k")
    body = (lambda i, j: te.sum(a[i, k] * b[k, j], axis=k)) if op == "mul" else \
        (lambda i, j: te.sum(a[i, k] + b[k, j], axis=k))
    return te.decl_tensor_intrin(te.compute((M, N), body, name="c"), name)


@pytest.fixture
def mm():
    A, B, C = matmul()
    return A, B, C, te.create_schedule(C.op)


@pytest.mark.parametrize("kwargs, pattern", [
    ({"factor": 0}, r"split on stage C, axis i: factor=0 must be a positive integer"),
    ({"factor": -2}, r"factor=-2 must be a positive integer"),
    ({"nparts": 0}, r"nparts=0 must be a positive integer"),
    ({"factor": 2.5}, r"factor=2.5 must be a positive integer"),
    ({}, r"give exactly one of factor= or nparts="),
    ({"factor": 2, "nparts": 2}, r"give exactly one of factor= or nparts="),
])
def test_split_rejects_bad_factors(mm, kwargs, pattern):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=pattern):
        s[C].split(C.op.axis[0], **kwargs)


def test_split_of_an_axis_that_was_already_split(mm):
    A, B, C, s = mm
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"split on stage C, axis i: the axis no longer exists as a loop "
                                            r"\(it was already split or fused\)"):
        s[C].split(C.op.axis[0], factor=2)


def test_fuse_of_an_axis_that_was_already_fused(mm):
    A, B, C, s = mm
    i, j = C.op.axis
    s[C].fuse(i, j)
    with pytest.raises(ScheduleError, match=r"fuse on stage C, axis i: the axis no longer exists"):
        s[C].fuse(i, j)


def test_fuse_needs_adjacent_axes(mm):
    A, B, C, s = mm
    i, j = C.op.axis
    with pytest.raises(ScheduleError, match=r"fuse on stage C, axis j: axes \['j', 'i'\] are not adjacent"):
        s[C].fuse(j, i)


def test_fuse_rejects_reduction_with_data_axis(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"cannot fuse a reduction axis with a data axis"):
        s[C].fuse(C.op.axis[1], C.op.reduce_axis[0])


def test_reorder_with_an_axis_of_another_stage():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    with pytest.raises(ScheduleError, match=r"reorder on stage C, axis i: it belongs to stage B; use an axis of C"):
        s[C].reorder(B.op.axis[0])


def test_reorder_with_a_duplicated_axis(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"reorder on stage C, axis i: the axis appears twice"):
        s[C].reorder(C.op.axis[0], C.op.axis[0])


@pytest.mark.parametrize("primitive", ["vectorize", "parallel"])
def test_vectorize_or_parallel_on_a_reduction_axis(mm, primitive):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=rf"{primitive} on stage C, axis k: it is a reduction axis"):
        getattr(s[C], primitive)(C.op.reduce_axis[0])


def test_vectorize_on_a_split_reduction_axis(mm):
    A, B, C, s = mm
    ko, ki = s[C].split(C.op.reduce_axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"vectorize on stage C, axis k.inner: it is a reduction axis"):
        s[C].vectorize(ki)


def test_bind_a_reduction_axis_to_a_block_index(mm):
    """threadIdx may share a reduction (tests/te/test_cross_thread_reduction.py); blocks cannot."""
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"bind on stage C, axis k: it is a reduction axis; only threadIdx"):
        s[C].bind(C.op.reduce_axis[0], te.thread_axis("blockIdx.x"))


def test_bind_needs_a_thread_axis(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"bind on stage C, axis i: .* is not a te.thread_axis"):
        s[C].bind(C.op.axis[0], C.op.axis[1])


def test_bind_the_same_thread_tag_twice(mm):
    A, B, C, s = mm
    s[C].bind(C.op.axis[0], te.thread_axis("threadIdx.x"))
    with pytest.raises(ScheduleError, match=r"threadIdx.x is already bound to axis i"):
        s[C].bind(C.op.axis[1], te.thread_axis("threadIdx.x"))


def test_unknown_thread_tag():
    with pytest.raises(ShapeError, match=r"unknown tag 'warpIdx.x'"):
        te.thread_axis("warpIdx.x")


def test_compute_inline_of_a_reduction():
    A, B, C = matmul()
    D = te.compute(C.shape, lambda i, j: C[i, j] + 1.0, name="D")
    s = te.create_schedule(D.op)
    with pytest.raises(ScheduleError, match=r"compute_inline on stage C: a reduction cannot be inlined"):
        s[C].compute_inline()


def test_compute_inline_of_an_output(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"compute_inline on stage C: it is an output of the schedule"):
        s[C].compute_inline()


def test_compute_at_of_an_output():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: A[i] * 2.0, name="C")
    s = te.create_schedule([B.op, C.op])
    with pytest.raises(ScheduleError, match=r"compute_at on stage B: it is an output of the schedule"):
        s[B].compute_at(s[C], C.op.axis[0])


def test_compute_at_an_axis_split_afterwards():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].split(C.op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match=r"compute_at of stage B at C.i: axis i is no longer a loop of C"):
        te.lower(s, [A, C])


def test_compute_at_a_stage_that_does_not_read_it():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: A[i] + 1.0, name="B")
    C = te.compute((8,), lambda i: A[i] * 2.0, name="C")
    D = te.compute((8,), lambda i: B[i] + C[i], name="D")
    s = te.create_schedule(D.op)
    s[B].compute_at(s[C], C.op.axis[0])
    with pytest.raises(ScheduleError, match=r"compute_at of stage B at C.i: stage D also reads B but is not computed inside C"):
        te.lower(s, [A, D])


def test_placeholder_has_no_stage(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"A is a placeholder \(input\), which has no loops to schedule"):
        s[A]


def test_unknown_cache_scope(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"cache_read of A: unknown scope 'texture'"):
        s.cache_read(A, "texture", [C])


def test_cache_write_after_scheduling(mm):
    A, B, C, s = mm
    s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"cache_write of C: stage C was already scheduled"):
        s.cache_write(C, "local")


def test_storage_align_bad_offset(mm):
    A, B, C, s = mm
    AA = s.cache_read(A, "shared", [C])
    with pytest.raises(ScheduleError, match=r"storage_align on stage A.shared, axis ax0: offset=5 must be in \[0, factor=4\)"):
        s[AA].storage_align(AA.op.axis[0], 4, 5)


def test_lower_needs_every_placeholder_in_args(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"placeholder B is read but not in args"):
        te.lower(s, [A, C])


def test_lower_needs_the_outputs_in_args(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"output C is not in args"):
        te.lower(s, [A, B])


def test_tensorize_onto_a_different_expression(mm):
    A, B, C, s = mm
    io, ii = s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"tensorize on stage C, axis i.inner: the loop nest does not match "
                                            r"intrinsic 'gemm': expressions differ"):
        s[C].tensorize(ii, gemm(op="add"))


def test_tensorize_with_a_fixed_size_intrinsic_of_another_size(mm):
    A, B, C, s = mm
    io, ii = s[C].split(C.op.axis[0], factor=4)
    with pytest.raises(ScheduleError, match=r"axis i covers 4 points in the tile but the intrinsic's axis i has extent 8"):
        s[C].tensorize(ii, gemm(fixed=(8, 16, 16)))


def test_tensorize_over_a_split_tail(mm):
    A, B, C, s = mm
    io, ii = s[C].split(C.op.axis[0], factor=5)
    with pytest.raises(ScheduleError, match=r"split of i \(16 by 5\) leaves a tail inside the tile"):
        s[C].tensorize(ii, gemm())


def test_tensorize_over_a_non_contiguous_tile(mm):
    A, B, C, s = mm
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].reorder(ii, io)
    with pytest.raises(ScheduleError, match=r"the tile is not contiguous along i"):
        s[C].tensorize(io, gemm())


def test_tensorize_over_a_fused_loop(mm):
    A, B, C, s = mm
    fused = s[C].fuse(*C.op.axis)
    with pytest.raises(ScheduleError, match=r"fused axes cannot be tensorized"):
        s[C].tensorize(fused, gemm())


def test_tensorize_needs_unit_stride_in_the_last_tile_dimension(mm):
    A, B, C, s = mm
    AA = s.cache_read(A, "global", [C])
    s[AA].storage_align(AA.op.axis[1], 2, 0)
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ii, gemm())
    with pytest.raises(ScheduleError, match=r"the last tile dimension of A.global has stride 2, but intrinsics need "
                                            r"stride 1"):
        te.lower(s, [A, B, C])


def test_tensorize_needs_a_tensor_intrin(mm):
    A, B, C, s = mm
    with pytest.raises(ScheduleError, match=r"is not a te.TensorIntrin"):
        s[C].tensorize(C.op.axis[0], "gemm_accelerator")


def test_nested_reduction_is_rejected():
    A = te.placeholder((4, 4), name="A")
    k = te.reduce_axis((0, 4), name="k")
    with pytest.raises(ShapeError, match=r"must be the whole body of the compute"):
        te.compute((4,), lambda i: te.sum(A[i, k], axis=k) * 2.0, name="C")


def test_wrong_number_of_indices():
    A = te.placeholder((4, 4), name="A")
    with pytest.raises(ShapeError, match=r"tensor A has shape \(4, 4\) \(2 dims\) but is indexed with 1 indices"):
        A[0]


def test_numpy_scalars_are_numbers_in_schedules_and_in_messages(mm):
    """numpy 2 reprs ("np.float64(2.5)") never reach a message; numpy integers are accepted as integers."""
    import numpy as np

    A, B, C, s = mm
    with pytest.raises(ScheduleError) as caught:
        s[C].split(C.op.axis[0], factor=np.float64(2.5))
    assert "factor=2.5 must be a positive integer" in str(caught.value) and "np." not in str(caught.value)
    outer, inner = s[C].split(C.op.axis[0], factor=np.int64(4))
    assert s.trace[-1].factor == 4 and type(s.trace[-1].factor) is int
    with pytest.raises(ShapeError) as caught:
        te.placeholder((np.int32(17), np.float32(2.5)), name="X")
    assert "te.placeholder X: extent 2.5 is not an int or a te.var" in str(caught.value)
    assert "np." not in str(caught.value)
    X = te.placeholder((np.int32(17),), name="X")
    assert X.shape == (17,) and type(X.shape[0]) is int
    assert isinstance(tir.const(np.float32(1.5)), tir.FloatImm) and tir.const(np.float32(1.5)).value == 1.5
