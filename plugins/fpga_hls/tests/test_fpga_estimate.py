"""test_fpga_estimate.py: the estimator's latency model (pipelines, nesting, dataflow) and resources.

Expected numbers are worked out by hand from the model in estimate.py's docstring: a copy
C[i] = A[i] has a body of depth 3 (an m_axi read of 2 cycles, then the store), so a
pipelined loop of N iterations at II takes (N - 1) * II + 3 + 1 cycles (the +1: leaving
the pipeline), and a plain loop N * (3 + 1) (one cycle of loop control per iteration).
"""
from __future__ import annotations

import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln_fpga_hls.estimate import M_AXI_ADAPTER, estimate_kernel


def _estimate(schedule, args):
    return estimate_kernel(tk.lower(schedule, args, name="k"), tk.target("fpga_hls"))


def _copy(n=64, m=None):
    shape = (n,) if m is None else (n, m)
    a = te.placeholder(shape, name="A")
    c = te.compute(shape, lambda *i: a[i], name="C")
    return a, c


@pytest.mark.parametrize("ii", [1, 2, 3])
def test_pipelined_loop_is_trip_times_ii_plus_depth(ii):
    a, c = _copy(64)
    s = te.create_schedule(c.op)
    s[c].pipeline(c.op.axis[0], ii)
    report = _estimate(s, [a, c])
    assert report["BestLatency"] == 63 * ii + 3 + 1
    assert report["IntervalMin"] == report["BestLatency"]


def test_plain_loops_multiply_when_nested():
    a, c = _copy(64)
    flat = _estimate(te.create_schedule(c.op), [a, c])
    assert flat["BestLatency"] == 64 * (3 + 1)
    a2, c2 = _copy(8, 16)
    nested = te.create_schedule(c2.op)
    nested[c2].pipeline(c2.op.axis[1])
    report = _estimate(nested, [a2, c2])
    assert report["BestLatency"] == 8 * ((15 + 3 + 1) + 1)


def test_dataflow_interval_is_the_slowest_stage():
    a = te.placeholder((64,), name="A")
    b = te.compute((64,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((64,), lambda i: b[i] + 1.0, name="C")
    s = te.create_schedule(c.op)
    s[b].pipeline(b.op.axis[0], 1)
    s[c].pipeline(c.op.axis[0], 2)
    sequential = _estimate(s, [a, c])
    s.dataflow()
    s[b].stream(2)
    overlapped = _estimate(s, [a, c])
    stage_b = 63 * 1 + (2 + 3 + 1) + 1     # m_axi read, fmul, store
    stage_c = 63 * 2 + (2 + 4 + 1) + 1     # BRAM read, fadd, store
    assert sequential["BestLatency"] == stage_b + stage_c
    assert overlapped["IntervalMin"] == max(stage_b, stage_c)
    assert overlapped["BestLatency"] < sequential["BestLatency"]


def test_ii_shares_operators_and_unroll_replicates_them():
    a = te.placeholder((64, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((64,), lambda i: te.sum(a[i, k] * a[i, k], axis=k), name="C")

    def dsp(ii=None, unroll=None):
        s = te.create_schedule(c.op)
        if ii is not None:
            s[c].pipeline(c.op.axis[0], ii)    # k is unrolled inside: 16 multipliers and adders
        if unroll is not None:
            s[c].unroll(s[c].op.reduce_axis[0], unroll)
        return _estimate(s, [a, c])["DSP"]
    assert dsp() == 3 + 2                       # one fmul (3 DSP) and one fadd (2 DSP), reused
    assert dsp(ii=32) == 3                      # 16 x 5 DSP shared over 32 cycles: ceil(2.5)
    assert dsp(ii=64) == 2                      # ceil(1.25)
    assert dsp(ii=16) == dsp(ii=32)             # 32 reads of A per iteration: the port holds II at 32
    assert dsp(unroll=4) == 4 * 5


def test_partitioned_arrays_are_registers_and_ports_cost_adapters():
    a, c = _copy(64)
    b_a = te.placeholder((4096,), name="A")
    b = te.compute((4096,), lambda i: b_a[i] + 1.0, name="B")
    out = te.compute((4096,), lambda i: b[i] * 2.0, name="C")
    s = te.create_schedule(out.op)
    banked = _estimate(s, [b_a, out])
    assert banked["BRAM_18K"] == 2 * M_AXI_ADAPTER["BRAM_18K"] + 4096 * 32 // (18 * 1024) + 1
    s[b].partition("complete")
    registers = _estimate(s, [b_a, out])
    assert registers["BRAM_18K"] == 2 * M_AXI_ADAPTER["BRAM_18K"]
    assert registers["FF"] - banked["FF"] == 4096 * 32


def test_time_evaluator_reports_the_estimated_hardware_time():
    a, c = _copy(64)
    s = te.create_schedule(c.op)
    s[c].pipeline(c.op.axis[0], 1)
    f = tk.build(s, [a, c], target="fpga_hls -clock_mhz=250", name="copy")
    import numpy as np
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64, np.float32)
    timing = f.time_evaluator(number=2, repeat=3)(x, out)
    np.testing.assert_array_equal(out, x)
    assert list(timing.results) == [(63 + 3 + 1) / 250e6] * 3     # cycles / clock: the tuner's cost


def test_an_accumulation_pipelined_over_its_reduction_waits_for_its_own_result(matmul):
    """C[i, j] += A[i, k] * B[k, j] pipelined over k: each iteration reads what the previous one
    wrote, so the II is the read-multiply-add-write chain: load 2 + fmul 3 + fadd 4 + store 1 = 10."""
    a, b, c = matmul(8, 8, 16)
    s = te.create_schedule(c.op)
    s[c].pipeline(s[c].op.reduce_axis[0], 1)
    chain = 2 + 3 + 4 + 1
    k_loop = 15 * chain + chain + 1
    assert _estimate(s, [a, b, c])["BestLatency"] == 8 * (8 * ((1 + k_loop) + 1) + 1)
