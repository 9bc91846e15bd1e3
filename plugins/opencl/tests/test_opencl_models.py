"""The nine light models shipped with onnx, compiled for opencl (opt level 2), match the stored outputs.

Every op runs on opencl (no fallback) with the SDK's GPU schedule library, which opencl's
strategies hook registers (tensorkiln.sdk.schedules.gpu, knobs at their defaults); all
kernels of a model are one OpenCL program. On PoCL (2 loaded CPU cores) the whole file
takes about 70 s with a warm PoCL kernel cache; vgg19 is ~14 s a run (measured: squeezenet 0.18 s, alexnet 0.4 s, zfnet512 1.0 s, inception_v1 0.7 s,
resnet50 2.7 s, shufflenet 0.08 s, vgg19 13.6 s per inference).
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
# (name, rtol, atol) as in onnx.backend.test.case.model.
# the three longest (13-27 s each on a 2-core host, PoCL compiling every kernel) run with --runslow; the
# others cover the same op kinds (inception_v1: concat and LRN, resnet50: residual blocks) in CI
_SLOW = pytest.mark.slow
MODELS = [("bvlc_alexnet", 1e-3, 1e-7), pytest.param("densenet121", 2e-3, 1e-7, marks=_SLOW),
          ("inception_v1", 1e-3, 1e-7), pytest.param("inception_v2", 1e-3, 1e-7, marks=_SLOW),
          ("resnet50", 1e-3, 1e-7), ("shufflenet", 1e-3, 1e-7), ("squeezenet", 1e-3, 1e-7),
          pytest.param("vgg19", 1e-3, 1e-7, marks=_SLOW), ("zfnet512", 1e-3, 1e-7)]


def _model_id(case) -> str:
    return case.values[0] if hasattr(case, "values") else case[0]


@pytest.mark.parametrize("name, rtol, atol", MODELS, ids=[_model_id(m) for m in MODELS])
def test_light_model_on_opencl_matches_stored_output(opencl_target, name, rtol, atol):
    mod = from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    lib = tk.compile(mod, opencl_target, opt_level=2)
    placement = lib.placement()
    assert {row["target"] for row in placement} == {str(opencl_target)}, "an op fell back to the CPU"
    assert len(lib.artifacts) == 1 and lib.artifacts[str(opencl_target)].source.count("__kernel void") == \
        len({row["kernel"] for row in placement})   # one program holds every kernel
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)   # the onnx runner's input
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(lib(data), expected, rtol=rtol, atol=atol)
