"""test_cuda_tsan.py: ThreadSanitizer on the CPU shim checks te's barrier insertion.

A shared-memory stage read by neighbouring threads needs the barrier that lowering puts
between the cooperative fetch and its use. Built with -fsanitize=thread, the shim runs one
OS thread per CUDA thread and std::barrier for __syncthreads, so the kernel as emitted is
race-free, and the same kernel with its barrier taken out is reported as a data race.
"""
from __future__ import annotations

import dataclasses
import shutil

import pytest

import tensorkiln as tk
from tensorkiln import te

from tensorkiln_cuda.shim import tsan_report


def _neighbour_sum(n: int = 64):
    """B[i] = S[(i + 1) % n] + S[i], S = 2 * A fetched into shared memory one element per thread."""
    A = te.placeholder((n,), name="A")
    S = te.compute((n,), lambda i: A[i] * 2.0, name="S")
    B = te.compute((n,), lambda i: S[(i + 1) % n] + S[i], name="B")
    s = te.create_schedule(B.op)
    s[S].set_scope("shared")
    bx, tx = s[B].split(B.op.axis[0], factor=n)
    s[B].bind(bx, te.thread_axis("blockIdx.x"))
    s[B].bind(tx, te.thread_axis("threadIdx.x"))
    s[S].compute_at(s[B], bx)
    s[S].bind(s[S].op.axis[0], te.thread_axis("threadIdx.x"))
    return te.lower(s, [A, B], name="neighbours")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the TSan check needs g++ with libtsan")
def test_tsan_passes_the_emitted_kernel_and_catches_it_without_its_barrier(emitter):
    artifact = emitter.emit([_neighbour_sum()], tk.target("cuda -device=cpu_shim"))
    assert artifact.source.count("__syncthreads();") == 1
    clean = tsan_report(artifact, emitter)
    assert "tk_tsan_done" in clean and "ThreadSanitizer" not in clean, clean[-2000:]
    broken = dataclasses.replace(artifact, source=artifact.source.replace("__syncthreads();", ""))
    report = tsan_report(broken, emitter)
    assert "WARNING: ThreadSanitizer: data race" in report and "neighbours" in report, report[-2000:]
