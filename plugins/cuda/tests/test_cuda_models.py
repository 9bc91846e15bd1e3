"""The nine light models shipped with onnx, compiled for cuda (opt level 2), match the stored outputs on the
CPU shim; every op runs on cuda through the SDK's GPU schedule library (the strategies hook), all kernels
of a model are one CUDA translation unit with its CUBIN for sm_90 and per-kernel ptxas resources.

Slow: each model builds its CUDA source with NVRTC and g++ (cached on disk afterwards) and runs
every CUDA thread of every kernel on two cores.
"""
from __future__ import annotations

import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.frontend import from_onnx

from tensorkiln_cuda.arch import architecture

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = [("bvlc_alexnet", 1e-3, 1e-7), ("densenet121", 2e-3, 1e-7), ("inception_v1", 1e-3, 1e-7),
          ("inception_v2", 1e-3, 1e-7), ("resnet50", 1e-3, 1e-7), ("shufflenet", 1e-3, 1e-7),
          ("squeezenet", 1e-3, 1e-7), ("vgg19", 1e-3, 1e-7), ("zfnet512", 1e-3, 1e-7)]


def compile_light_model(name: str, target: str = "cuda -arch=sm_90 -device=cpu_shim"):
    mod = from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    return mod, tk.compile(mod, target, opt_level=2)


@pytest.mark.slow
@pytest.mark.parametrize("name, rtol, atol", MODELS, ids=[m[0] for m in MODELS])
def test_light_model_on_the_cuda_shim_matches_stored_output(name, rtol, atol):
    mod, lib = compile_light_model(name)
    target = "cuda -arch=sm_90 -compiler=nvrtc -device=cpu_shim -fast_math=False"
    placement = lib.placement()
    assert {row["target"] for row in placement} == {target}, "an op fell back to the CPU"
    (artifact,) = lib.artifacts.values()
    kernels = {row["kernel"] for row in placement}
    assert artifact.source.count('extern "C" __global__') == len(kernels)
    resources = artifact.metadata["resources"]
    assert set(resources) == kernels
    sm90 = architecture("sm_90")
    for used in resources.values():
        assert used["spill_stores"] == 0 and used["registers"] * used["threads_per_block"] <= sm90.registers_per_sm
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)   # the onnx runner's input
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(lib(data), expected, rtol=rtol, atol=atol)
