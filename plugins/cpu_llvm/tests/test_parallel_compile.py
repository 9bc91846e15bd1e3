"""cpu_llvm's parallel LLVM optimisation (parallel_compile.py): a large module optimised in chunks by
worker processes is linked back into one object that computes what the serial compile computes."""
from __future__ import annotations

import os
import sys

import numpy as np
import onnx
import pytest

import tensorkiln as tk
from tensorkiln_cpu_llvm import emitter, parallel_compile
from tensorkiln_cpu_llvm.parallel_compile import JOBS_ENV, MIN_PARALLEL_KERNELS, compile_jobs

SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _compile_and_run(monkeypatch, jobs: str, x: np.ndarray):
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    monkeypatch.setenv(JOBS_ENV, jobs)
    lib = tk.compile(onnx.load(SQUEEZENET), target="cpu_llvm")
    return lib, lib.run(x)[0]


@pytest.fixture(scope="module")
def squeezenet_input():
    return np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)


@pytest.fixture(scope="module")
def serial(squeezenet_input):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _compile_and_run(monkeypatch, "1", squeezenet_input)[1]


def test_a_model_optimised_in_two_processes_computes_what_the_serial_compile_computes(monkeypatch, squeezenet_input,
                                                                                      serial):
    ort = pytest.importorskip("onnxruntime")
    chunk_counts = []
    real_optimize_chunks = emitter.optimize_chunks

    def spy(jobs, *args, **kwargs):
        chunk_counts.append(len(jobs))
        return real_optimize_chunks(jobs, *args, **kwargs)

    monkeypatch.setattr(emitter, "optimize_chunks", spy)
    _, parallel = _compile_and_run(monkeypatch, "2", squeezenet_input)
    assert chunk_counts == [2]
    np.testing.assert_array_equal(parallel, serial)
    session = ort.InferenceSession(SQUEEZENET, providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: squeezenet_input})[0]
    np.testing.assert_allclose(parallel, expected, rtol=1e-4, atol=1e-4)


def test_a_worker_that_cannot_start_leaves_its_chunk_to_the_parent(monkeypatch, squeezenet_input, serial):
    started = []
    real_optimize = parallel_compile.optimize_chunk

    def counting(job, *args, **kwargs):
        started.append(job)
        return real_optimize(job, *args, **kwargs)

    monkeypatch.setattr(parallel_compile, "optimize_chunk", counting)
    monkeypatch.setattr(sys, "executable", os.path.join(os.sep, "nonexistent", "python3"))
    _, out = _compile_and_run(monkeypatch, "3", squeezenet_input)
    assert len(started) == 3          # chunk 0 here as always, and both chunks whose worker never started
    np.testing.assert_array_equal(out, serial)


def test_the_number_of_jobs_comes_from_the_environment_and_the_module_size(monkeypatch):
    monkeypatch.setenv(JOBS_ENV, "4")
    assert compile_jobs(MIN_PARALLEL_KERNELS - 1) == 1           # too small to repay a worker
    assert compile_jobs(200) == 4
    assert compile_jobs(MIN_PARALLEL_KERNELS) == 2                # at least half a dozen kernels per process
    monkeypatch.setenv(JOBS_ENV, "1")
    assert compile_jobs(200) == 1
    monkeypatch.setenv(JOBS_ENV, "two")
    with pytest.raises(ValueError, match=f"{JOBS_ENV}='two'.*whole number"):
        compile_jobs(200)
    monkeypatch.delenv(JOBS_ENV)
    assert compile_jobs(200) == min(len(os.sched_getaffinity(0)), 200 // (MIN_PARALLEL_KERNELS // 2))
