"""The nine light models shipped with onnx: from_onnx + evaluate match the stored outputs."""
import os

import numpy as np
import onnx
import pytest
from onnx import numpy_helper

from tensorkiln import graph
from tensorkiln.frontend import from_onnx

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
# (name, rtol, atol) as in onnx.backend.test.case.model.
MODELS = [("bvlc_alexnet", 1e-3, 1e-7), ("densenet121", 2e-3, 1e-7), ("inception_v1", 1e-3, 1e-7),
          ("inception_v2", 1e-3, 1e-7), ("resnet50", 1e-3, 1e-7), ("shufflenet", 1e-3, 1e-7),
          ("squeezenet", 1e-3, 1e-7), ("vgg19", 1e-3, 1e-7), ("zfnet512", 1e-3, 1e-7)]


@pytest.mark.parametrize("name, rtol, atol", MODELS, ids=[m[0] for m in MODELS])
def test_light_model_matches_stored_output(name, rtol, atol):
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    mod = from_onnx(path)
    (param,) = mod.main.params
    # The input the onnx backend runner generates for light models: arange / n.
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
    out = graph.evaluate(mod, {param.name: data})
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    np.testing.assert_allclose(out, expected, rtol=rtol, atol=atol)
