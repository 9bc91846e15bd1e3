"""test_fpga_models.py: the light ONNX models of the test suite through C-simulation (slow).

Each model compiles for fpga_hls (every kernel an HLS top function, built with g++) and its
output on the onnx runner's input (arange / n) must match the stored output; the
estimates must cover every kernel.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.frontend import from_onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["squeezenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
          "vgg19", "zfnet512"]


@pytest.mark.slow
@pytest.mark.parametrize("name", MODELS)
def test_light_model_matches_stored_output_in_csimulation(name):
    mod = from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    lib = tk.compile(mod, target="fpga_hls")
    np.testing.assert_allclose(lib(data), expected, rtol=1e-3, atol=1e-5)
    summary = lib.summary()
    assert all(step["target"].startswith("fpga_hls") for step in summary["placement"])
    assert set(summary["estimates"]) == {step["kernel"] for step in summary["placement"]}
