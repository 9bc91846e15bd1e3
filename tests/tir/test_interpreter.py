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
    func = tir.lower(te.create_schedule(B.op), [A, B])
    with pytest.raises(ShapeError, match=r"argument A has shape \(3,\), expected \(4,\)"):
        tir.interpret(func, np.zeros(3, "float32"), np.zeros(4, "float32"))
    with pytest.raises(DTypeError, match=r"argument A has dtype float64, expected float32"):
        tir.interpret(func, np.zeros(4), np.zeros(4, "float32"))
    with pytest.raises(ShapeError, match=r"expected 2 arrays"):
        tir.interpret(func, np.zeros(4, "float32"))


def test_select_is_lazy_so_padding_reads_stay_in_bounds():
    A = te.placeholder((4,), name="A")
    B = te.compute((6,), lambda i: te.if_then_else(tir.And(i >= 1, i < 5), A[i - 1], 0.0), name="B")
    func = tir.lower(te.create_schedule(B.op), [A, B])
    a = np.arange(4, dtype="float32") + 1
    b = np.zeros(6, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4, 0])


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
    func = tir.lower(s, [A, B], disabled=("remove_no_op",))
    a = np.random.default_rng(0).random(shape, dtype="float32")
    b = np.zeros(shape, "float32")
    tir.interpret(func, a, b)
    np.testing.assert_allclose(b, a + 1)
