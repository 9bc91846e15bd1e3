"""The numpy reference interpreter."""
import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.ir.errors import DTypeError, RuntimeLaunchError, ShapeError


def test_evaluate_module_and_tuple_outputs():
    x = graph.var("x", shape=(2, 2))
    mod = Module.from_expr(graph.tuple_(graph.nn.relu(x), graph.sum(x, axis=1)))
    data = np.array([[-1.0, 2.0], [3.0, -4.0]], "float32")
    relu, total = graph.evaluate(mod, {"x": data})
    np.testing.assert_array_equal(relu, np.maximum(data, 0))
    np.testing.assert_array_equal(total, data.sum(axis=1))


def test_evaluate_checks_inputs():
    mod = Module.from_expr(graph.exp(graph.var("x", shape=(2,))))
    with pytest.raises(RuntimeLaunchError, match="missing input 'x'"):
        graph.evaluate(mod, {})
    with pytest.raises(ShapeError, match=r"input 'x' has shape \(3,\), expected \(2,\)"):
        graph.evaluate(mod, {"x": np.zeros(3, "float32")})
    with pytest.raises(DTypeError, match="input 'x' has dtype float64, expected float32"):
        graph.evaluate(mod, {"x": np.zeros(2)})


def test_evaluate_small_cnn_matches_numpy():
    rng = np.random.default_rng(0)
    data = rng.standard_normal((1, 2, 6, 6)).astype("float32")
    weight = rng.standard_normal((3, 2, 3, 3)).astype("float32")
    bias = rng.standard_normal(3).astype("float32")
    x = graph.var("x", shape=data.shape)
    y = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, graph.const(weight), padding=1), graph.const(bias)))
    out = graph.evaluate(Module.from_expr(y), {"x": data})
    padded = np.pad(data, ((0, 0), (0, 0), (1, 1), (1, 1)))
    expected = np.zeros((1, 3, 6, 6), "float32")
    for o in range(3):
        for i in range(6):
            for j in range(6):
                expected[0, o, i, j] = (padded[0, :, i:i + 3, j:j + 3] * weight[o]).sum() + bias[o]
    np.testing.assert_allclose(out, np.maximum(expected, 0), rtol=1e-5, atol=1e-5)
