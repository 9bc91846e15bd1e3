"""The nine onnx light models through `tk.compile` on cpu_llvm at the default opt level
(what the ONNX backend and the CLI use): they match their stored outputs within onnx's
tolerances, run wholly on cpu_llvm, and give the same answer on every run.

Each model is compiled once (module-scoped cache) and shared by the tests below;
compiling all nine is most of this file's time (about 2 minutes on 2 cores).
"""
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.frontend import from_onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# (name, rtol, atol) as in onnx.backend.test.case.model.
MODELS = [("bvlc_alexnet", 1e-3, 1e-7), ("densenet121", 2e-3, 1e-7), ("inception_v1", 1e-3, 1e-7),
          ("inception_v2", 1e-3, 1e-7), ("resnet50", 1e-3, 1e-7), ("shufflenet", 1e-3, 1e-7),
          ("squeezenet", 1e-3, 1e-7), ("vgg19", 1e-3, 1e-7), ("zfnet512", 1e-3, 1e-7)]
NAMES = [m[0] for m in MODELS]

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")


def light_model(name):
    """(graph module, input, stored output): the input the onnx runner feeds light models, arange / n."""
    mod = from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    return mod, data, expected


@pytest.fixture(scope="module")
def compiled():
    cache = {}

    def get(name):
        if name not in cache:
            mod, data, expected = light_model(name)
            lib = tk.compile(mod, target="cpu_llvm")
            cache[name] = (lib, data, expected, lib(data))
        return cache[name]
    return get


@pytest.mark.parametrize("name, rtol, atol", MODELS, ids=NAMES)
def test_light_model_matches_stored_output(compiled, name, rtol, atol):
    _, _, expected, output = compiled(name)
    assert output.shape == expected.shape and output.dtype == expected.dtype
    np.testing.assert_allclose(output, expected, rtol=rtol, atol=atol)


@pytest.mark.parametrize("name", NAMES)
def test_light_model_runs_wholly_on_cpu_llvm(compiled, name):
    lib = compiled(name)[0]
    placement = lib.placement()
    assert placement and not any(step["fallback_reason"] for step in placement)
    assert {step["target"] for step in placement} == {lib.target}
    summary = lib.summary()
    assert summary["kernels"] <= summary["kernel_launches"] <= summary["ops"]
    assert 0 < summary["peak_activation_bytes"] <= summary["unplanned_activation_bytes"]
    assert summary["compile_seconds"] > 0


@pytest.mark.parametrize("name", NAMES)
def test_light_model_runs_are_repeatable(compiled, name):
    lib, data, _, output = compiled(name)
    np.testing.assert_array_equal(lib(data), output)  # concurrent kernels and reused buffers do not race
