"""tests/runtime/test_native_abi.py: The native calling convention: argument checks in Python and in generated code, with pinned messages."""
from __future__ import annotations

import ctypes

import numpy as np
import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import RuntimeLaunchError
from tensorkiln.sdk.native import (
    ERROR_NARGS, FIELD_DATA, FIELD_DTYPE, FIELD_NDIM, FIELD_SHAPE, FIELD_STRIDES, PACKED_FUNCTION, TKArg,
    describe_error, dtype_fields, encode_error,
)

from .kernels import buf, build, loop


@pytest.fixture(scope="module")
def gemm_like():
    """gemm(A[4, 8], B[8, 6], C[4, 6], alpha: float32, n: int32): C = 0 (only the ABI matters here)."""
    a, b, c = buf("A", (4, 8)), buf("B", (8, 6)), buf("C", (4, 6))
    alpha, count = tir.Var("alpha", "float32"), tir.Var("n", "int32")
    i = tir.Var("i")
    body = loop(i, 24, tir.Store(c, tir.Cast("float32", count) * alpha, i))
    return build(tir.PrimFunc("gemm", (a, b, c, alpha, count), body))


def _arrays():
    return np.zeros((4, 8), np.float32), np.zeros((8, 6), np.float32), np.zeros((4, 6), np.float32)


def test_good_call_runs(gemm_like):
    a, b, c = _arrays()
    gemm_like(a, b, c, 0.5, 4)
    np.testing.assert_array_equal(c, 2.0)


@pytest.mark.parametrize("args, message", [
    (lambda a, b, c: (a, b, c, 1.0), r"gemm: expected 5 arguments \(A, B, C, alpha, n\), got 4"),
    (lambda a, b, c: (a, b, np.zeros((4, 5), np.float32), 1.0, 1),
     r"gemm: argument 2 'C' has shape \(4, 5\), expected \(4, 6\)"),
    (lambda a, b, c: (a, b.astype(np.float64), c, 1.0, 1),
     r"gemm: argument 1 'B' has dtype float64, expected float32; convert it with \.astype\(numpy\.float32\)"),
    (lambda a, b, c: (a, b, np.zeros(24, np.float32), 1.0, 1),
     r"gemm: argument 2 'C' has 1 dimensions \(24,\), expected 2 dimensions \(4, 6\)"),
    (lambda a, b, c: (np.zeros((8, 4), np.float32).T, b, c, 1.0, 1),
     r"gemm: argument 0 'A' is not C-contiguous \(strides \(4, 16\)\); pass numpy.ascontiguousarray\(x\)"),
    (lambda a, b, c: (a.tolist(), b, c, 1.0, 1),
     r"gemm: argument 0 'A' must be a numpy.ndarray of dtype float32 and shape \(4, 8\), got list"),
    (lambda a, b, c: (a, b, c, np.float32(1.0), 2.5),
     r"gemm: argument 4 'n' has dtype int32 and must be an integer, got 2.5"),
    (lambda a, b, c: (a, b, c, 1.0, np.float32(2.5)),    # a plain number, never numpy 2's np.float32(2.5)
     r"gemm: argument 4 'n' has dtype int32 and must be an integer, got 2.5$"),
    (lambda a, b, c: (a, b, c, np.ones(1), 1),
     r"gemm: argument 3 'alpha' must be a Python number of dtype float32, got ndarray"),
])
def test_wrong_arguments_raise_before_native_code(gemm_like, args, message):
    with pytest.raises(RuntimeLaunchError, match=message):
        gemm_like(*args(*_arrays()))


def _raw_call(module, args):
    """Call the packed function directly, as C code would, bypassing the Python checks."""
    address = module.loaded._lookup("gemm")
    packed = (TKArg * len(args))(*args)
    return PACKED_FUNCTION(address)(packed, len(args))


def _tkarg(array=None, dtype="float32", shape=None, strides=None, value=0.0, keep=[]):  # noqa: B006 - keep alive
    arg = TKArg()
    arg.dtype_code, arg.dtype_bits, arg.dtype_lanes = dtype_fields(dtype)
    if array is None:
        arg.value.f = value
        return arg
    shape = shape or array.shape
    shape_buffer = (ctypes.c_int64 * len(shape))(*shape)
    keep.append(shape_buffer)
    arg.data, arg.shape, arg.ndim = array.ctypes.data, shape_buffer, len(shape)
    if strides is not None:
        strides_buffer = (ctypes.c_int64 * len(strides))(*strides)
        keep.append(strides_buffer)
        arg.strides = strides_buffer
    return arg


def _good(a, b, c):
    count = _tkarg(dtype="int32")
    count.value.i = 3
    return [_tkarg(a), _tkarg(b), _tkarg(c), _tkarg(value=2.0), count]


def test_a_read_only_output_is_refused_before_the_kernel_writes_it(gemm_like):
    a, b, c = _arrays()
    a.flags.writeable = b.flags.writeable = False   # inputs the kernel only reads may be read-only
    gemm_like(a, b, c, 0.5, 4)
    np.testing.assert_array_equal(c, 2.0)
    c.flags.writeable = False
    # before: the kernel wrote 3.0 into c through its data pointer
    with pytest.raises(RuntimeLaunchError, match=r"gemm: argument 2 'C' is written by the kernel, but the numpy "
                                                 r"array is read-only \(flags.writeable is False\)"):
        gemm_like["gemm"](a, b, c, 1.0, 3)
    np.testing.assert_array_equal(c, 2.0)
    assert gemm_like.artifact.metadata["written"] == {"gemm": ["C"]}


def test_native_checks_report_argument_and_field(gemm_like):
    a, b, c = _arrays()
    assert _raw_call(gemm_like, _good(a, b, c)) == 0
    np.testing.assert_array_equal(c, 6.0)
    assert _raw_call(gemm_like, _good(a, b, c)[:3]) == ERROR_NARGS

    wrong_shape = _good(a, b, c)
    wrong_shape[2] = _tkarg(c, shape=(4, 7))
    code = _raw_call(gemm_like, wrong_shape)
    assert code == encode_error(2, FIELD_SHAPE, 1)
    signature = gemm_like.artifact.kernel("gemm")
    assert describe_error(signature, code, [a, b, np.zeros((4, 7), np.float32)]) == \
        "gemm: argument 2 'C' has shape (4, 7), expected (4, 6)"

    wrong_dtype = _good(a, b, c)
    wrong_dtype[1] = _tkarg(b, dtype="float64")
    assert _raw_call(gemm_like, wrong_dtype) == encode_error(1, FIELD_DTYPE)

    wrong_ndim = _good(a, b, c)
    wrong_ndim[0] = _tkarg(a, shape=(32,))
    assert _raw_call(gemm_like, wrong_ndim) == encode_error(0, FIELD_NDIM)

    null_data = _good(a, b, c)
    null_data[0].data = None
    assert _raw_call(gemm_like, null_data) == encode_error(0, FIELD_DATA)

    transposed = _good(a, b, c)
    transposed[0] = _tkarg(a, strides=(1, 4))
    assert _raw_call(gemm_like, transposed) == encode_error(0, FIELD_STRIDES)
    compact = _good(a, b, c)
    compact[0] = _tkarg(a, strides=(8, 1))
    assert _raw_call(gemm_like, compact) == 0

    scalar_dtype = _good(a, b, c)
    scalar_dtype[4] = _tkarg(dtype="int64")
    assert _raw_call(gemm_like, scalar_dtype) == encode_error(4, FIELD_DTYPE)


def test_describe_error_for_every_field(gemm_like):
    signature = gemm_like.artifact.kernel("gemm")
    assert describe_error(signature, encode_error(1, FIELD_DTYPE)) == \
        "gemm: argument 1 'B' has the wrong dtype, expected float32"
    assert describe_error(signature, encode_error(0, FIELD_NDIM)) == \
        "gemm: argument 0 'A' has the wrong number of dimensions, expected 2"
    assert describe_error(signature, encode_error(2, FIELD_STRIDES)) == "gemm: argument 2 'C' is not C-contiguous"
    assert describe_error(signature, encode_error(0, FIELD_DATA)) == "gemm: argument 0 'A' has a NULL data pointer"
