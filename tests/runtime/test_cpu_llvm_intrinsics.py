"""tests/runtime/test_cpu_llvm_intrinsics.py: cpu_llvm GEMM intrinsics: called from hand-built tir, and through tensorize, against numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk.intrinsic_impl import ExternImpl, SourceImpl, implementation_for

from .kernels import buf


def _i64(value):
    return tir.const(value, "int64")


def _call_gemm(name, intrin, m, n, k, extents, accumulate, b_strides=None):
    a, b, c = buf("A", (m, k)), buf("B", (k, n)), buf("C", (m, n))
    strides = (_i64(k), *(b_strides or (_i64(n),)), _i64(n))
    args = (*(tir.BufferPointer(x, tir.const(0)) for x in (a, b, c)), *strides, *(_i64(e) for e in extents),
            tir.const(accumulate))
    body = tir.Evaluate(tir.Call("void", intrin.name, args))
    return tk.build(tir.PrimFunc(name, (a, b, c), body, attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),)),
                    target="llvm", name=name)


def _operands(m, n, k, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)


def test_registered_intrinsics_and_tile():
    names = {i.name for i in tk.intrinsics("llvm")}
    assert {"sgemm_ukernel", "sgemm_ukernel_packed", "gemm_accelerator"} <= names
    micro = tk.intrinsic("sgemm_ukernel", target="llvm")
    assert (micro.attrs["mr"], micro.attrs["nr"]) in ((8, 32), (6, 16))
    assert isinstance(implementation_for(micro, tk.target("cpu")), SourceImpl)
    avx2 = tk.intrinsic("sgemm_ukernel", target="llvm -mcpu=haswell")
    assert (avx2.attrs["mr"], avx2.attrs["nr"]) == (6, 16)


@pytest.mark.parametrize("accumulate", [0, 1])
def test_micro_kernel_from_tir(accumulate):
    micro = tk.intrinsic("sgemm_ukernel", target="llvm")
    mr, nr, k = micro.attrs["mr"], micro.attrs["nr"], 37
    f = _call_gemm("micro", micro, mr, nr, k, [k], accumulate)
    a, b = _operands(mr, nr, k)
    c = np.ones((mr, nr), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b + accumulate, rtol=1e-5)


@pytest.mark.parametrize("m, n, k", [(37, 45, 19), (8, 32, 1), (64, 64, 64), (3, 100, 7)])
def test_gemm_accelerator_any_shape_from_tir(m, n, k):
    intrin = tk.intrinsic("gemm_accelerator", target="llvm")
    order = [v.name for v in intrin.extent_vars]
    extents = [{"M": m, "N": n, "K": k}[name] for name in order]
    f = _call_gemm("accel", intrin, m, n, k, extents, accumulate=1)
    a, b = _operands(m, n, k, seed=m)
    c = np.full((m, n), 2.0, np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b + 2, rtol=1e-5)


def test_tensorize_with_accumulation_over_split_k():
    micro = tk.intrinsic("sgemm_ukernel", target="llvm")
    mr, nr = micro.attrs["mr"], micro.attrs["nr"]
    m, n, k_extent = 2 * mr, 2 * nr, 96
    A, B = te.placeholder((m, k_extent), name="A"), te.placeholder((k_extent, n), name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=mr)
    jo, ji = s[C].split(j, factor=nr)
    ko, ki = s[C].split(k, factor=32)
    s[C].reorder(io, jo, ko, ii, ji, ki)
    s[C].tensorize(ii, micro)
    f = tk.build(s, [A, B, C], target="llvm")
    a, b = _operands(m, n, k_extent)
    c = np.full((m, n), np.nan, np.float32)  # the first k block must overwrite, not read, C
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


@pytest.mark.parametrize("shape", [(64, 64, 64), (40, 96, 50), (24, 40, 8)])
def test_schedule_dense_matches_numpy(shape):
    from tensorkiln_cpu_llvm.schedules import matmul_packed, schedule_dense

    m, n, k = shape
    A, B = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    C = matmul_packed(A, B)
    f = tk.build(schedule_dense(C), [A, B, C], target="llvm -num_threads=2")
    a, b = _operands(m, n, k)
    c = np.zeros((m, n), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-5)


def test_extern_impl_links_a_process_symbol():
    # `fmaxf` from libm stands in for a vendor library function
    intrin = _FakeIntrin("vendor_max", {"llvm": ExternImpl("fmaxf")})
    a, b = buf("A", (4,)), buf("B", (4,))
    i = tir.Var("i")
    call = tir.Call("float32", "vendor_max", (tir.Load(a, i), tir.const(1.5)))
    func = tir.PrimFunc("ext", (a, b), tir.For(i, tir.const(0), tir.const(4), tir.ForKind.SERIAL,
                                               tir.Store(b, call, i)),
                        attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),))
    f = tk.build(func, target="llvm", name="ext")
    x, out = np.array([0, 1, 2, 3], np.float32), np.zeros(4, np.float32)
    f(x, out)
    np.testing.assert_array_equal(out, np.maximum(x, 1.5))


def test_intrinsic_without_cpu_implementation_is_a_compile_error():
    intrin = _FakeIntrin("opencl_only", {"opencl": SourceImpl("opencl", "", "f")})
    a = buf("A", (4,))
    func = tir.PrimFunc("bad", (a,), tir.Evaluate(tir.Call("void", "opencl_only", (tir.BufferPointer(a, tir.const(0)),))),
                        attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),))
    with pytest.raises(CompileError, match=r"intrinsic 'opencl_only' has no implementation for cpu_llvm \(it has: "
                                           r"opencl\)"):
        tk.build(func, target="llvm", name="bad")


class _FakeIntrin:
    def __init__(self, name, implementations):
        self.name, self.implementations = name, implementations


def test_extern_impl_from_a_vendor_library_in_jit_and_export(tmp_path):
    import shutil
    import subprocess

    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "scripts/setup.sh installs gcc; the cpu_llvm AOT path needs a C compiler"
    source = tmp_path / "vendor.c"
    source.write_text(
        "#include <stdint.h>\n"
        "void vendor_scale(const float* x, float* y, int64_t n, int32_t accumulate) {\n"
        "  for (int64_t i = 0; i < n; ++i) y[i] = (accumulate ? y[i] : 0.0f) + 3.0f * x[i];\n"
        "}\n")
    library = tmp_path / "libvendor.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(source)], check=True)
    intrin = _FakeIntrin("vendor_scale", {"cpu_llvm": ExternImpl("vendor_scale", library=str(library))})
    a, b = buf("A", (10,)), buf("B", (10,))
    call = tir.Call("void", "vendor_scale", (tir.BufferPointer(a, tir.const(0)), tir.BufferPointer(b, tir.const(0)),
                                             tir.const(10), tir.const(1)))
    func = tir.PrimFunc("vendor", (a, b), tir.Evaluate(call), attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),))
    f = tk.build(func, target="llvm", name="vendor")
    x, out = np.arange(10, dtype=np.float32), np.ones(10, np.float32)
    f(x, out)
    np.testing.assert_array_equal(out, 1 + 3 * x)
    f.export_library(tmp_path / "uses_vendor.so")
    reloaded = tk.runtime.load_module(tmp_path / "uses_vendor.so")
    out[:] = 2
    reloaded(x, out)
    np.testing.assert_array_equal(out, 2 + 3 * x)
