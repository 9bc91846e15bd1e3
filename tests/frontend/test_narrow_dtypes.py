"""float8 / float4 / int4 / int2 through the ONNX frontend on cpu_llvm, against onnx's ReferenceEvaluator and onnxruntime.

The formats travel as carriers (ir/narrow_dtypes.py); tensorkiln.onnx_backend converts the ml_dtypes arrays
at the model's boundary, so these tests hand over and get back what onnx's reference does, bit for bit.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln.onnx_backend as backend
from tensorkiln.ir.errors import DTypeError, UnsupportedOpError
from tensorkiln.ir.narrow_dtypes import NARROW_FORMATS, from_carrier, to_carrier

FLOAT8 = {"float8_e4m3fn": TensorProto.FLOAT8E4M3FN, "float8_e4m3fnuz": TensorProto.FLOAT8E4M3FNUZ,
          "float8_e5m2": TensorProto.FLOAT8E5M2, "float8_e5m2fnuz": TensorProto.FLOAT8E5M2FNUZ}
FLOATS = {**FLOAT8, "float4_e2m1fn": TensorProto.FLOAT4E2M1}
INTS = {"int4": TensorProto.INT4, "uint4": TensorProto.UINT4, "int2": TensorProto.INT2, "uint2": TensorProto.UINT2}


def _model(nodes, inputs, outputs, opset=25):
    graph = helper.make_graph(nodes, "narrow", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _bits(array: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(array).view(np.uint8) if array.dtype.itemsize == 1 else array


def _assert_same(actual, expected, what=""):
    actual, expected = np.asarray(actual), np.asarray(expected)
    assert actual.dtype == expected.dtype, what
    np.testing.assert_array_equal(_bits(actual), _bits(expected), err_msg=what)


def _edge_values(dtype) -> np.ndarray:
    """Every midpoint between neighbouring values of every float format (ties), just above and below them,
    subnormals, overflow thresholds, signed zeros, infinities, NaNs and random values."""
    points = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e6, -1e6, 1e-7, -1e-7, 1e-30]
    for name in FLOATS:
        values = np.arange(256 if "float8" in name else 16, dtype=np.uint8).view(getattr(ml_dtypes, name))
        finite = np.unique(np.abs(values.astype(np.float64)[np.isfinite(values.astype(np.float64))]))
        mids = (finite[:-1] + finite[1:]) / 2
        points += [*finite, *mids, *(mids * (1 + 2 ** -12)), *(mids * (1 - 2 ** -12)), finite[-1] * 1.0625,
                   finite[-1] * 1.125]
    rng = np.random.default_rng(0)
    points += list(rng.standard_normal(64) * 10)
    values = np.array(points, dtype=np.float64)
    values = np.concatenate([values, -values])
    with np.errstate(over="ignore"):
        return values.astype(dtype)


@pytest.mark.parametrize("source", [TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16])
def test_cast_to_every_float_format_matches_onnx_reference(source):
    """One model: Cast to each float8/float4 format, saturate on and off (e8m0: each round mode)."""
    np_source = helper.tensor_dtype_to_np_dtype(source)
    x = _edge_values(np_source)
    x_shape = x.shape
    nodes, outputs = [], []
    for name, to in FLOATS.items():
        for saturate in (1, 0):
            out = f"{name}_sat{saturate}"
            nodes.append(helper.make_node("Cast", ["x"], [out], to=to, saturate=saturate))
            outputs.append(helper.make_tensor_value_info(out, to, x_shape))
    for mode in ("up", "down", "nearest"):
        for saturate in (1, 0):
            out = f"e8m0_{mode}_sat{saturate}"
            nodes.append(helper.make_node("Cast", ["x"], [out], to=TensorProto.FLOAT8E8M0, saturate=saturate,
                                          round_mode=mode))
            outputs.append(helper.make_tensor_value_info(out, TensorProto.FLOAT8E8M0, x_shape))
    model = _model(nodes, [helper.make_tensor_value_info("x", source, x.shape)], outputs)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    actual = backend.prepare(model).run([x])
    for info, got, want in zip(outputs, actual, expected):
        _assert_same(got, want, info.name)


@pytest.mark.filterwarnings("ignore:overflow encountered in cast:RuntimeWarning")   # e8m0 -> float16: inf
def test_cast_from_every_float_format_decodes_each_bit_pattern():
    nodes, inputs, outputs, feeds = [], [], [], {}
    for name, elem in {**FLOATS, "float8_e8m0fnu": TensorProto.FLOAT8E8M0}.items():
        bits = np.arange(256 if "float8" in name else 16, dtype=np.uint8)
        feeds[name] = bits.view(getattr(ml_dtypes, name))
        inputs.append(helper.make_tensor_value_info(name, elem, bits.shape))
        for to in (TensorProto.FLOAT, TensorProto.FLOAT16):
            nodes.append(helper.make_node("Cast", [name], [f"{name}_{to}"], to=to))
            outputs.append(helper.make_tensor_value_info(f"{name}_{to}", to, bits.shape))
    model = _model(nodes, inputs, outputs)
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = backend.prepare(model).run(feeds)
    for info, got, want in zip(outputs, actual, expected):
        np.testing.assert_array_equal(got, want, err_msg=info.name)


def test_cast_to_and_from_int4_int2_matches_onnx_reference():
    """From floats: truncation toward zero, out of range -> 0; from integers: two's complement wrap-around."""
    x = np.array([-20.5, -9, -8.5, -8, -7.5, -2.5, -1, -0.5, -0.0, 0.5, 1.5, 2.5, 3, 3.9, 7, 7.9, 8, 15.5, 16, 300,
                  np.nan, np.inf, -np.inf], np.float32)
    n = np.arange(-40, 40, dtype=np.int32)
    nodes, outputs = [], []
    for name, to in INTS.items():
        for source in ("x", "n"):
            size = (x if source == "x" else n).shape
            nodes.append(helper.make_node("Cast", [source], [f"{source}_{name}"], to=to))
            outputs.append(helper.make_tensor_value_info(f"{source}_{name}", to, size))
            nodes.append(helper.make_node("Cast", [f"{source}_{name}"], [f"{source}_{name}_back"], to=TensorProto.FLOAT))
            outputs.append(helper.make_tensor_value_info(f"{source}_{name}_back", TensorProto.FLOAT, size))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape),
                           helper.make_tensor_value_info("n", TensorProto.INT32, n.shape)], outputs)
    feeds = {"x": x, "n": n}
    with np.errstate(invalid="ignore"):
        expected = ReferenceEvaluator(model).run(None, feeds)
    actual = backend.prepare(model).run(feeds)
    for info, got, want in zip(outputs, actual, expected):
        _assert_same(got, want, info.name)


def test_castlike_and_reshape_keep_the_format():
    """CastLike takes the format of its second input; Reshape of a float8 value moves its bits unchanged."""
    x = np.linspace(-500, 500, 24, dtype=np.float32)
    like = np.zeros((0,), ml_dtypes.float8_e5m2)
    nodes = [helper.make_node("CastLike", ["x", "like"], ["y"]),
             helper.make_node("Reshape", ["y", "shape"], ["z"])]
    shape = helper.make_tensor("shape", TensorProto.INT64, (2,), [4, 6])
    graph = helper.make_graph(nodes, "castlike", [helper.make_tensor_value_info("x", TensorProto.FLOAT, (24,)),
                                                  helper.make_tensor_value_info("like", TensorProto.FLOAT8E5M2, (0,))],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT8E5M2, (4, 6))], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    (expected,) = ReferenceEvaluator(model).run(None, {"x": x, "like": like})
    (actual,) = backend.prepare(model).run([x, like])
    _assert_same(actual, expected)


def _qdq_model(elem, shape, axis=1, saturate=1, scale_shape=(3,)):
    zero = helper.make_tensor("zero", elem, scale_shape, [0] * int(np.prod(scale_shape)))
    nodes = [helper.make_node("QuantizeLinear", ["x", "scale", "zero"], ["q"], axis=axis, saturate=saturate),
             helper.make_node("DequantizeLinear", ["q", "scale", "zero"], ["y"], axis=axis)]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape),
                                             helper.make_tensor_value_info("scale", TensorProto.FLOAT, scale_shape)],
                              [helper.make_tensor_value_info("q", elem, shape),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)], [zero])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


@pytest.mark.parametrize("elem", [TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT8E4M3FN,
                                  TensorProto.FLOAT8E5M2])
def test_quantize_dequantize_per_axis_matches_onnx_reference_and_onnxruntime(elem):
    ort = pytest.importorskip("onnxruntime")
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((2, 3, 5)) * 40).astype(np.float32)
    x[0, 0, :3] = [1e6, -1e6, 0.0]
    scale = np.array([0.5, 3.0, 0.01], np.float32)
    model = _qdq_model(elem, x.shape)
    feeds = {"x": x, "scale": scale}
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = backend.prepare(model).run(feeds)
    for got, want in zip(actual, expected):
        _assert_same(got, want)
    # onnxruntime's Python API cannot hand back int4 arrays: compare the dequantized output
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    _assert_same(actual[1], session.run(["y"], feeds)[0])


def test_quantize_to_float8_without_saturation_overflows_as_onnx_reference():
    x = np.array([[1.0, 500.0, -1e6], [np.inf, np.nan, 0.25], [0.0, -0.0, 460.0]], np.float32).T.copy()
    model = _qdq_model(TensorProto.FLOAT8E4M3FN, x.shape, saturate=0)
    feeds = {"x": x, "scale": np.ones(3, np.float32)}
    expected = ReferenceEvaluator(model).run(None, feeds)
    actual = backend.prepare(model).run(feeds)
    for got, want in zip(actual, expected):
        _assert_same(got, want)


def test_carrier_round_trip_and_errors():
    for name, fmt in NARROW_FORMATS.items():
        values = np.arange(1 << fmt.bits, dtype=np.uint8).view(fmt.numpy_dtype) if fmt.is_float else \
            np.arange(*fmt.int_range).astype(fmt.numpy_dtype)
        carrier = to_carrier(values)
        assert carrier.dtype == np.dtype(fmt.carrier), name
        _assert_same(from_carrier(carrier, name), values, name)
    plain = np.ones(3, np.float32)
    assert to_carrier(plain) is plain
    with pytest.raises(DTypeError, match=r"a float8_e4m3fn value travels as uint8, got an array of float32"):
        from_carrier(plain, "float8_e4m3fn")
    with pytest.raises(DTypeError, match=r"unknown narrow format 'float7'"):
        from_carrier(plain, "float7")


def test_cast_to_a_format_tensorkiln_lacks_names_it():
    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT6E2M3)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3,))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT6E2M3, (3,))])
    with pytest.raises(DTypeError, match=r"ONNX element type 27"):
        backend.prepare(model)


def test_narrow_initializer_is_read_as_its_carrier():
    """A float8 weight (an initializer) dequantized in the graph."""
    weight = np.array([0.5, -3.0, 448.0, 0.001953125], ml_dtypes.float8_e4m3fn)
    tensor = onnx.numpy_helper.from_array(weight, "w")
    nodes = [helper.make_node("DequantizeLinear", ["w", "scale"], ["y"])]
    graph = helper.make_graph(nodes, "w", [helper.make_tensor_value_info("scale", TensorProto.FLOAT, ())],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4,))], [tensor])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    scale = np.array(2.0, np.float32)
    (expected,) = ReferenceEvaluator(model).run(None, {"scale": scale})
    (actual,) = backend.prepare(model).run([scale])
    np.testing.assert_array_equal(actual, expected)


# -- strings: host nodes around the compiled core (runtime/string_ops.py, frontend/onnx/string_stages.py) ----

def _string_model(nodes, inputs, outputs, opset=20):
    graph = helper.make_graph(nodes, "strings", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("ai.onnx.ml", 4)])


def _check_against_references(model, feeds, with_onnxruntime=True, with_reference=True):
    actual = backend.prepare(model).run(feeds)
    references = [ReferenceEvaluator(model).run(None, feeds)] if with_reference else []
    if with_onnxruntime:
        ort = pytest.importorskip("onnxruntime")
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        references.append(session.run(None, feeds))
    for reference in references:
        for got, want in zip(actual, reference):
            got, want = np.asarray(got), np.asarray(want)
            assert got.shape == want.shape
            if want.dtype.kind in "OU":
                assert got.tolist() == want.astype(object).tolist()
            else:
                assert got.dtype == want.dtype
                np.testing.assert_array_equal(got, want)
    return actual


def _string_input(name, shape):
    return helper.make_tensor_value_info(name, TensorProto.STRING, shape)


def test_string_elementwise_ops_match_onnx_reference_and_onnxruntime():
    # no empty string: split by a delimiter, onnx's reference (and tensorkiln, as Python) gives one empty piece,
    # onnxruntime none
    x = np.array([["www.example.com", "Monday"], ["a.b", "two  words"]], dtype=object)
    y = np.array(["www.example.com", "!"], dtype=object)
    nodes = [helper.make_node("Equal", ["x", "y"], ["eq"]),
             helper.make_node("StringConcat", ["x", "y"], ["cat"]),
             helper.make_node("RegexFullMatch", ["x"], ["match"], pattern=r"www\.[\w.-]+\.com"),
             helper.make_node("StringSplit", ["x"], ["pieces", "counts"], delimiter="."),
             helper.make_node("StringSplit", ["x"], ["words", "word_counts"], maxsplit=1)]
    outputs = [helper.make_tensor_value_info("eq", TensorProto.BOOL, (2, 2)), _string_input("cat", (2, 2)),
               helper.make_tensor_value_info("match", TensorProto.BOOL, (2, 2)), _string_input("pieces", (2, 2, "p")),
               helper.make_tensor_value_info("counts", TensorProto.INT64, (2, 2)), _string_input("words", (2, 2, "w")),
               helper.make_tensor_value_info("word_counts", TensorProto.INT64, (2, 2))]
    model = _string_model(nodes, [_string_input("x", (2, 2)), _string_input("y", (2,))], outputs)
    _check_against_references(model, {"x": x, "y": y})


@pytest.mark.parametrize("action, sensitive", [("LOWER", 0), ("UPPER", 1), ("NONE", 0)])
def test_string_normalizer_matches_onnxruntime(action, sensitive):
    x = np.array(["Monday", "tuesday", "monday", "Wednesday", "THURSDAY"], dtype=object)
    node = helper.make_node("StringNormalizer", ["x"], ["y"], case_change_action=action, is_case_sensitive=sensitive,
                            stopwords=["monday", "THURSDAY"], locale="C")   # this machine lacks en_US
    model = _string_model([node], [_string_input("x", (5,))], [_string_input("y", ("n",))])
    # onnx's reference also strips accents and removes stop words inside an element; the spec and onnxruntime
    # drop whole elements, as tensorkiln does (these words have no accents and no spaces). With NONE and
    # is_case_sensitive=0 the reference compares case-sensitively ("Monday" stays); onnxruntime and tensorkiln
    # follow the spec's "case-insensitive" and drop it
    _check_against_references(model, {"x": x}, with_reference=action != "NONE")


def test_label_encoders_around_a_compiled_core_match_onnxruntime():
    """words -> ids (prelude, host) -> scores (core, compiled) -> label of each score (postlude, host)."""
    words = np.array(["cat", "dog", "bird", "cat", "fish"], dtype=object)
    weights = helper.make_tensor("w", TensorProto.FLOAT, (), [2.0])
    nodes = [helper.make_node("LabelEncoder", ["words"], ["ids"], domain="ai.onnx.ml", keys_strings=["cat", "dog", "bird"],
                              values_int64s=[1, 2, 3], default_int64=0),
             helper.make_node("Cast", ["ids"], ["ids_f"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["ids_f", "w"], ["scores"]),
             helper.make_node("Cast", ["scores"], ["scores_i"], to=TensorProto.INT64),
             helper.make_node("LabelEncoder", ["scores_i"], ["labels"], domain="ai.onnx.ml", keys_int64s=[0, 2, 4],
                              values_strings=["none", "two", "four"], default_string="many")]
    graph = helper.make_graph(nodes, "labels", [_string_input("words", (5,))],
                              [_string_input("labels", (5,)), helper.make_tensor_value_info("scores", TensorProto.FLOAT, (5,))],
                              [weights])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20), helper.make_opsetid("ai.onnx.ml", 4)])
    _check_against_references(model, {"words": words})
    summary = backend.prepare(model).compiled.summary()
    assert summary["host_nodes"] == ["LabelEncoder ''", "LabelEncoder ''"] and summary["core"]["ops"] >= 2


def test_string_in_the_middle_of_the_compiled_part_is_refused_by_name():
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Cast", ["r"], ["s"], to=TensorProto.STRING),
             helper.make_node("Cast", ["s"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Add", ["back", "r"], ["y"], name="add_after_strings")]
    model = _string_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (3,))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, (3,))])
    with pytest.raises(UnsupportedOpError, match=r"'add_after_strings' \(Add\) reads 'back'"):
        backend.prepare(model)


@pytest.mark.parametrize("saturate", [1, 0])
def test_float8_cast_round_trip_matches_onnxruntime(saturate):
    """x -> float8 -> float32 for the four float8 formats; onnxruntime's Python API hands back the float32 side."""
    ort = pytest.importorskip("onnxruntime")
    x = _edge_values(np.float32)
    nodes, outputs = [], []
    for name, to in FLOAT8.items():
        nodes += [helper.make_node("Cast", ["x"], [f"{name}_q"], to=to, saturate=saturate),
                  helper.make_node("Cast", [f"{name}_q"], [name], to=TensorProto.FLOAT)]
        outputs.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, x.shape))
    model = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, x.shape)], outputs, opset=21)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for info, got, want in zip(outputs, backend.prepare(model).run([x]), session.run(None, {"x": x})):
        # without saturation onnxruntime 1.32 departs from the spec past the largest value (e4m3fn: 480 -> 448
        # where the spec says NaN; e5m2: 64512 -> NaN where it says inf); onnx's reference follows the spec and
        # so does tensorkiln (test_cast_to_every_float_format_matches_onnx_reference): compare in range here
        in_range = np.ones(x.shape, bool) if saturate else ~(np.abs(x) > float(ml_dtypes.finfo(info.name).max))
        np.testing.assert_array_equal(got[in_range], want[in_range], err_msg=info.name)


def test_constant_nodes_of_int4_and_float8_dequantize_as_onnx_reference():
    """Constant nodes holding packed int4 and float8 tensors (onnx packs two int4 per byte)."""
    packed = onnx.numpy_helper.from_array(np.array([-8, -1, 0, 7, 3], ml_dtypes.int4), "c4")
    floats = onnx.numpy_helper.from_array(np.array([1.5, -448, 0.25, -0.0, 3], ml_dtypes.float8_e4m3fn), "c8")
    nodes = [helper.make_node("Constant", [], ["q4"], value=packed),
             helper.make_node("Constant", [], ["q8"], value=floats),
             helper.make_node("DequantizeLinear", ["q4", "scale"], ["y4"]),
             helper.make_node("DequantizeLinear", ["q8", "scale"], ["y8"])]
    model = _model(nodes, [helper.make_tensor_value_info("scale", TensorProto.FLOAT, ())],
                   [helper.make_tensor_value_info("y4", TensorProto.FLOAT, (5,)),
                    helper.make_tensor_value_info("y8", TensorProto.FLOAT, (5,))], opset=21)
    scale = np.array(0.5, np.float32)
    expected = ReferenceEvaluator(model).run(None, {"scale": scale})
    for got, want in zip(backend.prepare(model).run([scale]), expected):
        _assert_same(got, want)


def test_compiled_model_takes_carriers_and_says_so_when_given_an_ml_dtypes_array():
    """Without onnx_backend's boundary, tk.compile's model takes and returns carriers (sdk_docs/onnx_dtypes.md)."""
    import tensorkiln as tk
    from tensorkiln.ir.errors import RuntimeLaunchError

    model = _model([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT)],
                   [helper.make_tensor_value_info("x", TensorProto.FLOAT8E4M3FN, (4,))],
                   [helper.make_tensor_value_info("y", TensorProto.FLOAT, (4,))], opset=21)
    lib = tk.compile(model, target="cpu_llvm")
    x = np.array([1.5, -448, 0.25, np.nan], ml_dtypes.float8_e4m3fn)
    with pytest.raises(RuntimeLaunchError, match=r"input 'x' has dtype float8_e4m3fn, expected uint8; .*to_carrier"):
        lib.run({"x": x})
    (y,) = lib.run({"x": to_carrier(x)})
    np.testing.assert_array_equal(y, x.astype(np.float32))


def test_cast_between_strings_and_numbers_matches_onnx_reference():
    x = np.array([1.5, -0.25, 1e10, 0.1], np.float32)
    nodes = [helper.make_node("Cast", ["x"], ["s"], to=TensorProto.STRING),
             helper.make_node("Cast", ["s"], ["back"], to=TensorProto.FLOAT),
             helper.make_node("Cast", ["t"], ["n"], to=TensorProto.INT64)]
    model = _string_model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, (4,)), _string_input("t", (3,))],
                          [_string_input("s", (4,)), helper.make_tensor_value_info("back", TensorProto.FLOAT, (4,)),
                           helper.make_tensor_value_info("n", TensorProto.INT64, (3,))])
    _check_against_references(model, {"x": x, "t": np.array(["7", "-3", "12"], dtype=object)}, with_onnxruntime=False)
