"""test_fpga_pool.py: NHWC max / avg pooling as a line-buffer kernel, C-simulated against numpy.

The strategy copies the kernel-height input rows of each output row into a partitioned line
buffer, accumulates each output in a register with the window unrolled, pipelines the channel
loop with II=1, and streams an average's window sums to the division process.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ops.nn.pooling import pool2d
from tensorkiln_fpga_hls.strategies import schedule_pipelined


def _numpy_pool(x, kind, kernel, stride, pad):
    """NHWC pooling by loops over windows; avg divides by the in-bounds taps (count_include_pad=0)."""
    n, h, w, c = x.shape
    (kh, kw), (sh, sw), (top, left, bottom, right) = kernel, stride, pad
    out_h, out_w = (h + top + bottom - kh) // sh + 1, (w + left + right - kw) // sw + 1
    out = np.zeros((n, out_h, out_w, c), np.float64)
    for i in range(out_h):
        for j in range(out_w):
            y0, x0 = i * sh - top, j * sw - left
            window = x[:, max(y0, 0):min(y0 + kh, h), max(x0, 0):min(x0 + kw, w), :].astype(np.float64)
            out[:, i, j, :] = window.max(axis=(1, 2)) if kind == "max" else window.mean(axis=(1, 2))
    return out


CASES = [   # kernel, stride, pad (top, left, bottom, right), input H x W x C
    ((2, 2), (2, 2), (0, 0, 0, 0), (8, 8, 4)),
    ((3, 3), (2, 2), (1, 1, 1, 1), (9, 9, 3)),
    ((3, 3), (1, 1), (1, 1, 1, 1), (6, 7, 5)),
    ((3, 2), (2, 1), (0, 1, 1, 0), (7, 6, 2)),
]


def _build(kind, kernel, stride, pad, shape, config=None):
    h, w, c = shape
    out_h = (h + pad[0] + pad[2] - kernel[0]) // stride[0] + 1
    out_w = (w + pad[1] + pad[3] - kernel[1]) // stride[1] + 1
    x = te.placeholder((1, h, w, c), name="X")
    y = pool2d(x, kind, (1, out_h, out_w, c), kernel, stride, pad, (1, 1), layout="NHWC")
    s = schedule_pipelined([y], tk.target("fpga_hls"), config or {})
    return tk.build(s, [x, y], target="fpga_hls", name=f"{kind}_pool"), (1, out_h, out_w, c)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("kernel, stride, pad, shape", CASES, ids=["k2s2", "k3s2p1", "k3s1p1", "k3x2-asym"])
def test_line_buffer_pool_matches_numpy(kind, kernel, stride, pad, shape):
    f, out_shape = _build(kind, kernel, stride, pad, shape)
    x = np.random.default_rng(hash((kind, kernel, stride)) % 2**32).standard_normal((1, *shape)).astype(np.float32)
    out = np.zeros(out_shape, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, _numpy_pool(x, kind, kernel, stride, pad), rtol=1e-6, atol=1e-6)


def test_pool_kernel_shape_line_buffer_ii1_stream_and_estimate():
    f, _ = _build("avg", (3, 3), (2, 2), (1, 1, 1, 1), (9, 9, 3))
    source = f.get_source()
    kernel = source[source.index('void avg_pool('):]
    # line buffer: 3 rows x 11 padded columns x 3 channels, in registers, filled at the output-row loop
    assert "tk_real T_pad_data_local[99];" in kernel
    assert "#pragma HLS ARRAY_PARTITION variable=T_pad_data_local type=complete dim=0" in kernel
    assert kernel.index("L_y:") < kernel.index("T_pad_data_local[99]") < kernel.index("L_x:")
    assert kernel.count("#pragma HLS PIPELINE II=1") == 3 and "II=" not in kernel.replace("II=1", "")   # fill, sums, division
    assert 'tk::stream<tk_real> T_avg_pool2d_sum("T_avg_pool2d_sum", 2);' in kernel and "DATAFLOW" in kernel
    estimate = f.artifact.metadata["kernels"]["avg_pool"]["estimate"]
    assert estimate["BestLatency"] >= 75          # 5 x 5 outputs x 3 channels, one per cycle at best
    plain, _ = _build("avg", (3, 3), (2, 2), (1, 1, 1, 1), (9, 9, 3), {"line_buffer": 0, "stream_epilogue": 0})
    plain_estimate = plain.artifact.metadata["kernels"]["avg_pool"]["estimate"]
    assert estimate["BestLatency"] < plain_estimate["BestLatency"]
    assert "tk_line_buffer_fill" not in source                  # the fill's marker is no pragma


def test_compiled_model_pools_use_the_line_buffer_kernel():
    """Pools after an NHWC convolution run in NHWC through the strategy's line buffer (onnxruntime reference)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(21)
    weights = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
               for name, shape in (("W", (4, 3, 3, 3)), ("W2", (4, 4, 3, 3)))]
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["c1"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c1"], ["r"]),
         helper.make_node("Conv", ["r", "W2"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("MaxPool", ["c"], ["m"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
         helper.make_node("AveragePool", ["m"], ["y"], kernel_shape=[2, 2], strides=[1, 1])], "pools",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 4, 4])], weights)
    model = helper.make_model(graph)
    model.opset_import[0].version = 13
    lib = tk.compile(model, target="fpga_hls")
    source = next(iter(lib.artifacts.values())).source
    for name in ("fused_nn_max_pool2d", "fused_nn_avg_pool2d"):
        kernel = source[source.index(f"void {name}("):]
        kernel = kernel[:kernel.index("\n}\n")]
        assert "_local[" in kernel and "ARRAY_PARTITION" in kernel and "PIPELINE II=1" in kernel, name
    x = np.random.default_rng(22).standard_normal((1, 3, 9, 9)).astype(np.float32)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(lib(x), expected, rtol=1e-5, atol=1e-5)
