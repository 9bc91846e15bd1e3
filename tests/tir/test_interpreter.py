"""tir.interpret: the numpy reference interpreter."""
import numpy as np
import pytest

from tensorkiln import te, tir
from tensorkiln.ir.errors import DTypeError, ShapeError
from tensorkiln.tir import ForKind, IntImm, Var


def c(v):
    return IntImm("int32", v)


def test_out_of_bounds_store_is_reported():
    i = Var("i")
    A = tir.Buffer("A", (c(4),), "float32")
    func = tir.PrimFunc("f", (A,), tir.For(i, c(0), c(5), ForKind.SERIAL, tir.Store(A, tir.const(1.0), i)))
    with pytest.raises(IndexError, match=r"buffer A: index 4 out of bounds \[0, 4\)"):
        tir.interpret(func, np.zeros(4, "float32"))


def test_arguments_are_checked():
    A = te.placeholder((4,), name="A")
    B = te.compute((4,), lambda i: A[i] + 1.0, name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    with pytest.raises(ShapeError, match=r"argument A has shape \(3,\), expected \(4,\)"):
        tir.interpret(func, np.zeros(3, "float32"), np.zeros(4, "float32"))
    with pytest.raises(DTypeError, match=r"argument A has dtype float64, expected float32"):
        tir.interpret(func, np.zeros(4), np.zeros(4, "float32"))
    with pytest.raises(ShapeError, match=r"expected 2 arrays"):
        tir.interpret(func, np.zeros(4, "float32"))


def test_padding_reads_are_predicated_so_the_eager_select_stays_in_bounds():
    A = te.placeholder((4,), name="A")
    B = te.compute((6,), lambda i: te.if_then_else(tir.And(i >= 1, i < 5), A[i - 1], 0.0), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = np.arange(4, dtype="float32") + 1
    b = np.zeros(6, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4, 0])


def test_select_evaluates_both_branches_like_compiled_code():
    # tir.Select may run both sides (cpu_llvm's select, vector lanes): an unguarded load in
    # the branch not taken is a bug the interpreter must report, not hide
    i = Var("i")
    A = tir.Buffer("A", (c(4),), "float32")
    B = tir.Buffer("B", (c(5),), "float32")
    value = tir.Select(i >= c(1), tir.Load(A, i - c(1)), tir.const(0.0))
    func = tir.PrimFunc("f", (A, B), tir.For(i, c(0), c(5), ForKind.SERIAL, tir.Store(B, value, i)))
    with pytest.raises(IndexError, match=r"buffer A: index -1 out of bounds \[0, 4\)"):
        tir.interpret(func, np.zeros(4, "float32"), np.zeros(5, "float32"))


def test_predicated_loads_read_only_enabled_lanes_and_check_them():
    A = tir.Buffer("A", (c(4),), "float32")
    B = tir.Buffer("B", (c(8),), "float32")
    ramp = tir.Ramp(c(-2), c(1), 8)
    inside = tir.And(ramp >= tir.Broadcast(c(0), 8), ramp < tir.Broadcast(c(4), 8))
    func = tir.PrimFunc("f", (A, B), tir.Store(B, tir.Load(A, ramp, inside), tir.Ramp(c(0), c(1), 8)))
    b = np.zeros(8, "float32")
    tir.interpret(func, np.arange(1, 5, dtype="float32"), b)
    np.testing.assert_array_equal(b, [0, 0, 1, 2, 3, 4, 0, 0])
    too_wide = tir.And(ramp >= tir.Broadcast(c(0), 8), ramp < tir.Broadcast(c(5), 8))
    bad = tir.PrimFunc("g", (A, B), tir.Store(B, tir.Load(A, ramp, too_wide), tir.Ramp(c(0), c(1), 8)))
    with pytest.raises(IndexError, match=r"buffer A: index \[0 1 2 3 4\] out of bounds \[0, 4\)"):
        tir.interpret(bad, np.zeros(4, "float32"), b)


MATH = [(te.sin, np.sin), (te.cos, np.cos), (te.tan, np.tan), (te.asin, np.arcsin), (te.acos, np.arccos),
        (te.atan, np.arctan), (te.sinh, np.sinh), (te.cosh, np.cosh), (te.exp2, np.exp2), (te.log2, np.log2),
        (te.log10, np.log10)]


@pytest.mark.parametrize("fn, ref", MATH, ids=lambda x: getattr(x, "__name__", "ref"))
def test_trig_and_log_functions_run(fn, ref):
    assert fn.__name__ in te.MATH_FUNCTIONS
    A = te.placeholder((7,), name="A")
    B = te.compute((7,), lambda i: fn(A[i]), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = np.linspace(0.05, 0.95, 7, dtype="float32")
    b = np.zeros(7, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_allclose(b, ref(a), rtol=1e-6)


def test_round_is_half_to_even_like_numpy():
    A = te.placeholder((8,), name="A")
    B = te.compute((8,), lambda i: te.round(A[i]), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 2.4, -2.6], "float32")
    b = np.zeros(8, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_array_equal(b, np.round(a))
    np.testing.assert_array_equal(b, [0, 2, 2, -0, -2, -2, 2, -3])


def test_narrow_int_constants_wrap_instead_of_overflowing():
    A = te.placeholder((4,), "int8", name="A")
    B = te.compute((4,), lambda i: A[i] + te.const(100, "int8") + te.const(28, "int8"), name="B")
    func = te.lower(te.create_schedule(B.op), [A, B])
    a = np.array([0, 1, -1, 5], "int8")
    b = np.zeros(4, "int8")
    tir.interpret(func, a, b)
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(b, a + np.int8(100) + np.int8(28))


def test_vector_loads_and_stores():
    A = tir.Buffer("A", (c(8),), "float32")
    B = tir.Buffer("B", (c(8),), "float32")
    ramp = tir.Ramp(c(0), c(1), 8)
    body = tir.Store(B, tir.Load(A, ramp) * tir.Broadcast(tir.const(2.0), 8), ramp)
    func = tir.PrimFunc("f", (A, B), body)
    a, b = np.arange(8, dtype="float32"), np.zeros(8, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_array_equal(b, a * 2)


def test_deep_loop_nests_run():
    shape = (2,) * 7
    A = te.placeholder(shape, name="A")
    B = te.compute(shape, lambda *i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    for axis in B.op.axis:
        s[B].split(axis, factor=1)
    s[B].pragma(s[B].leaf_iter_vars[0], "keep", 1)
    func = te.lower(s, [A, B], disabled=("remove_no_op",))
    a = np.random.default_rng(0).random(shape, dtype="float32")
    b = np.zeros(shape, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_allclose(b, a + 1)
