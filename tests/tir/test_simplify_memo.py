"""The simplifier keeps a node's bounds-free linear rewrite on the node (tir/arith.py _linear_rewrite):
the same node simplified again, or in another context, must give what a fresh node gives."""
from tensorkiln import tir
from tensorkiln.tir import IntImm, Var


def c(v):
    return IntImm("int32", v)


def test_a_node_simplified_twice_gives_the_same_result_as_a_fresh_copy():
    i, j = Var("i"), Var("j")

    def build():
        return ((i * 4 + j) * 2 + c(3)) - i * 8 + (j * 0 + c(1))
    shared = build()
    first = tir.simplify_expr(shared)
    again = tir.simplify_expr(shared)
    fresh = tir.simplify_expr(build())
    tir.assert_structural_equal(first, fresh)
    tir.assert_structural_equal(again, fresh)
    tir.assert_structural_equal(fresh, j * 2 + c(4))


def test_a_shared_subtree_under_different_bounds_gets_each_context_its_own_facts():
    # the linear part (io * 4 + ii) is cached on its node; the division facts depend on ii's bounds
    io, ii = Var("io"), Var("ii")
    index = io * 4 + ii
    e = index // 4
    tir.assert_structural_equal(tir.simplify_expr(e, {io: (0, 7), ii: (0, 3)}), io)
    wide = tir.simplify_expr(e, {io: (0, 7), ii: (0, 9)})
    assert not tir.structural_equal(wide, io)
    tir.assert_structural_equal(tir.simplify_expr(e, {io: (0, 7), ii: (0, 3)}), io)

