"""tir/visit.py's traversals leave no reference cycle behind: their recursive closures (and the memo
of every node a rewrite visited) are freed when the call returns, not by the cyclic GC, whose
collections of that garbage were a third of its compile-time work (benchmarks/compile_time.py)."""
import gc

import pytest

from tensorkiln import tir
from tensorkiln.tir import IntImm, Var
from tensorkiln.tir.visit import post_order_visit, rewrite, substitute


@pytest.fixture
def collector_off():
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()
    yield
    (gc.enable if enabled else gc.disable)()


def _expr():
    i, j = Var("i"), Var("j")
    return ((i * 4 + j) * 2 + IntImm("int32", 3)) - i * 8 + (j * 0 + IntImm("int32", 1)), i, j


def test_rewrite_and_visit_make_no_cyclic_garbage(collector_off):
    e, i, j = _expr()
    seen = []
    post_order_visit(e, seen.append)
    swapped = substitute(e, {i: j})
    doubled = rewrite(e, post=lambda x: x * 2 if isinstance(x, Var) else None)
    simplified = tir.simplify_expr(e)
    assert gc.collect() == 0
    # and they still compute what they did
    assert len(seen) > 5 and any(x is i for x in seen)
    assert not any(v is i for v in tir.visit.collect_vars(swapped))
    tir.assert_structural_equal(simplified, j * 2 + IntImm("int32", 4))
    assert doubled is not e


def test_a_failing_visitor_leaves_no_cycle_either(collector_off):
    e, _, _ = _expr()

    def fail(node):
        raise ValueError("boom")
    with pytest.raises(ValueError):
        rewrite(e, post=fail)
    assert gc.collect() == 0


def test_unrolling_a_select_chain_makes_no_cyclic_garbage(collector_off):
    i = Var("i")
    buf = tir.Buffer("A", (IntImm("int32", 2),), "float32")
    chain = tir.Select(tir.EQ(i, IntImm("int32", 0)), tir.const(1.0), tir.Select(tir.EQ(i, IntImm("int32", 1)),
                                                                                 tir.const(2.0), tir.const(3.0)))
    func = tir.PrimFunc("f", (buf,), tir.For(i, IntImm("int32", 0), IntImm("int32", 2), tir.ForKind.UNROLLED,
                                             tir.Store(buf, tir.simplify_expr(chain), i)))
    unrolled = tir.unroll_loops(func)
    assert gc.collect() == 0
    assert unrolled is not func
