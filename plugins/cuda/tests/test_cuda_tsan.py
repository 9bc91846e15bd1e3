"""test_cuda_tsan.py: ThreadSanitizer on the CPU shim checks te's barrier insertion.

A shared-memory stage read by neighbouring threads needs the barrier that lowering puts
between the cooperative fetch and its use. Built with -fsanitize=thread, the shim runs one
OS thread per CUDA thread and std::barrier for __syncthreads, so the kernel as emitted is
race-free, and the same kernel with its barrier taken out is reported as a data race.
"""
from __future__ import annotations

import dataclasses
import re
import shutil

import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.tir.visit import rewrite

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


def _without_barriers(func, name: str):
    """`func` renamed, with every tir.Barrier taken out: what a barrier-insertion bug would emit."""
    def drop(node):
        return tir.Evaluate(tir.const(0)) if isinstance(node, tir.Barrier) else None
    return dataclasses.replace(func, name=name, body=rewrite(func.body, post=drop))


def _race_reports(report: str) -> list[str]:
    return [block for block in report.split("WARNING: ThreadSanitizer:")[1:]]


@pytest.mark.skipif(shutil.which("g++") is None, reason="the TSan check needs g++ with libtsan")
def test_tsan_passes_the_emitted_kernel_and_catches_it_without_its_barrier(emitter):
    """One TSan build holds both kernels: every race it reports is in the copy without barriers."""
    func = _neighbour_sum()
    artifact = emitter.emit([func, _without_barriers(func, "unsynced")], tk.target("cuda -device=cpu_shim"))
    assert artifact.source.count("__syncthreads();") == 1
    report = tsan_report(artifact, emitter)
    assert "tk_tsan_done" in report, report[-2000:]
    races = _race_reports(report)
    assert races and all(block.startswith(" data race") for block in races), report[-2000:]
    assert all("unsynced" in block and "neighbours" not in block for block in races), report[-3000:]


def _row_sum(rows: int = 2, length: int = 200, threads: int = 64):
    """B[i] = sum_k A[i, k] with k split by `threads` and the inner part bound to threadIdx.x."""
    A = te.placeholder((rows, length), name="A")
    k = te.reduce_axis((0, length), name="k")
    B = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="B")
    s = te.create_schedule(B.op)
    _, ki = s[B].split(k, factor=threads)
    s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
    s[B].bind(ki, te.thread_axis("threadIdx.x"))
    return te.lower(s, [A, B], name="row_sum")


@pytest.mark.skipif(shutil.which("g++") is None, reason="the TSan check needs g++ with libtsan")
def test_tsan_passes_cross_thread_reductions_and_catches_the_tree_without_its_barriers(emitter):
    """The shared-memory tree (as OpenCL gets it) and the warp-shuffle form (cuda's own) are race-free;
    the tree with its barriers taken out races on its shared buffer."""
    from tensorkiln.tir.passes import lower_thread_allreduce
    func = _row_sum()
    tree = dataclasses.replace(lower_thread_allreduce(func), name="tree")
    artifact = emitter.emit([func, tree, _without_barriers(tree, "unsynced")], tk.target("cuda -device=cpu_shim"))
    assert "__shfl_down_sync" in artifact.source and artifact.source.count("__syncthreads();") >= 2 + 8
    report = tsan_report(artifact, emitter)
    assert "tk_tsan_done" in report, report[-2000:]
    races = _race_reports(report)
    assert races and all(block.startswith(" data race") for block in races), report[-2000:]
    assert all("unsynced" in block and not re.search(r"#\d+ (tree|row_sum)\b", block) for block in races), \
        report[-3000:]
