"""test_fpga_strategies.py: fpga_hls owns its strategies: pipelined groups, knobs, NHWC, a compiled model."""
from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import ScheduleError
from tensorkiln_fpga_hls.strategies import fpga_strategies, schedule_pipelined


def _model():
    rng = np.random.default_rng(0)
    weights = {"W1": rng.standard_normal((8, 3, 3, 3)), "W2": rng.standard_normal((8, 8, 3, 3)),
               "Wd": rng.standard_normal((10, 8 * 4 * 4))}
    nodes = [helper.make_node("Conv", ["x", "W1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "W2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("MaxPool", ["r2"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("Gemm", ["f", "Wd"], ["y"], transB=1)]
    graph = helper.make_graph(nodes, "small_cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])],
                              [numpy_helper.from_array(v.astype(np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph)
    model.opset_import[0].version = 13
    return model


@pytest.fixture(scope="module")
def compiled():
    model = _model()
    return model, tk.compile(model, target="fpga_hls")


def test_small_cnn_matches_onnxruntime_on_csimulation(compiled):
    import onnxruntime as ort
    model, lib = compiled
    x = np.random.default_rng(1).standard_normal((1, 3, 8, 8)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)


def test_groups_use_the_plugin_strategy_with_knobs_and_nhwc(compiled):
    _, lib = compiled
    summary = lib.summary()
    chosen = summary["strategies"]
    assert chosen and all(row["strategy"] == "fpga_hls.pipelined" for row in chosen.values())
    assert all(row["config"] == {"reuse_factor": 1, "unroll": 1, "line_buffer": 1, "stream_epilogue": 1}
               and row["space_size"] == 64 for row in chosen.values())
    assert {row["key"] for row in chosen.values() if "nn.conv2d" in row["ops"]} == {"conv2d_nhwc"}
    estimates = summary["estimates"]
    assert set(estimates) == {step["kernel"] for step in summary["placement"]}
    assert all(e["BestLatency"] > 0 and e["LUT"] > 0 for e in estimates.values())


def test_knobs_reach_the_schedule():
    a = te.placeholder((16, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    c = te.compute((16,), lambda i: te.sum(a[i, k], axis=k), name="C")
    s = schedule_pipelined([c], tk.target("fpga_hls"), {"reuse_factor": 2, "unroll": 4})
    func = tk.lower(s, [a, c])
    text = str(func)
    assert "for k.outer in range(0, 16) #pipeline=4:" in text   # II raised to 4: four reads through one port
    assert text.count("C[i] = (C[i] + A[") == 4                  # the inner 4 are unrolled copies
    space = fpga_strategies(tk.target("fpga_hls"))[0].space(None, tk.target("fpga_hls"))
    assert len(space) == 64
    with pytest.raises(ScheduleError, match="reuse_factor"):
        space.validate({"reuse_factor": 3})


def test_nhwc_convolutions_read_through_a_line_buffer_and_stream_to_their_epilogue(compiled):
    _, lib = compiled
    source = next(iter(lib.artifacts.values())).source
    kernel = source[source.index('void fused_nn_conv2d_nn_relu('):]
    kernel = kernel[:kernel.index('extern "C"')]
    # the first conv (3 input channels, 8 wide plus padding): 3 rows x 10 x 3 copied per output row
    assert "tk_real T_pad_data_local[90];" in kernel
    assert "T_conv2d_local[0] = fmaf(T_pad_data_local[" in kernel          # the reduction reads the buffer
    # conv and relu are two dataflow processes joined by a FIFO of depth 2
    assert "#pragma HLS DATAFLOW" in kernel and 'tk::stream<tk_real> T_conv2d("T_conv2d", 2);' in kernel
    assert kernel.count("TK_STAGE_BEGIN(tk_dataflow);") == 2
    estimate = lib.summary()["estimates"]["fused_nn_conv2d_nn_relu"]
    assert estimate["IntervalMin"] < estimate["BestLatency"]


def test_compile_explain_prints_estimates(tmp_path, capsys):
    from tensorkiln.cli import main
    path = tmp_path / "small_cnn.onnx"
    onnx.save(_model(), path)
    assert main(["compile", str(path), "--target", "fpga_hls", "--explain", "-o", str(tmp_path / "m.tkpkg")]) == 0
    out = capsys.readouterr().out
    assert "estimates" in out and "BestLatency" in out and "BRAM_18K" in out and "fpga_hls.pipelined" in out


@pytest.mark.parametrize("epilogue, reference, streams", [
    (lambda c: (lambda i: c[i] + 1.0), lambda sums: sums + 1.0, True),
    (lambda c: (lambda i: c[i] * c[i]), lambda sums: sums * sums, False),     # two reads per element
    (lambda c: (lambda i: c[7 - i] + 1.0), lambda sums: sums[::-1] + 1.0, False),   # reversed order
], ids=["in-order", "read-twice", "reversed"])
def test_epilogue_streams_only_when_it_reads_in_order_once(epilogue, reference, streams):
    a = te.placeholder((8, 16), name="A")
    k = te.reduce_axis((0, 16), name="k")
    c = te.compute((8,), lambda i: te.sum(a[i, k], axis=k), name="C")
    d = te.compute((8,), epilogue(c), name="D")
    s = schedule_pipelined([d], tk.target("fpga_hls"), {})
    assert s.is_dataflow is streams
    f = tk.build(s, [a, d], target="fpga_hls", name="epilogue")
    x = np.random.default_rng(3).standard_normal((8, 16)).astype(np.float32)
    out = np.zeros(8, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, reference(x.sum(axis=1)), rtol=1e-5, atol=1e-6)


def test_lrn_keeps_its_array_when_lowering_reads_the_sum_twice():
    """LRN's pow(b, 0.75) lowers to sqrt(b) * sqrt(sqrt(b)): two reads of the sum, so no FIFO."""
    import onnxruntime as ort
    graph = helper.make_graph(
        [helper.make_node("LRN", ["x"], ["y"], size=5, alpha=1e-4, beta=0.75, bias=1.0)], "lrn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])])
    model = helper.make_model(graph)
    model.opset_import[0].version = 13
    lib = tk.compile(model, target="fpga_hls")
    assert "DATAFLOW" not in next(iter(lib.artifacts.values())).source
    x = np.random.default_rng(0).standard_normal((1, 16, 6, 6)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x), expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op, reference", [
    ("argmax", lambda x: np.argmax(x, axis=0)[None]), ("argmin", lambda x: np.argmin(x, axis=0)[None]),
    ("mean", lambda x: np.mean(x)),
], ids=["argmax", "argmin", "mean-all-axes"])
def test_reductions_the_epilogue_cannot_stream(op, reference):
    """argmax's index pass reads the max once per tap (no FIFO); a mean to a scalar has no loop to stream in."""
    from tensorkiln.graph import Module
    from tensorkiln.graph.builder import call, var
    x = var("x", (3, 4, 5), "float32")
    attrs = {"axis": 0, "keepdims": True} if op != "mean" else {}
    lib = tk.compile(Module.from_expr(call(op, x, **attrs)), target="fpga_hls")
    data = np.random.default_rng(9).permutation(60).reshape(3, 4, 5).astype(np.float32)
    np.testing.assert_allclose(lib(data), reference(data), rtol=1e-6)


def test_model_estimate_adds_launches_and_distinct_kernels(compiled):
    from tensorkiln_fpga_hls.model_estimate import model_estimate
    _, lib = compiled
    totals = model_estimate(lib)
    estimates = lib.estimates()
    assert totals["launches"] == len(lib.plan.steps) and totals["kernels"] == len(estimates)
    assert totals["cycles"] == sum(estimates[s.kernel]["BestLatency"] for s in lib.plan.steps)
    assert totals["seconds"] == pytest.approx(totals["cycles"] / 300e6) and totals["clock_mhz"] == pytest.approx(300)
    assert totals["LUT"] == round(sum(e["LUT"] for e in estimates.values())) and totals["not_estimated"] == []
