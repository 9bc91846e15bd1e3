"""tests/runtime/test_user_intrinsics.py: intrinsics a user declares (never registered by a plugin), tensorized
and run on every target that runs here (cpu_llvm, opencl), against numpy and the tir interpreter.

Two intrinsics, each with one implementation per target, following the argument
convention of `tensorkiln.sdk.intrinsic_impl` (tile pointers, int64 strides, int64
extents, int32 accumulate):

- `user_vadd4`: c[4] = a[4] + b[4], no strides or extents;
- `user_gemm4x4`: C[4, 4] (+)= A[4, K] @ B[K, 4], with strides, the extent K and the
  accumulate flag (the schedule splits k outside the tile).

cpu_llvm compiles LLVM IR text (`SourceImpl("llvm", ...)`: written by hand for
vadd4, with llvmlite's builder for the GEMM) or links a C symbol from a shared
library the test compiles (`ExternImpl`); opencl compiles OpenCL C
(`SourceImpl("opencl", ...)`).
"""
from __future__ import annotations

import shutil
import subprocess

import llvmlite.ir as ir
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk.intrinsic_impl import ExternImpl, SourceImpl

# ---- implementations ---------------------------------------------------------------------

_VADD4_LLVM = """\
define void @user_vadd4(ptr noalias %a, ptr noalias %b, ptr noalias %c, i32 %accumulate) {
entry:
  %va = load <4 x float>, ptr %a, align 4
  %vb = load <4 x float>, ptr %b, align 4
  %sum = fadd <4 x float> %va, %vb
  %is_accumulating = icmp ne i32 %accumulate, 0
  br i1 %is_accumulating, label %add_into, label %overwrite
add_into:
  %vc = load <4 x float>, ptr %c, align 4
  %total = fadd <4 x float> %vc, %sum
  store <4 x float> %total, ptr %c, align 4
  ret void
overwrite:
  store <4 x float> %sum, ptr %c, align 4
  ret void
}
"""

_VADD4_OPENCL = """\
inline void user_vadd4_cl(const __global float* a, const __global float* b, __global float* c, int accumulate) {
    float4 sum = vload4(0, a) + vload4(0, b);
    vstore4(accumulate ? vload4(0, c) + sum : sum, 0, c);
}"""

_GEMM_OPENCL = """\
inline void user_gemm4x4_cl(const __global float* A, const __global float* B, __global float* C,
                            long lda, long ldb, long ldc, long K, int accumulate) {
    for (int i = 0; i < 4; ++i) {
        for (int j = 0; j < 4; ++j) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (long k = 0; k < K; ++k) sum += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = sum;
        }
    }
}"""

_VENDOR_C = """\
#include <stdint.h>
void vendor_vadd4(const float* a, const float* b, float* c, int32_t accumulate) {
    for (int i = 0; i < 4; ++i) c[i] = (accumulate ? c[i] : 0.0f) + a[i] + b[i];
}
void vendor_gemm4x4(const float* A, const float* B, float* C, int64_t lda, int64_t ldb, int64_t ldc, int64_t K,
                    int32_t accumulate) {
    for (int i = 0; i < 4; ++i)
        for (int j = 0; j < 4; ++j) {
            float sum = accumulate ? C[i * ldc + j] : 0.0f;
            for (int64_t k = 0; k < K; ++k) sum += A[i * lda + k] * B[k * ldb + j];
            C[i * ldc + j] = sum;
        }
}
"""


def _gemm4x4_llvm(symbol: str) -> str:
    """LLVM IR text of C[4, 4] (+)= A[4, K] @ B[K, 4]: 16 scalar accumulators over a K loop."""
    f32, i32, i64 = ir.FloatType(), ir.IntType(32), ir.IntType(64)
    module = ir.Module(name=symbol)
    pointer = f32.as_pointer()
    function = ir.Function(module, ir.FunctionType(ir.VoidType(), [pointer] * 3 + [i64] * 4 + [i32]), symbol)
    a, b, c, lda, ldb, ldc, k_extent, accumulate = function.args
    entry, loop, done = (function.append_basic_block(name) for name in ("entry", "k.loop", "k.done"))
    builder = ir.IRBuilder(entry)
    builder.cbranch(builder.icmp_signed(">", k_extent, i64(0)), loop, done)

    builder.position_at_end(loop)
    k = builder.phi(i64, name="k")
    sums = [builder.phi(f32, name=f"sum{n}") for n in range(16)]
    updated = []
    for i in range(4):
        a_value = builder.load(builder.gep(a, [builder.add(builder.mul(i64(i), lda), k)]))
        for j in range(4):
            b_value = builder.load(builder.gep(b, [builder.add(builder.mul(k, ldb), i64(j))]))
            updated.append(builder.fadd(sums[4 * i + j], builder.fmul(a_value, b_value)))
    k_next = builder.add(k, i64(1))
    builder.cbranch(builder.icmp_signed("<", k_next, k_extent), loop, done)
    k.add_incoming(i64(0), entry)
    k.add_incoming(k_next, loop)
    for phi, value in zip(sums, updated):
        phi.add_incoming(f32(0.0), entry)
        phi.add_incoming(value, loop)

    builder.position_at_end(done)
    totals = []
    for value in updated:
        total = builder.phi(f32)
        total.add_incoming(f32(0.0), entry)
        total.add_incoming(value, loop)
        totals.append(total)
    slots = [builder.gep(c, [builder.add(builder.mul(i64(n // 4), ldc), i64(n % 4))]) for n in range(16)]
    # C is read only when accumulating: it may hold garbage otherwise
    with builder.if_else(builder.icmp_signed("!=", accumulate, i32(0))) as (then, otherwise):
        with then:
            for slot, total in zip(slots, totals):
                builder.store(builder.fadd(builder.load(slot), total), slot)
        with otherwise:
            for slot, total in zip(slots, totals):
                builder.store(total, slot)
    builder.ret_void()
    return str(module)


# ---- intrinsic descriptions --------------------------------------------------------------

def _vadd4(implementations):
    a, b = te.placeholder((4,), name="a"), te.placeholder((4,), name="b")
    c = te.compute((4,), lambda i: a[i] + b[i], name="c")
    return te.decl_tensor_intrin(c, "user_vadd4", implementations=implementations)


def _gemm4x4(implementations):
    k_extent = te.var("K")
    a, b = te.placeholder((4, k_extent), name="A"), te.placeholder((k_extent, 4), name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.decl_tensor_intrin(c, "user_gemm4x4", implementations=implementations)


_SOURCES = {
    "vadd4": {"cpu_llvm": SourceImpl("llvm", _VADD4_LLVM, "user_vadd4"),
              "opencl": SourceImpl("opencl", _VADD4_OPENCL, "user_vadd4_cl")},
    "gemm4x4": {"cpu_llvm": SourceImpl("llvm", _gemm4x4_llvm("user_gemm4x4"), "user_gemm4x4"),
                "opencl": SourceImpl("opencl", _GEMM_OPENCL, "user_gemm4x4_cl")},
}
_DECLARE = {"vadd4": _vadd4, "gemm4x4": _gemm4x4}


# ---- schedules tensorized onto them --------------------------------------------------------

def _vadd_schedule(intrin, gpu: bool, n: int = 64):
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    outer, inner = s[C].split(C.op.axis[0], factor=4)
    if gpu:
        bx, tx = s[C].split(outer, factor=4)
        s[C].bind(bx, te.thread_axis("blockIdx.x"))
        s[C].bind(tx, te.thread_axis("threadIdx.x"))
    s[C].tensorize(inner, intrin)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(n).astype("float32"), rng.standard_normal(n).astype("float32")
    return s, [A, B, C], [a, b], a + b


def _gemm_schedule(intrin, gpu: bool, m: int = 8, n: int = 12, k_total: int = 24):
    A, B = te.placeholder((m, k_total), name="A"), te.placeholder((k_total, n), name="B")
    k = te.reduce_axis((0, k_total), name="k")
    C = te.compute((m, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=4)
    ko, ki = s[C].split(k, factor=8)       # three k blocks: the first overwrites, the others accumulate
    s[C].reorder(io, jo, ko, ii, ji, ki)
    if gpu:
        s[C].bind(io, te.thread_axis("blockIdx.x"))
        s[C].bind(jo, te.thread_axis("threadIdx.x"))
    s[C].tensorize(ii, intrin)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((m, k_total)).astype("float32"), rng.standard_normal((k_total, n)).astype("float32")
    return s, [A, B, C], [a, b], a @ b


_SCHEDULES = {"vadd4": _vadd_schedule, "gemm4x4": _gemm_schedule}


def _run(intrin, kind: str, target: str):
    s, tensors, inputs, expected = _SCHEDULES[kind](intrin, gpu=target == "opencl")
    f = tk.build(s, tensors, target=target, name=f"uses_{kind}")
    out = np.full(expected.shape, np.nan, "float32")     # the intrinsic must overwrite, not read, garbage
    f(*inputs, out)
    return out, expected


# ---- tests ---------------------------------------------------------------------------------

@pytest.mark.parametrize("target", ["cpu_llvm", "opencl"])
@pytest.mark.parametrize("kind", ["vadd4", "gemm4x4"])
def test_non_registered_intrinsic_from_source_runs_on_every_target(kind, target):
    intrin = _DECLARE[kind](_SOURCES[kind])
    assert intrin.name not in {i.name for i in tk.intrinsics(target)}
    out, expected = _run(intrin, kind, target)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.fixture(scope="module")
def vendor_library(tmp_path_factory):
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "scripts/setup.sh installs gcc; ExternImpl tests build a vendor library with it"
    directory = tmp_path_factory.mktemp("vendor")
    (directory / "vendor.c").write_text(_VENDOR_C)
    library = directory / "libvendor_intrinsics.so"
    subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(library), str(directory / "vendor.c")], check=True)
    return library


@pytest.mark.parametrize("kind", ["vadd4", "gemm4x4"])
def test_non_registered_intrinsic_from_a_vendor_library_runs_on_cpu_llvm(kind, vendor_library):
    intrin = _DECLARE[kind]({"cpu_llvm": ExternImpl(f"vendor_{kind}", library=str(vendor_library))})
    out, expected = _run(intrin, kind, "cpu_llvm")
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["vadd4", "gemm4x4"])
def test_lowering_records_the_intrinsic_under_the_typed_key_and_the_interpreter_runs_it(kind):
    intrin = _DECLARE[kind]({})
    s, tensors, inputs, expected = _SCHEDULES[kind](intrin, gpu=False)
    func = tk.lower(s, tensors, name=f"uses_{kind}")
    assert func.tensor_intrinsics() == {intrin.name: intrin}
    assert func.attr(tir.TENSOR_INTRINSICS_ATTR) == (intrin,)
    out = np.full(expected.shape, np.nan, "float32")
    tir.interpret(func, *inputs, out)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)


def test_intrinsic_without_an_implementation_for_cpu_llvm_names_it_and_the_target():
    intrin = _vadd4({"opencl": _SOURCES["vadd4"]["opencl"]})
    s, tensors, _, _ = _vadd_schedule(intrin, gpu=False)
    with pytest.raises(CompileError, match=r"intrinsic 'user_vadd4' has no implementation for cpu_llvm "
                                           r"\(it has: opencl\)"):
        tk.build(s, tensors, target="cpu_llvm", name="uses_vadd4")


def test_intrinsic_without_an_implementation_for_opencl_names_it_and_the_target():
    intrin = _vadd4({"cpu_llvm": _SOURCES["vadd4"]["cpu_llvm"]})
    s, tensors, _, _ = _vadd_schedule(intrin, gpu=True)
    with pytest.raises(CompileError, match=r"intrinsic 'user_vadd4' has no implementation in opencl for target "
                                           r"opencl; it has implementations for: cpu_llvm"):
        tk.build(s, tensors, target="opencl", name="uses_vadd4")


def test_source_in_another_language_is_refused_by_cpu_llvm():
    intrin = _vadd4({"cpu_llvm": SourceImpl("c", "void user_vadd4(void) {}", "user_vadd4")})
    s, tensors, _, _ = _vadd_schedule(intrin, gpu=False)
    with pytest.raises(CompileError, match=r"intrinsic 'user_vadd4': cpu_llvm compiles SourceImpl\(language='llvm'\), "
                                           r"not 'c'"):
        tk.build(s, tensors, target="cpu_llvm", name="uses_vadd4")


def test_hand_built_kernel_names_its_intrinsics_under_the_typed_key():
    intrin = _vadd4(_SOURCES["vadd4"])
    a, c = tir.Buffer("a", (tir.const(4),)), tir.Buffer("c", (tir.const(4),))
    pointer = tir.BufferPointer(a, tir.const(0))
    call = tir.Call("void", intrin.name, (pointer, pointer, tir.BufferPointer(c, tir.const(0)), tir.const(0)))
    func = tir.PrimFunc("twice", (a, c), tir.Evaluate(call), attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),))
    f = tk.build(func, target="cpu_llvm", name="twice")
    x, out = np.arange(4, dtype="float32"), np.zeros(4, "float32")
    f(x, out)
    np.testing.assert_array_equal(out, 2 * x)


def test_a_mapping_under_the_typed_key_is_refused_with_the_expected_form():
    intrin = _vadd4({})
    func = tir.PrimFunc("f", (), tir.NO_OP, attrs=((tir.TENSOR_INTRINSICS_ATTR, {intrin.name: intrin}),))
    with pytest.raises(CompileError, match=r"PrimFunc f: attribute 'tensor_intrinsics' must be a tuple of tensor "
                                           r"intrinsics .*got an item 'user_vadd4'"):
        func.tensor_intrinsics()
