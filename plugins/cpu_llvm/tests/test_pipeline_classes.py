"""Which LLVM pipeline each chunk of kernels gets (emitter._pipeline_class): explicitly vectorized
kernels (every store a vector store) skip LLVM's loop and SLP vectorizers, other kernels that need
the full pipeline keep them, copies and elementwise kernels get the light pipeline; chunks never mix
classes, and the model computes bit for bit what the serial compile (O3 everywhere) computes."""
from __future__ import annotations

import os
import re

import numpy as np
import onnx
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln_cpu_llvm import parallel_compile
from tensorkiln_cpu_llvm.emitter import explicitly_vectorized
from tensorkiln_cpu_llvm.parallel_compile import JOBS_ENV

SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _lowered(tensors, vectorize: bool, name: str):
    out = tensors[-1]
    schedule = te.create_schedule([out.op])
    if vectorize:
        _, inner = schedule[out].split(out.op.axis[-1], factor=8)
        schedule[out].vectorize(inner)
    return te.lower(schedule, list(tensors), name=name)


def _tensorized_gemm(hand_vectorized: bool):
    """C = A @ B as one call of cpu_llvm's whole-GEMM intrinsic, its LLVM source marked hand-vectorized or not."""
    import dataclasses

    from tensorkiln_cpu_llvm.strategies import gemm_blocking

    plan = gemm_blocking.gemm_plan(16, 24, 32, tk.target("llvm -mcpu=haswell"), {}, "kn")
    intrin = gemm_blocking.sgemm_intrinsic(plan)
    impl = intrin.implementations["cpu_llvm"]
    assert impl.vectorized
    intrin = dataclasses.replace(intrin, implementations={
        "cpu_llvm": dataclasses.replace(impl, vectorized=hand_vectorized)})
    a, b = te.placeholder((16, 32), name="A"), te.placeholder((32, 24), name="B")
    k = te.reduce_axis((0, 32), name="k")
    c = te.compute((16, 24), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    schedule = te.create_schedule([c.op])
    schedule[c].tensorize(c.op.axis[0], intrin)
    return te.lower(schedule, [a, b, c], name="gemm")


def test_a_kernel_calling_hand_vectorized_source_is_explicitly_vectorized():
    """A tensor intrinsic's LLVM source marked vectorized (SourceImpl.vectorized) keeps its kernel in the
    explicitly vectorized class; one that is not (LLVM's vectorizers may be what makes it fast) does not."""
    assert explicitly_vectorized(_tensorized_gemm(True))
    assert not explicitly_vectorized(_tensorized_gemm(False))


def test_explicitly_vectorized_means_every_store_is_a_vector_store():
    a, b = te.placeholder((16, 32), name="a"), te.placeholder((16, 32), name="b")
    add = te.compute((16, 32), lambda i, j: a[i, j] + b[i, j], name="add")
    assert explicitly_vectorized(_lowered([a, b, add], True, "vector_add"))
    assert not explicitly_vectorized(_lowered([a, b, add], False, "scalar_add"))
    k = te.reduce_axis((0, 32), name="k")
    total = te.compute((16,), lambda i: te.sum(a[i, k], axis=k), name="total")
    assert not explicitly_vectorized(_lowered([a, total], False, "total"))   # scalar accumulation


@pytest.fixture(scope="module")
def squeezenet_input():
    return np.random.default_rng(3).standard_normal((1, 3, 224, 224)).astype(np.float32)


def _run(monkeypatch, jobs: str, x):
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    monkeypatch.setenv(JOBS_ENV, jobs)
    return tk.compile(onnx.load(SQUEEZENET), target="cpu_llvm").run(x)[0]


def test_chunks_of_one_class_each_and_the_same_output_as_serial(monkeypatch, squeezenet_input):
    serial = _run(monkeypatch, "1", squeezenet_input)
    jobs = []
    real_exchange, real_optimize = parallel_compile._exchange, parallel_compile.optimize_chunk
    monkeypatch.setattr(parallel_compile, "_exchange", lambda process, job: jobs.append(job)
                        or real_exchange(process, job))
    monkeypatch.setattr(parallel_compile, "optimize_chunk", lambda job, *a, **k: jobs.append(job)
                        or real_optimize(job, *a, **k))
    out = _run(monkeypatch, "2", squeezenet_input)
    np.testing.assert_array_equal(out, serial)
    kernels = {}
    for job in jobs:
        names = re.findall(r'^define i32 @"(\w+)"\(', job.text, re.M)
        kernels.setdefault((job.light, job.vectorize), []).extend(names)
    assert not kernels.get((True, False))                     # light chunks are vectorized by LLVM
    vectorized = kernels[(False, False)]
    # (so does the head's global pool, a mean over H and W accumulating a vector of channels; concat_copy's
    # memcpy calls are light, emitter.COPY_CALL)
    # the classifier's GEMM (its constant weight packed at compile time: nn.dense_pack) is one call of the
    # hand-vectorized whole GEMM (SourceImpl.vectorized) and a vectorized epilogue
    assert vectorized and all(name.startswith(("fused_nn_conv2d", "fused_nn_max_pool2d", "fused_concatenate",
                                               "fused_reshape_mean", "fused_nn_dense_pack")) for name in vectorized)
    assert any(name.startswith("fused_nn_conv2d") for name in vectorized)
    assert any(name.startswith("fused_nn_dense_pack") for name in vectorized)
    assert "fused_layout_transform" in kernels[(False, True)]    # scalar stores: LLVM may vectorize
    assert all(name.startswith(("fused_concatenate", "fused_layout_transform_reshape"))
               for name in kernels[(True, True)])
