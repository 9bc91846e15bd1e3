"""benchmarks/layers_vs_ort.py reads a conv's layout from its weight, so a conv that alter_layout left NCHW
(shufflenet's depthwise convs) pairs with onnxruntime's row of the same shape, not a transposed one."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import layers_vs_ort  # noqa: E402


@pytest.mark.parametrize("weight, out, nchw", [
    ((136, 136, 3, 3), (1, 136, 28, 28), True),     # OIHW, as many inputs as outputs
    ((136, 1, 3, 3), (1, 136, 28, 28), True),       # depthwise OIHW
    ((64, 32, 1, 1), (1, 64, 56, 56), True),
    ((3, 3, 136, 136), (1, 28, 28, 136), False),    # HWIO
    ((3, 3, 1, 136), (1, 28, 28, 136), False),      # depthwise HWIO
    ((1, 1, 32, 64), (1, 56, 56, 64), False),
    ((3, 3, 3, 3), (1, 8, 8, 3), False),            # both readings fit: NHWC, cpu_llvm's preference
    ((4, 3, 3, 64, 8), (1, 56, 56, 256), False),    # packed OHWI{n}o
])
def test_a_convs_layout_is_read_from_its_weight(weight, out, nchw):
    assert layers_vs_ort._is_nchw(weight, out) is nchw
