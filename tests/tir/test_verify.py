"""tir.verify_prim_func: well-formed kernels pass; each broken invariant names itself."""
import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import InternalError
from tensorkiln.tir import ForKind, IntImm, Var


def c(v):
    return IntImm("int32", v)


def _copy(loop_var=None, source=None):
    i = Var("i")
    A = tir.Buffer("A", (c(4),), "float32")
    B = tir.Buffer("B", (c(4),), "float32")
    store = tir.Store(B, tir.Load(A if source is None else source, i), i)
    return tir.PrimFunc("copy", (A, B), tir.For(i if loop_var is None else loop_var, c(0), c(4), ForKind.SERIAL,
                                                store))


def test_well_formed_kernel_passes():
    assert tir.verify_prim_func(_copy()) is None


def test_allocated_buffers_and_let_variables_count_as_declared():
    i, x = Var("i"), Var("x", "float32")
    A = tir.Buffer("A", (c(4),), "float32")
    T = tir.Buffer("T", (c(4),), "float32", scope="local")
    body = tir.Allocate(T, tir.For(i, c(0), c(4), ForKind.SERIAL,
                                   tir.LetStmt(x, tir.Load(A, i), tir.Store(T, x, i))))
    tir.verify_prim_func(tir.PrimFunc("f", (A,), body))


def test_unbound_variable_is_refused():
    with pytest.raises(InternalError, match=r"kernel 'copy' uses unbound variables \['i'\]"):
        tir.verify_prim_func(_copy(loop_var=Var("j")))


def test_buffer_neither_parameter_nor_allocated_is_refused():
    stray = tir.Buffer("stray", (c(4),), "float32")
    with pytest.raises(InternalError, match=r"accesses buffers \['stray'\] that are neither parameters"):
        tir.verify_prim_func(_copy(source=stray))


def test_store_of_the_wrong_dtype_is_refused():
    i = Var("i")
    A = tir.Buffer("A", (c(4),), "float32")
    func = tir.PrimFunc("f", (A,), tir.For(i, c(0), c(4), ForKind.SERIAL, tir.Store(A, i, i)))
    with pytest.raises(InternalError, match=r"store into A \(float32\) of a int32 value"):
        tir.verify_prim_func(func)


def test_loop_passes_are_registered():
    assert set(tir.LOOP_PASSES.passes()) == {"simplify", "remove_no_op", "vectorize_loops", "unroll_loops",
                                             "hoist_shared_allocations"}
