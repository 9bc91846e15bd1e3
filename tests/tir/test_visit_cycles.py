"""tir/visit.py's traversals leave no reference cycle behind: their recursive closures (and the memo
of every node a rewrite visited) are freed when the call returns, not by the cyclic GC, whose
collections of that garbage were a third of its compile-time work (benchmarks/compile_time.py)."""
import gc
import os
import types

import pytest

from tensorkiln import tir
from tensorkiln.tir import IntImm, Var
from tensorkiln.tir.visit import post_order_visit, rewrite, substitute


def _from_tir(thing) -> bool:
    """Whether a garbage object belongs to the loop IR: its function, frame or class is tensorkiln.tir's."""
    if isinstance(thing, types.FrameType):
        return f"tensorkiln{os.sep}tir{os.sep}" in thing.f_code.co_filename
    module = getattr(thing, "__module__", None) if isinstance(thing, types.FunctionType) else type(thing).__module__
    return isinstance(module, str) and module.startswith("tensorkiln.tir")


@pytest.fixture
def collector_off():
    """Collections off while the test runs; returns a function that collects and lists the loop IR's cyclic
    garbage. Only that counts: objects of other packages can become cyclic garbage meanwhile (pyopencl's
    kernel invokers, freed when an earlier test's OpenCL module goes), which no tir code made."""
    enabled = gc.isenabled()
    gc.disable()
    gc.collect()

    def tir_garbage() -> list:
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            gc.collect()
            return [thing for thing in gc.garbage if _from_tir(thing)]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    yield tir_garbage
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
    assert collector_off() == []
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
    assert collector_off() == []


def test_unrolling_a_select_chain_makes_no_cyclic_garbage(collector_off):
    i = Var("i")
    buf = tir.Buffer("A", (IntImm("int32", 2),), "float32")
    chain = tir.Select(tir.EQ(i, IntImm("int32", 0)), tir.const(1.0), tir.Select(tir.EQ(i, IntImm("int32", 1)),
                                                                                 tir.const(2.0), tir.const(3.0)))
    func = tir.PrimFunc("f", (buf,), tir.For(i, IntImm("int32", 0), IntImm("int32", 2), tir.ForKind.UNROLLED,
                                             tir.Store(buf, tir.simplify_expr(chain), i)))
    unrolled = tir.unroll_loops(func)
    assert collector_off() == []
    assert unrolled is not func
