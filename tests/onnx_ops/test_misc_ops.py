"""ONNX ops converted to existing graph ops (LpPool, ...) against onnxruntime on cpu_llvm."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


def _check_against_onnxruntime(node, inputs: dict, opset: int = 18, atol: float = 1e-5):
    ort = pytest.importorskip("onnxruntime")
    from onnx import helper
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                           v.shape) for k, v in inputs.items()],
                              [helper.make_empty_tensor_value_info(o) for o in node.output])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    import onnx
    model = onnx.shape_inference.infer_shapes(model)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    got = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run(inputs)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=atol)


@pytest.mark.parametrize("p, attrs", [(3, {"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 1, 1]}),
                                      (1, {"kernel_shape": [2], "auto_pad": "SAME_UPPER"})])
def test_lp_pool(p, attrs):
    from onnx import helper
    shape = (2, 3, 7, 6) if len(attrs["kernel_shape"]) == 2 else (2, 3, 7)
    x = np.random.default_rng(0).standard_normal(shape).astype("float32")
    _check_against_onnxruntime(helper.make_node("LpPool", ["x"], ["y"], p=p, **attrs), {"x": x})


def test_bitcast_through_the_c_emitter_keeps_every_bit():
    import shutil
    from tensorkiln import te
    from tensorkiln.graph.ops.bitcast import BitcastAttrs
    from tensorkiln.graph.registry import get_op
    from tensorkiln.graph.types import TensorType
    from tensorkiln.ops import naive_schedule
    from tensorkiln.sdk import CSourceEmitter
    from tensorkiln.sdk.native_c import build_native_module
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no system C compiler (cc) on PATH")
    x = np.array([0.0, -0.0, 1.5, np.inf, -np.nan, 1e-45], dtype="float32")
    attrs = BitcastAttrs(dtype="uint32")
    op = get_op("bitcast")
    source = te.placeholder(x.shape, "float32", name="x")
    out = op.compute([source], attrs, op.type_rule((TensorType(x.shape, "float32"),), attrs))
    func = tk.lower(naive_schedule([out]), [source, out], name="kernel")
    module = build_native_module(CSourceEmitter().emit([func]), compiler=cc, label="bitcast")
    got = np.zeros(x.shape, "uint32")
    module.get_function("kernel")(x, got)
    np.testing.assert_array_equal(got, x.view("uint32"))


@pytest.mark.parametrize("attrs, length, complex_input", [
    ({}, None, True), ({"onesided": 1}, 12, False), ({"inverse": 1}, None, True),
    ({"inverse": 1, "onesided": 1}, 10, True)])
def test_dft_matches_numpy_fft(attrs, length, complex_input):
    from onnx import TensorProto, helper
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 6, 3, 2 if complex_input else 1)).astype("float32")
    inits = [helper.make_tensor("axis", TensorProto.INT64, [], [1])]
    if length is not None:
        inits.append(helper.make_tensor("n", TensorProto.INT64, [], [length]))
    node = helper.make_node("DFT", ["x", "n" if length is not None else "", "axis"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])
    signal = x[..., 0] + 1j * x[..., 1] if complex_input else x[..., 0]
    if attrs.get("inverse") and attrs.get("onesided"):
        want = np.fft.irfft(signal, n=length, axis=1)[..., None]
    else:
        n = length or x.shape[1]
        spectrum = np.fft.ifft(signal, n=n, axis=1) if attrs.get("inverse") else np.fft.fft(signal, n=n, axis=1)
        if attrs.get("onesided"):
            spectrum = spectrum[:, :n // 2 + 1]
        want = np.stack([spectrum.real, spectrum.imag], axis=-1)
    got = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run({"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_reverse_sequence_and_max_unpool():
    from onnx import helper
    rng = np.random.default_rng(5)
    x = rng.standard_normal((3, 5, 2)).astype("float32")
    lengths = np.array([5, 1, 3], dtype="int64")
    _check_against_onnxruntime(helper.make_node("ReverseSequence", ["x", "lens"], ["y"], batch_axis=0, time_axis=1),
                               {"x": x, "lens": lengths})
    pooled = rng.standard_normal((1, 2, 2, 2)).astype("float32")
    flat = np.stack([rng.choice(np.arange(c * 16, c * 16 + 16), 4, replace=False) for c in range(2)]).reshape(1, 2, 2, 2)
    _check_against_onnxruntime(helper.make_node("MaxUnpool", ["x", "i"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
                               {"x": pooled, "i": flat.astype("int64")}, opset=22)


@pytest.mark.parametrize("mode", ["linear", "circular"])
def test_tensor_scatter(mode):
    from onnx import helper
    rng = np.random.default_rng(6)
    past = rng.standard_normal((2, 3, 6, 4)).astype("float32")
    update = rng.standard_normal((2, 3, 2, 4)).astype("float32")
    writes = np.array([1, 4] if mode == "linear" else [5, 2], dtype="int64")
    _check_against_onnxruntime(helper.make_node("TensorScatter", ["past", "update", "w"], ["y"], mode=mode),
                               {"past": past, "update": update, "w": writes}, opset=24)


@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (1, 1)])
def test_det_matches_numpy(shape):
    from onnx import TensorProto, helper
    x = np.random.default_rng(7).standard_normal(shape).astype("float32")
    graph = helper.make_graph([helper.make_node("Det", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape[:-2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    got = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run({"x": x})[0]
    np.testing.assert_allclose(got, np.linalg.det(x.astype(np.float64)), rtol=1e-4, atol=1e-5)


@pytest.mark.slow   # ~14 s of compiling; the node tests cover the plain cases
def test_deform_conv_with_groups_mask_bias_and_strides():
    from onnx import helper
    rng = np.random.default_rng(8)
    x = rng.standard_normal((2, 4, 6, 5)).astype("float32")
    w = rng.standard_normal((6, 2, 2, 3)).astype("float32")          # group 2
    oh, ow = (6 + 2 - 2) // 2 + 1, (5 + 1 - 2 * 2 - 1) // 1 + 1      # pads (1, 0, 1, 1), strides (2, 1), dilations (1, 2)
    offset = rng.uniform(-2, 2, (2, 2 * 6 * 2, oh, ow)).astype("float32")   # offset_group 2, 6 taps, (dy, dx)
    mask = rng.uniform(0, 1, (2, 2 * 6, oh, ow)).astype("float32")
    bias = rng.standard_normal(6).astype("float32")
    node = helper.make_node("DeformConv", ["x", "w", "offset", "b", "mask"], ["y"], group=2, offset_group=2,
                            pads=[1, 0, 1, 1], strides=[2, 1], dilations=[1, 2], kernel_shape=[2, 3])
    _check_against_onnxruntime(node, {"x": x, "w": w, "offset": offset, "b": bias, "mask": mask}, opset=22, atol=1e-4)


def test_stft_matches_numpy_frames():
    from onnx import TensorProto, helper
    rng = np.random.default_rng(9)
    signal = rng.standard_normal((2, 40, 1)).astype("float32")
    window = np.hanning(16).astype("float32")
    inits = [helper.make_tensor("step", TensorProto.INT64, [], [6])]
    node = helper.make_node("STFT", ["x", "step", "w"], ["y"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, signal.shape),
                                            helper.make_tensor_value_info("w", TensorProto.FLOAT, window.shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    got = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run({"x": signal, "w": window})[0]
    frames = np.stack([signal[:, s:s + 16, 0] * window for s in range(0, 40 - 16 + 1, 6)], axis=1)
    spectrum = np.fft.rfft(frames, axis=-1)
    np.testing.assert_allclose(got, np.stack([spectrum.real, spectrum.imag], axis=-1), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["TF", "IDF", "TFIDF"])
def test_tfidf_vectorizer(mode):
    from onnx import helper
    tokens = np.random.default_rng(10).integers(0, 5, (2, 9)).astype("int64")
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], mode=mode, min_gram_length=1, max_gram_length=2,
                            max_skip_count=2, ngram_counts=[0, 3], ngram_indexes=[4, 0, 2, 1, 6],
                            pool_int64s=[1, 3, 4, 1, 2, 0, 0], weights=[0.5, 2.0, 1.5, 3.0, 0.25])
    _check_against_onnxruntime(node, {"x": tokens})


def test_binarizer_and_array_feature_extractor():
    from onnx import helper
    x = np.random.default_rng(11).standard_normal((3, 5)).astype("float32")

    def check(node, feeds):
        ort = pytest.importorskip("onnxruntime")
        graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                                                               v.shape) for k, v in feeds.items()],
                                  [helper.make_empty_tensor_value_info("y")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18), helper.make_opsetid("ai.onnx.ml", 3)])
        import onnx
        model = onnx.shape_inference.infer_shapes(model)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
        np.testing.assert_array_equal(tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run(feeds)[0], want)
    check(helper.make_node("Binarizer", ["x"], ["y"], domain="ai.onnx.ml", threshold=0.25), {"x": x})
    check(helper.make_node("ArrayFeatureExtractor", ["x", "i"], ["y"], domain="ai.onnx.ml"),
          {"x": x, "i": np.array([4, 0, 4], dtype="int64")})
