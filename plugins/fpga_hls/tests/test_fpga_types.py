"""test_fpga_types.py: ap_fixed / ap_int tensor types: parsing, the numpy quantiser, bit-exact C-simulation."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import TargetError
from tensorkiln_fpga_hls.types import OVERFLOW_MODES, QUANTIZATION_MODES, HLSType, quantize


def test_parse_types():
    t = HLSType.parse("ap_fixed<16,6,AP_RND_CONV,AP_SAT>")
    assert (t.kind, t.width, t.integer, t.fraction, t.quantization, t.overflow) == \
        ("fixed", 16, 6, 10, "AP_RND_CONV", "AP_SAT")
    assert HLSType.parse("ap_fixed<8, 3>").cpp == "ap_fixed<8,3>"
    assert HLSType.parse("ap_uint<4>").cpp == "ap_uint<4>" and not HLSType.parse("ap_uint<4>").signed
    assert HLSType.parse("float").is_float
    for bad, why in (("ap_fixed<16>", "integer widths"), ("ap_fixed<16,6,AP_ROUND>", "quantization mode"),
                     ("ap_fixed<16,6,AP_RND,AP_CLAMP>", "overflow mode"), ("double", "unknown tensor type"),
                     ("ap_int<64>", "width 64")):
        with pytest.raises(TargetError, match=why):
            HLSType.parse(bad)


# values chosen on and beside the ties of ap_fixed<6,3> (a step of 1/8) and past its range [-4, 3.875]
_VALUES = np.array([0.0625, 0.1875, -0.0625, -0.1875, 0.3, -0.3, 1.4375, -1.4375, 3.9, -4.2, 5.0, -6.0])
_ROUNDED = {   # by hand: value * 8, rounded, / 8 (within range)
    "AP_TRN":         [0.0, 0.125, -0.125, -0.25, 0.25, -0.375, 1.375, -1.5],
    "AP_TRN_ZERO":    [0.0, 0.125, 0.0, -0.125, 0.25, -0.25, 1.375, -1.375],
    "AP_RND":         [0.125, 0.25, 0.0, -0.125, 0.25, -0.25, 1.5, -1.375],
    "AP_RND_ZERO":    [0.0, 0.125, 0.0, -0.125, 0.25, -0.25, 1.375, -1.375],
    "AP_RND_INF":     [0.125, 0.25, -0.125, -0.25, 0.25, -0.25, 1.5, -1.5],
    "AP_RND_MIN_INF": [0.0, 0.125, -0.125, -0.25, 0.25, -0.25, 1.375, -1.5],
    "AP_RND_CONV":    [0.0, 0.25, 0.0, -0.25, 0.25, -0.25, 1.5, -1.5],
}
_OVERFLOWED = {   # 3.9, -4.2, 5.0, -6.0 after AP_TRN
    "AP_WRAP": [3.875, 3.75, -3.0, 2.0], "AP_SAT": [3.875, -4.0, 3.875, -4.0],
    "AP_SAT_ZERO": [3.875, 0.0, 0.0, 0.0], "AP_SAT_SYM": [3.875, -3.875, 3.875, -3.875],
}


@pytest.mark.parametrize("mode", QUANTIZATION_MODES)
def test_quantizer_rounding_modes_by_hand(mode):
    got = quantize(_VALUES[:8], HLSType.parse(f"ap_fixed<6,3,{mode},AP_SAT>"))
    np.testing.assert_array_equal(got, _ROUNDED[mode])


@pytest.mark.parametrize("mode", OVERFLOW_MODES)
def test_quantizer_overflow_modes_by_hand(mode):
    got = quantize(_VALUES[8:], HLSType.parse(f"ap_fixed<6,3,AP_TRN,{mode}>"))
    np.testing.assert_array_equal(got, _OVERFLOWED[mode])


_ALL_MODES = [(q, "AP_SAT") for q in QUANTIZATION_MODES] + [("AP_TRN", o) for o in OVERFLOW_MODES]
_SOME_MODES = [("AP_RND_CONV", "AP_SAT"), ("AP_RND_ZERO", "AP_SAT_SYM"), ("AP_TRN", "AP_WRAP")]


@pytest.mark.parametrize("modes", [
    pytest.param(_SOME_MODES, id="three-modes"),
    pytest.param(_ALL_MODES, id="every-mode", marks=pytest.mark.slow),   # 11 ap_fixed types: ~20 s of g++
])
def test_csimulation_rounds_and_saturates_like_the_quantiser(modes):
    """One kernel copies A (ap_fixed<24,12>) into one output per rounding and overflow mode."""
    n = 256
    a = te.placeholder((n,), name="A")
    outputs = [te.compute((n,), lambda i: a[i] + 0.0, name=f"Q{index}") for index in range(len(modes))]
    s = te.create_schedule([o.op for o in outputs])
    types = ";".join(f"Q{index}=ap_fixed<6,3,{q},{o}>" for index, (q, o) in enumerate(modes))
    target = f"fpga_hls -data_type=ap_fixed<24,12> -tensor_types={types}"
    f = tk.build(s, [a, *outputs], target=target, name="quantise")
    rng = np.random.default_rng(3)
    x = np.concatenate([_VALUES, np.round(rng.uniform(-6, 6, n - len(_VALUES)) * 16) / 16]).astype(np.float32)
    results = [np.zeros(n, np.float32) for _ in modes]
    f(x, *results)
    source = quantize(x, HLSType.parse("ap_fixed<24,12>"))
    for (q, o), got in zip(modes, results):
        expected = quantize(source, HLSType.parse(f"ap_fixed<6,3,{q},{o}>"))
        np.testing.assert_array_equal(got, expected.astype(np.float32), err_msg=f"{q}, {o}")


@pytest.mark.slow   # ~10 s of g++ for its two ap_fixed types; the conv test below covers the default run
def test_fixed_point_matmul_is_bit_exact(matmul):
    a, b, c = matmul(32, 24, 40)
    s = te.create_schedule(c.op)
    s[c].pipeline(s[c].op.reduce_axis[0])
    target = tk.target("fpga_hls -data_type=ap_fixed<16,6,AP_RND_CONV,AP_SAT> -tensor_types=C=ap_fixed<18,8,AP_RND,AP_SAT>")
    f = tk.build(s, [a, b, c], target=target, name="fixed_mm")
    assert "ap_fixed<16,6,AP_RND_CONV,AP_SAT>* A" in f.get_source() and "ap_fixed<18,8,AP_RND,AP_SAT>* C" in f.get_source()
    rng = np.random.default_rng(4)
    x, y = (rng.standard_normal((32, 40)) * 3).astype(np.float32), rng.standard_normal((40, 24)).astype(np.float32)
    out = np.zeros((32, 24), np.float32)
    f(x, y, out)
    inputs = HLSType.parse("ap_fixed<16,6,AP_RND_CONV,AP_SAT>")
    expected = quantize(quantize(x, inputs) @ quantize(y, inputs), HLSType.parse("ap_fixed<18,8,AP_RND,AP_SAT>"))
    np.testing.assert_array_equal(out, expected.astype(np.float32))
    assert np.abs(out - x @ y).max() > 0    # quantisation is visible: the float result differs


def test_int8_tensors_as_ap_int(matmul):
    a, b, c = matmul(8, dtype="int8")
    f = tk.build(te.create_schedule(c.op), [a, b, c], target="fpga_hls -tensor_types=A=ap_int<8>;B=ap_int<8>",
                 name="int_mm")
    assert "ap_int<8>* A" in f.get_source()
    rng = np.random.default_rng(5)
    x, y = (rng.integers(-128, 128, (8, 8)).astype(np.int8) for _ in range(2))
    out = np.zeros((8, 8), np.int32)
    f(x, y, out)
    np.testing.assert_array_equal(out, x.astype(np.int32) @ y.astype(np.int32))


def test_fixed_point_convolution_through_compile_is_bit_exact():
    """tk.compile with -data_type: each kernel's tensors are ap_fixed; the reference is a float64
    convolution (exact for these widths) of the quantised input and weight, quantised once."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(6)
    weight = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "W"], ["y"], pads=[1, 1, 1, 1])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4, 6, 6])], [numpy_helper.from_array(weight, "W")])
    model = helper.make_model(graph)
    model.opset_import[0].version = 13
    fixed = HLSType.parse("ap_fixed<16,6,AP_RND_CONV,AP_SAT>")
    lib = tk.compile(model, target="fpga_hls -data_type=ap_fixed<16,6,AP_RND_CONV,AP_SAT>")
    x = rng.standard_normal((1, 3, 6, 6)).astype(np.float32)
    padded = np.pad(quantize(x, fixed), ((0, 0), (0, 0), (1, 1), (1, 1)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (3, 3), axis=(2, 3))   # [1, 3, 6, 6, 3, 3]
    exact = np.einsum("ncyxij,ocij->noyx", windows, quantize(weight, fixed))
    np.testing.assert_array_equal(lib(x), quantize(exact, fixed).astype(np.float32))
