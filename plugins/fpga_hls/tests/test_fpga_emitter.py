"""test_fpga_emitter.py: the HLS C++ text: interfaces, labels, pragmas from schedule primitives, spelling."""
from __future__ import annotations

import re

import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import CompileError, TargetError


def _source(schedule, args, target="fpga_hls", name="kernel"):
    target = tk.target(target)
    func = tk.lower(schedule, args, name=name)
    return target.spec.emitter.emit([func], target).source


def _scheduled_pipeline():
    a = te.placeholder((64, 64), name="A")
    b = te.compute((64, 64), lambda i, j: a[i, j] * 2.0, name="B")
    c = te.compute((64, 64), lambda i, j: b[i, j] + 1.0, name="C")
    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    s[c].pipeline(j, 2)
    s[c].loop_tripcount(i, 1, 64, 32)
    jo, ji = s[b].split(s[b].op.axis[1], factor=8)
    s[b].unroll(ji, 4)
    s[b].partition("cyclic", 4)
    return s, [a, c]


def test_top_function_interfaces_and_labels(matmul):
    a, b, c = matmul(16)
    source = _source(te.create_schedule(c.op), [a, b, c], name="mm")
    assert 'extern "C" void mm(const float* A, const float* B, float* C)' in source
    for port, bundle in (("A", 0), ("B", 1), ("C", 2)):
        assert f"#pragma HLS INTERFACE mode=m_axi port={port} bundle=gmem{bundle} depth=256 offset=slave" in source
    assert "#pragma HLS INTERFACE mode=s_axilite port=return bundle=control" in source
    assert re.search(r"L_i: for \(int32_t i = 0; i < 16; \+\+i\)", source)
    assert "L_k: for" in source


def test_scalar_parameters_are_s_axilite():
    from tensorkiln import tir
    a = tir.Buffer("A", (tir.IntImm("int32", 8),), "float32")
    c = tir.Buffer("C", (tir.IntImm("int32", 8),), "float32")
    scale, i = tir.Var("scale", "float32"), tir.Var("i", "int32")
    body = tir.For(i, tir.IntImm("int32", 0), tir.IntImm("int32", 8), tir.ForKind.SERIAL,
                   tir.Store(c, tir.Mul(tir.Load(a, i), scale), i))
    target = tk.target("fpga_hls")
    source = target.spec.emitter.emit([tir.PrimFunc("scaled", (a, c, scale), body)], target).source
    assert 'extern "C" void scaled(const float* A, float* C, tk_real scale)' in source
    assert "#pragma HLS INTERFACE mode=s_axilite port=scale bundle=control" in source


def test_schedule_primitives_become_pragmas_inside_the_loop_body():
    s, args = _scheduled_pipeline()
    lines = [line.strip() for line in _source(s, args).splitlines()]
    after = {lines[i - 1].split(":")[0]: line for i, line in enumerate(lines) if line.startswith("#pragma HLS")
             and not line.startswith("#pragma HLS INTERFACE") and ": for" in lines[i - 1]}
    assert after["L_j"] == "#pragma HLS PIPELINE II=2"
    assert after["L_i_1"] == "#pragma HLS LOOP_TRIPCOUNT min=1 max=64 avg=32"
    assert after["L_j_inner"] == "#pragma HLS UNROLL factor=4"
    declaration = lines.index("tk_real B[4096];")
    assert lines[declaration + 1] == "#pragma HLS ARRAY_PARTITION variable=B type=cyclic factor=4 dim=1"


def test_dataflow_and_streams():
    a = te.placeholder((32,), name="A")
    b = te.compute((32,), lambda i: a[i] * 2.0, name="B")
    c = te.compute((32,), lambda i: b[i] + 1.0, name="C")
    s = te.create_schedule(c.op)
    s[b].stream(4)
    s.dataflow()
    source = _source(s, [a, c])
    assert "#pragma HLS DATAFLOW" in source
    assert 'tk::stream<tk_real> B("B", 4);' in source and "#pragma HLS STREAM variable=B depth=4" in source
    assert source.count("TK_STAGE_BEGIN(tk_dataflow);") == 2 and "TK_DATAFLOW_JOIN(tk_dataflow);" in source


def test_pragma_spelling_follows_the_tool_version():
    s, args = _scheduled_pipeline()
    old = _source(s, args, target="fpga_hls -tool_version=vivado-2019.2")
    assert "#pragma HLS INTERFACE m_axi port=A bundle=gmem0 depth=4096 offset=slave" in old
    assert "#pragma HLS ARRAY_PARTITION variable=B cyclic factor=4 dim=1" in old
    assert "mode=" not in old and "type=" not in old
    with pytest.raises(TargetError, match="tool_version='quartus-21'"):
        _source(s, args, target="fpga_hls -tool_version=quartus-21")


def test_unroll_marks_small_loops():
    a = te.placeholder((64, 4), name="A")
    c = te.compute((64, 4), lambda i, j: a[i, j] + 1.0, name="C")
    s = te.create_schedule(c.op)
    s[c].unroll(c.op.axis[0])
    assert "#pragma HLS UNROLL\n" in _source(s, [a, c]) + "\n"


def test_fixed_point_kernels_refuse_transcendental_math():
    a = te.placeholder((8,), name="A")
    c = te.compute((8,), lambda i: te.exp(a[i]), name="C")
    with pytest.raises(CompileError, match="calls exp, which has no exact fixed-point form"):
        _source(te.create_schedule(c.op), [a, c], target="fpga_hls -data_type=ap_fixed<16,6>")


def test_mixed_float_and_fixed_tensors_are_refused_with_their_names(matmul):
    a, b, c = matmul(8)
    with pytest.raises(CompileError, match="B of kernel"):
        _source(te.create_schedule(c.op), [a, b, c], target="fpga_hls -tensor_types=A=ap_fixed<8,3>;C=ap_fixed<16,6>")


def test_estimate_is_attached_with_hls4ml_keys(matmul):
    a, b, c = matmul(16)
    target = tk.target("fpga_hls")
    artifact = target.spec.emitter.emit([tk.lower(te.create_schedule(c.op), [a, b, c], name="mm")], target)
    estimate = artifact.metadata["kernels"]["mm"]["estimate"]
    assert {"BestLatency", "WorstLatency", "IntervalMin", "IntervalMax", "DSP", "LUT", "FF", "BRAM_18K",
            "TargetClockPeriod"} <= set(estimate)
