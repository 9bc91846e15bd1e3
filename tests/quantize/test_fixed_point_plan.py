"""tests/quantize/test_fixed_point_plan.py: the assign_fixed_point pass (per-kernel-tensor FixedPoint from
calibrated ranges), its numpy reference, and the formats reaching lowered kernels."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.graph import Call, Function, post_order
from tensorkiln.graph.builder import call, var
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.passes import PassContext
from tensorkiln.quantize.fixed_point import fixed_point_reference, group_formats, integer_bits
from tensorkiln.sdk import TENSOR_FORMATS_ATTR, FixedPoint


def test_integer_bits_hold_the_range():
    assert integer_bits(-0.9, 0.4, 16) == 1          # |x| < 1: the sign bit alone
    assert integer_bits(0.0, 1.0, 16) == 2           # 1.0 needs one integer bit plus sign
    assert integer_bits(-5.0, 3.0, 16) == 4          # 5 < 2**3
    assert integer_bits(0.0, 0.0, 16) == 1
    assert integer_bits(-1e9, 0.0, 16) == 16         # capped at the width: larger values saturate
    for top in np.random.default_rng(0).uniform(0.01, 1000, 50):
        bits = integer_bits(-top, top, 24)
        assert FixedPoint(24, bits).bounds[1] >= top > FixedPoint(24, bits - 1).bounds[1]


def test_format_quantises_by_hand():
    fmt = FixedPoint(6, 3)                            # step 1/8, range [-4, 3.875]
    np.testing.assert_array_equal(fmt.quantize([0.0625, 0.1875, -0.3, 3.9, -4.2, 5.0]),
                                  [0.0, 0.25, -0.25, 3.875, -4.0, 3.875])   # ties to even, then saturate
    np.testing.assert_array_equal(FixedPoint(6, 3, rounding="truncate", overflow="wrap").quantize([-0.3, 5.0]),
                                  [-0.375, -3.0])
    with pytest.raises(ValueError, match="rounding"):
        FixedPoint(8, 3, rounding="up")


def _model():
    x = var("x", (1, 8), "float32")
    rng = np.random.default_rng(1)
    w = tk.graph.const(rng.standard_normal((4, 8)).astype(np.float32))
    y = call("nn.relu", call("nn.dense", x, w))
    return tk.graph.Module.from_expr(call("multiply", y, tk.graph.const(np.float32(3.0))))


def _samples():
    rng = np.random.default_rng(2)
    return [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(4)]


def test_pass_formats_each_kernel_boundary_and_lowering_names_buffers():
    context = PassContext(config={"assign_fixed_point": {"width": 12, "calibration": _samples()}})
    lib = tk.compile(_model(), target="cpu_llvm", context=context)
    groups = [n.op for n in post_order(lib.graph.main.body) if isinstance(n, Call) and isinstance(n.op, Function)]
    assert groups and all(len(group_formats(g)) == len(g.params) + 1 for g in groups)
    outputs = [tk.graph.evaluate(_model(), {"x": s}) for s in _samples()]
    top = max(np.abs(o).max() for o in outputs)
    assert group_formats(groups[-1])[-1] == FixedPoint(12, integer_bits(-top, top, 12))
    x = _samples()[0]
    expected = fixed_point_reference(lib.graph, {"x": x})
    float_result = tk.graph.evaluate(_model(), {"x": x})
    step = group_formats(groups[-1])[-1].step
    assert np.abs(expected - float_result).max() <= 4 * step and not np.array_equal(expected, float_result)
    np.testing.assert_array_equal(expected, group_formats(groups[-1])[-1].quantize(expected))   # on the grid


def test_lowered_kernels_carry_formats_by_buffer_name():
    from tensorkiln.compiler.lower_groups import lower_group
    from tensorkiln.compiler.driver import fused_groups
    context = PassContext(config={"assign_fixed_point": {"width": 12, "calibration": _samples()}})
    with context:
        calls, target = fused_groups(_model(), "cpu_llvm")
    kernel = lower_group(calls[0].op, "k", target)
    formats = dict(kernel.func.attr(TENSOR_FORMATS_ATTR))
    names = [p.name for p in kernel.func.params if hasattr(p, "shape")]
    assert list(formats) == names[:len(formats)] and all(isinstance(f, FixedPoint) for f in formats.values())


def test_no_config_no_formats_and_bad_config_is_refused():
    lib = tk.compile(_model(), target="cpu_llvm")
    assert all(not group_formats(n.op) for n in post_order(lib.graph.main.body)
               if isinstance(n, Call) and isinstance(n.op, Function))
    for config, message in (({"width": 16}, "needs 'calibration'"),
                            ({"calibration": _samples(), "method": "median"}, "unknown calibration method"),
                            ({"calibration": [], "width": 16}, "at least one calibration sample")):
        with pytest.raises(TensorkilnError, match=message):
            tk.compile(_model(), target="cpu_llvm", context=PassContext(config={"assign_fixed_point": config}))
