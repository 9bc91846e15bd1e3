"""test_fpga_precision.py: per-tensor ap_fixed types from the core's precision plan (assign_fixed_point).

The plan gives each kernel's float inputs and outputs a FixedPoint from calibrated ranges; the plugin
maps it to ap_fixed<W,I,AP_RND_CONV,AP_SAT>. The numpy reference of the core
(tensorkiln.quantize.fixed_point.fixed_point_reference: quantised inputs, float64 references,
quantised outputs, per kernel) must equal C-simulation bit for bit.
"""
from __future__ import annotations

import math
import re

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.passes import PassContext
from tensorkiln.quantize.fixed_point import fixed_point_reference
from tensorkiln.sdk import FixedPoint
from tensorkiln_fpga_hls.types import HLSType, from_fixed_point, quantize
from test_fpga_strategies import _model

_RNG = np.random.default_rng(11)
_CALIBRATION = [_RNG.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(3)]


def _context(**config):
    return PassContext(config={"assign_fixed_point": {"width": 16, "calibration": _CALIBRATION, **config}})


@pytest.fixture(scope="module")
def planned():
    return tk.compile(_model(), target="fpga_hls", context=_context())


def test_planned_model_matches_the_fixed_point_reference_exactly(planned):
    x = np.random.default_rng(12).standard_normal((1, 3, 8, 8)).astype(np.float32)
    got = planned(x)
    np.testing.assert_array_equal(got, fixed_point_reference(planned.graph, {"x": x}))
    import onnxruntime as ort
    model = _model()
    floats = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert 0 < np.abs(got - floats).max() < 0.05 * np.abs(floats).max()   # quantised, and close


def test_integer_bits_follow_the_calibrated_ranges(planned):
    """The model input's type and the classifier output's type, from ranges computed here with onnxruntime."""
    import onnxruntime as ort
    model = _model()
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    out_top = max(np.abs(session.run(None, {"x": c})[0]).max() for c in _CALIBRATION)
    in_top = max(np.abs(c).max() for c in _CALIBRATION)
    bits = lambda top: math.floor(math.log2(top)) + 2   # noqa: E731  (sign bit + bits of the integer part)
    source = next(iter(planned.artifacts.values())).source
    first = re.search(r'void fused_layout_transform\(const (ap_fixed<[^>]*>)\* p0', source).group(1)
    dense = re.search(r'void fused_nn_dense\([^)]*?(ap_fixed<[^>]*>)\* T_dense', source).group(1)
    assert HLSType.parse(first).integer == bits(in_top) and HLSType.parse(first).width == 16
    assert HLSType.parse(dense).integer == bits(out_top)
    assert HLSType.parse(dense).quantization == "AP_RND_CONV" and HLSType.parse(dense).overflow == "AP_SAT"


def test_core_format_quantises_as_ap_fixed():
    values = np.concatenate([np.random.default_rng(13).uniform(-20, 20, 2000), np.arange(-40, 40) / 8 + 1 / 32])
    for fmt in (FixedPoint(8, 3), FixedPoint(12, 5, rounding="nearest_up"), FixedPoint(10, 4, rounding="truncate"),
                FixedPoint(9, 3, overflow="wrap"), FixedPoint(8, 4, signed=False)):
        np.testing.assert_array_equal(fmt.quantize(values), quantize(values, from_fixed_point(fmt)), err_msg=str(fmt))


def test_plan_needs_calibration_and_known_keys():
    with pytest.raises(TensorkilnError, match="needs 'calibration'"):
        tk.compile(_model(), target="fpga_hls", context=PassContext(config={"assign_fixed_point": {"width": 16}}))
    with pytest.raises(TensorkilnError, match="unknown config keys"):
        tk.compile(_model(), target="fpga_hls", context=_context(bits=3))
