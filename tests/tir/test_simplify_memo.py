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



# ---- the canonical-form shortcut (_is_built_linear) against building the form and comparing keys ----

from hypothesis import example, given, settings, strategies as st  # noqa: E402

from tensorkiln.tir import arith  # noqa: E402
from tensorkiln.tir.visit import expr_key  # noqa: E402

_VARS = {dtype: (Var("i", dtype), Var("j", dtype), Var("k", dtype)) for dtype in ("int32", "uint8", "int8")}


def _linear_trees(dtype: str):
    leaves = st.one_of(st.sampled_from(_VARS[dtype]),
                       st.integers(-300, 300).map(lambda v: IntImm(dtype, arith.wrap_int(dtype, v))))

    def grow(children):
        constants = st.integers(-5, 5).map(lambda v: IntImm(dtype, arith.wrap_int(dtype, v)))
        return st.one_of(st.builds(tir.Add, children, children), st.builds(tir.Sub, children, children),
                         st.builds(tir.Mul, children, constants), st.builds(tir.Mul, constants, children),
                         st.builds(tir.FloorMod, children, constants.filter(lambda c: c.value > 0)),
                         st.builds(tir.FloorDiv, children, constants.filter(lambda c: c.value > 0)))
    return st.recursive(leaves, grow, max_leaves=8)


_I, _J, _K = _VARS["int32"]


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(("int32", "uint8", "int8")).flatmap(lambda dtype: _linear_trees(dtype)))
@example(_I + _J - _J + _K)            # the chain's shape is the canonical one's, its first term is not
@example(_I * c(2) + _J + c(3) - c(3))  # the constant cancels: i * 2 + j
@example(_I + _J + _I)                 # i appears twice: i * 2 + j
def test_the_canonical_form_shortcut_agrees_with_building_the_form(expr):
    # the simplifier skips building an index expression's canonical form when _is_built_linear says it
    # already is that form: it must never say so when the built form differs (a wrong skip would keep
    # an uncancelled term), and it must recognise every form _build_linear writes
    if not isinstance(expr, (tir.Add, tir.Sub, tir.Mul)):
        return
    terms, const = arith.linear_form(expr)
    arith._merge_div_mod(terms)
    ordered = list(terms.values())
    built = arith._build_linear(ordered, const, expr.dtype)
    if arith._is_built_linear(expr, ordered, const, expr.dtype):
        assert expr_key(built) == expr_key(expr)
    if isinstance(built, (tir.Add, tir.Sub, tir.Mul)):
        again, again_const = arith.linear_form(built)
        arith._merge_div_mod(again)
        assert arith._is_built_linear(built, list(again.values()), again_const, built.dtype)
