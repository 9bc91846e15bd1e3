"""unroll_loops, vectorize_loops, remove_no_op, hoist_shared_allocations: IR in, IR out."""
from tensorkiln import tir
from tensorkiln.tir import ForKind, IntImm, Var
from tensorkiln.tir.visit import post_order_visit


def c(v):
    return IntImm("int32", v)


def _func(body, *bufs):
    return tir.PrimFunc("f", bufs, body)


def test_unroll_small_loop_into_copies():
    i = Var("i")
    A = tir.Buffer("A", (c(4),), "float32")
    before = _func(tir.For(i, c(0), c(3), ForKind.UNROLLED, tir.Store(A, tir.const(0.0), i)), A)
    expected = _func(tir.SeqStmt(tuple(tir.Store(A, tir.const(0.0), c(k)) for k in range(3))), A)
    tir.assert_structural_equal(tir.unroll_loops(before), expected)


def test_unroll_keeps_large_loops_marked():
    i = Var("i")
    A = tir.Buffer("A", (c(64),), "float32")
    before = _func(tir.For(i, c(0), c(64), ForKind.UNROLLED, tir.Store(A, tir.const(0.0), i)), A)
    assert tir.unroll_loops(before) is before


def test_unroll_copies_only_the_taken_branch_of_a_select_on_the_loop_index():
    """select(i == 0, B[0], select(i == 1, B[1] * 2, B[2])) unrolled over i: each copy is its row's
    expression alone (Winograd's transform rows select so), and a select on another variable stays."""
    i, j = Var("i"), Var("j")
    A = tir.Buffer("A", (c(3),), "float32")
    B = tir.Buffer("B", (c(3),), "float32")
    chain = tir.Select(tir.EQ(i, c(0)), tir.Load(B, c(0)),
                       tir.Select(tir.EQ(i, c(1)), tir.Load(B, c(1)) * tir.const(2.0), tir.Load(B, c(2))))
    before = _func(tir.For(i, c(0), c(3), ForKind.UNROLLED, tir.Store(A, chain, i)), A, B)
    expected = _func(tir.SeqStmt((tir.Store(A, tir.Load(B, c(0)), c(0)),
                                  tir.Store(A, tir.Load(B, c(1)) * tir.const(2.0), c(1)),
                                  tir.Store(A, tir.Load(B, c(2)), c(2)))), A, B)
    tir.assert_structural_equal(tir.unroll_loops(before), expected)
    other = tir.Select(tir.EQ(j, c(0)), tir.Load(B, i), tir.const(0.0))
    kept = tir.unroll_loops(_func(tir.For(i, c(0), c(2), ForKind.UNROLLED, tir.Store(A, other, i)), A, B))
    selects = []
    post_order_visit(kept.body, lambda node: selects.append(node) if isinstance(node, tir.Select) else None)
    assert len(selects) == 2


def test_vectorize_contiguous_loop_into_ramps():
    i, j = Var("i"), Var("j")
    A = tir.Buffer("A", (c(32),), "float32")
    B = tir.Buffer("B", (c(32),), "float32")
    before = _func(tir.For(j, c(0), c(8), ForKind.VECTORIZED,
                           tir.Store(B, tir.Load(A, i * 8 + j) + tir.Load(A, i), i * 8 + j)), A, B)
    ramp = tir.Ramp(i * 8 + c(0), c(1), 8)
    expected = _func(tir.Store(B, tir.Load(A, ramp) + tir.Broadcast(tir.Load(A, i), 8), ramp), A, B)
    after = tir.vectorize_loops(before)
    tir.assert_structural_equal(after, expected)


def test_vectorize_leaves_strided_access_as_a_vectorized_loop():
    j = Var("j")
    A = tir.Buffer("A", (c(32),), "float32")
    before = _func(tir.For(j, c(0), c(8), ForKind.VECTORIZED, tir.Store(A, tir.const(1.0), j * 2)), A)
    assert tir.vectorize_loops(before) is before


def test_remove_no_op_drops_empty_loops_and_extent_one_loops():
    i, j = Var("i"), Var("j")
    A = tir.Buffer("A", (c(4),), "float32")
    before = _func(tir.SeqStmt((
        tir.For(i, c(0), c(4), ForKind.SERIAL, tir.SeqStmt(())),
        tir.For(j, c(0), c(1), ForKind.SERIAL, tir.Store(A, tir.const(1.0), j)),
    )), A)
    expected = _func(tir.Store(A, tir.const(1.0), c(0)), A)
    tir.assert_structural_equal(tir.remove_no_op(before), expected)


def test_hoist_shared_allocations_to_kernel_top():
    bx = Var("bx")
    A = tir.Buffer("A", (c(4),), "float32")
    S = tir.Buffer("S", (c(4),), "float32", None, "shared")
    store = tir.Store(A, tir.Load(S, c(0)), bx)
    before = _func(tir.For(bx, c(0), c(4), ForKind.THREAD_BINDING, tir.Allocate(S, store), "blockIdx.x"), A)
    expected = _func(tir.Allocate(S, tir.For(bx, c(0), c(4), ForKind.THREAD_BINDING, store, "blockIdx.x")), A)
    tir.assert_structural_equal(tir.hoist_shared_allocations(before), expected)


def test_structural_equal_is_up_to_renaming_of_loop_vars():
    A = tir.Buffer("A", (c(4),), "float32")
    i, k = Var("i"), Var("k")
    a = _func(tir.For(i, c(0), c(4), ForKind.SERIAL, tir.Store(A, tir.const(1.0), i)), A)
    b = _func(tir.For(k, c(0), c(4), ForKind.SERIAL, tir.Store(A, tir.const(1.0), k)), A)
    assert tir.structural_equal(a, b)
    d = _func(tir.For(k, c(0), c(4), ForKind.SERIAL, tir.Store(A, tir.const(2.0), k)), A)
    assert not tir.structural_equal(a, d)
