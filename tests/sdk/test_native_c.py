"""tests/sdk/test_native_c.py: the native ABI in C (TKARG_HEADER, packed wrappers, build_native_module).

Kernels come from CSourceEmitter, are built with the system C compiler through the
SDK's helpers and compared with numpy; the wrappers' own argument checks are called
directly with hand-made TKArgs, bypassing the Python-side checks.
"""
from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import CompileError, RuntimeLaunchError
from tensorkiln.sdk import Artifact, CSourceEmitter, KernelSignature, ParamSpec
from tensorkiln.sdk.native import (
    ERROR_NARGS, FIELD_DATA, FIELD_DTYPE, FIELD_NDIM, FIELD_SHAPE, FIELD_STRIDES, TKARG_HEADER, TKArg, encode_error,
)
from tensorkiln.sdk.native_c import build_native_module, packed_symbol, packed_wrappers

CC = shutil.which("cc") or shutil.which("gcc")
pytestmark = pytest.mark.skipif(CC is None, reason="no system C compiler (cc) on PATH")


def _double_plus_one(name: str, n: int = 8):
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    return tk.lower(te.create_schedule(B.op), [A, B], name=name)


def _build(funcs, **options):
    return build_native_module(CSourceEmitter().emit(funcs), compiler=CC, label="test", **options)


def test_a_kernel_named_main_is_called_by_its_emitted_symbol():
    artifact = CSourceEmitter().emit([_double_plus_one("main"), _double_plus_one("main_1")])
    assert artifact.kernel_symbol("main") == "main_2"     # renamed away from C's main and from the other kernel
    assert artifact.kernel_symbol("main_1") == "main_1"
    module = build_native_module(artifact, compiler=CC, flags=("-std=c99", "-shared", "-fPIC", "-Wall", "-Werror"))
    a = np.arange(8, dtype="float32")
    for name in ("main", "main_1"):
        out = np.full(8, np.nan, "float32")
        module.get_function(name)(a, out)
        np.testing.assert_array_equal(out, a * 2 + 1)


def test_kernel_symbol_defaults_to_the_kernel_name_and_refuses_an_unknown_kernel():
    artifact = Artifact("x", "c", "", (KernelSignature("k", ()),))
    assert artifact.kernel_symbol("k") == "k"
    with pytest.raises(KeyError, match=r"artifact has no kernel 'q'; it has \['k'\]"):
        artifact.kernel_symbol("q")


def test_loading_modules_leaves_no_folder_behind(tmp_path, monkeypatch):
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    modules = [_build([_double_plus_one(f"k{i}")]) for i in range(4)]
    assert list(scratch.iterdir()) == []
    out = np.zeros(8, "float32")
    modules[-1].get_function("k3")(np.ones(8, "float32"), out)   # the library outlives its deleted file
    np.testing.assert_array_equal(out, np.full(8, 3.0, "float32"))


def test_a_compiler_error_names_the_label_and_the_kernels_and_carries_the_messages():
    artifact = Artifact("x", "c", "void broken(float* A) { this is not C }", (KernelSignature("broken", (
        ParamSpec("A", "buffer", "float32", (4,)),)),))
    with pytest.raises(CompileError, match=r"(?s)acme: .* failed for kernels \['broken'\]:\n.*error"):
        build_native_module(artifact, compiler=CC, label="acme")


def test_a_packed_wrapper_name_that_clashes_with_a_kernel_is_refused():
    artifact = CSourceEmitter().emit([_double_plus_one("f"), _double_plus_one("f_packed")])
    with pytest.raises(CompileError, match=r"kernel 'f': its packed wrapper 'f_packed' would clash"):
        packed_wrappers(artifact)


def test_the_header_matches_the_ctypes_struct(tmp_path):
    fields = ["data", "shape", "strides", "ndim", "dtype_code", "dtype_bits", "dtype_lanes", "value"]
    program = TKARG_HEADER + "#include <stdio.h>\nint main(void) {\n" + f'  printf("%zu\\n", sizeof(TKArg));\n' + \
        "".join(f'  printf("%zu\\n", offsetof(TKArg, {name}));\n' for name in fields) + "  return 0;\n}\n"
    (tmp_path / "layout.c").write_text(program)
    subprocess.run([CC, "-std=c99", "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")], check=True)
    printed = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split()
    assert [int(x) for x in printed] == [ctypes.sizeof(TKArg), *(getattr(TKArg, name).offset for name in fields)]


# --- the checks in generated code, called without the Python side ------------------------------

_SIGNATURE = KernelSignature("scale", (ParamSpec("X", "buffer", "float32", (2, 3)), ParamSpec("Y", "buffer", "float32", (2, 3)),
                                       ParamSpec("alpha", "scalar", "float32")))
_SOURCE = """\
#include <stdint.h>
void scale(const float* X, float* Y, float alpha) { for (int i = 0; i < 6; ++i) Y[i] = alpha * X[i]; }
"""


@pytest.fixture(scope="module")
def scale_packed(tmp_path_factory):
    directory = tmp_path_factory.mktemp("packed")
    artifact = Artifact("test", "c", _SOURCE, (_SIGNATURE,))
    (directory / "k.c").write_text(_SOURCE + packed_wrappers(artifact))
    library = directory / "k.so"
    subprocess.run([CC, "-std=c99", "-Wall", "-Werror", "-shared", "-fPIC", "-o", str(library),
                    str(directory / "k.c")], check=True)
    function = getattr(ctypes.CDLL(str(library)), packed_symbol("scale"))
    function.restype, function.argtypes = ctypes.c_int32, [ctypes.POINTER(TKArg), ctypes.c_int32]
    return function


def _args(x, y, alpha=2.0):
    args = (TKArg * 3)()
    keep = []
    for slot, array in zip(args, (x, y)):
        shape = (ctypes.c_int64 * array.ndim)(*array.shape)
        keep.append(shape)
        slot.data, slot.shape, slot.ndim = array.ctypes.data, shape, array.ndim
        slot.dtype_code, slot.dtype_bits, slot.dtype_lanes = 2, array.dtype.itemsize * 8, 1
    args[2].dtype_code, args[2].dtype_bits, args[2].dtype_lanes = 2, 32, 1
    args[2].value.f = alpha
    return args, keep


def test_the_packed_wrapper_runs_a_good_call(scale_packed):
    x, y = np.arange(6, dtype="float32").reshape(2, 3), np.zeros((2, 3), "float32")
    args, _keep = _args(x, y, alpha=3.0)
    assert scale_packed(args, 3) == 0
    np.testing.assert_array_equal(y, 3 * x)


def _spoil(field):
    def spoil(args, keep):
        if field == "nargs":
            return 2
        if field == "dtype":
            args[1].dtype_bits = 64
        elif field == "ndim":
            args[0].ndim = 1
        elif field == "data":
            args[1].data = None
        elif field == "shape":
            args[1].shape[1] = 4
        elif field == "strides":
            strides = (ctypes.c_int64 * 2)(1, 2)     # Fortran order
            keep.append(strides)
            args[0].strides = strides
        elif field == "scalar":
            args[2].dtype_code = 0
        return 3
    return spoil


@pytest.mark.parametrize("field, code", [
    ("nargs", ERROR_NARGS), ("dtype", encode_error(1, FIELD_DTYPE)), ("ndim", encode_error(0, FIELD_NDIM)),
    ("data", encode_error(1, FIELD_DATA)), ("shape", encode_error(1, FIELD_SHAPE, 1)),
    ("strides", encode_error(0, FIELD_STRIDES)), ("scalar", encode_error(2, FIELD_DTYPE)),
])
def test_the_packed_wrapper_returns_the_argument_and_field_that_are_wrong(scale_packed, field, code):
    x, y = np.ones((2, 3), "float32"), np.zeros((2, 3), "float32")
    args, keep = _args(x, y)
    count = _spoil(field)(args, keep)
    assert scale_packed(args, count) == code
    assert not y.any()     # the kernel never ran


def test_a_wrong_array_is_refused_in_python_before_native_code():
    module = _build([_double_plus_one("main")])
    with pytest.raises(RuntimeLaunchError, match=r"main: argument 1 'B' has shape \(7,\), expected \(8,\)"):
        module.get_function("main")(np.ones(8, "float32"), np.zeros(7, "float32"))


# --- threads -----------------------------------------------------------------------------------

_PROBE = """\
#include <stdint.h>
#include <omp.h>
void probe(int32_t* threads) {
  #pragma omp parallel
  {
    #pragma omp single
    threads[0] = omp_get_num_threads();
  }
}
"""


def _threads_seen(module) -> int:
    out = np.zeros(1, "int32")
    module.get_function("probe")(out)
    return int(out[0])


def test_num_threads_zero_means_all_cores_and_the_runtime_setting_is_honoured():
    artifact = Artifact("test", "c", _PROBE, (KernelSignature("probe", (ParamSpec("threads", "buffer", "int32", (1,)),)),))
    module = build_native_module(artifact, compiler=CC, flags=("-O2", "-std=c99", "-shared", "-fPIC", "-fopenmp"),
                                 num_threads=0)
    assert module.get_num_threads() == 0
    assert _threads_seen(module) == len(os.sched_getaffinity(0))
    module.set_num_threads(1)
    assert _threads_seen(module) == 1


def test_a_parallel_loop_from_the_emitter_runs_with_openmp(monkeypatch):
    # a process-wide tk.runtime.set_num_threads from an earlier test would override the module's own count
    from tensorkiln.sdk import native
    monkeypatch.setattr(native, "_thread_override", None)
    A = te.placeholder((64, 16), "float32", name="A")
    B = te.compute((64, 16), lambda i, j: A[i, j] + 1.0, name="B")
    s = te.create_schedule(B.op)
    s[B].parallel(B.op.axis[0])
    artifact = CSourceEmitter().emit([tk.lower(s, [A, B], name="main")])
    assert "#pragma omp parallel for" in artifact.source
    module = build_native_module(artifact, compiler=CC, flags=("-O2", "-std=c99", "-shared", "-fPIC", "-fopenmp"),
                                 num_threads=2)
    a = np.random.default_rng(0).standard_normal((64, 16)).astype("float32")
    out = np.zeros_like(a)
    module.get_function("main")(a, out)
    np.testing.assert_array_equal(out, a + 1)
    assert module.get_num_threads() == 2
