"""fold_scale_axis: per-channel multiply/add fold into conv2d, dense and matmul weights."""
import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import fold_scale_axis

from _graphs import random_input

RNG = np.random.default_rng(3)


def _array(*shape):
    return RNG.uniform(0.5, 1.5, shape).astype("float32")


def _check_numerics(before, after, **inputs):
    np.testing.assert_allclose(graph.evaluate(after, inputs), graph.evaluate(before, inputs), rtol=1e-5, atol=1e-6)


def test_fold_scale_axis_folds_bias_and_scale_of_conv2d():
    x = graph.var("x", shape=(1, 2, 5, 5))
    weight, bias, scale, shift = _array(3, 2, 3, 3), _array(3), _array(3, 1, 1), _array(3, 1, 1)
    conv = graph.nn.bias_add(graph.nn.conv2d(x, graph.const(weight)), graph.const(bias))
    before = Module.from_expr(graph.add(graph.multiply(graph.const(scale), conv), graph.const(shift)))
    s = scale.reshape(3).astype(np.float64)
    expected = Module.from_expr(graph.nn.bias_add(
        graph.nn.conv2d(x, graph.const((weight * s[:, None, None, None]).astype("float32"))),
        graph.const((bias * s).astype("float32") + shift.reshape(3))))
    after = fold_scale_axis(before)
    assert_structural_equal(after, expected)
    _check_numerics(before, after, x=random_input(x))


def test_fold_scale_axis_folds_into_dense_and_matmul():
    x = graph.var("x", shape=(2, 4))
    dense = graph.nn.dense(x, graph.const(_array(3, 4))) * graph.const(_array(3)) + graph.const(_array(3))
    matmul = graph.nn.matmul(x, graph.const(_array(4, 3))) * graph.const(_array(1, 3))
    before = Module.from_expr(graph.tuple_(dense, matmul))
    after = fold_scale_axis(before)
    ops = [n.op.name for n in graph.post_order(after.main.body) if isinstance(n, graph.Call)]
    assert sorted(ops) == ["nn.bias_add", "nn.dense", "nn.matmul"]
    inputs = {"x": random_input(x)}
    for got, want in zip(graph.evaluate(after, inputs), graph.evaluate(before, inputs)):
        np.testing.assert_allclose(got, want, rtol=1e-5)


@pytest.mark.parametrize("scale_shape", [(1, 5, 5), (3, 5, 5), (1, 3, 1, 1, 1)])
def test_fold_scale_axis_leaves_scales_that_vary_along_other_axes(scale_shape):
    x = graph.var("x", shape=(1, 2, 5, 5))
    before = Module.from_expr(graph.nn.conv2d(x, graph.const(_array(3, 2, 1, 1))) * graph.const(_array(*scale_shape)))
    assert fold_scale_axis(before) is before


def test_fold_scale_axis_leaves_a_conv_with_other_users():
    x = graph.var("x", shape=(1, 2, 5, 5))
    conv = graph.nn.conv2d(x, graph.const(_array(3, 2, 1, 1)))
    before = Module.from_expr(graph.tuple_(conv * graph.const(_array(3, 1, 1)), graph.nn.relu(conv)))
    assert fold_scale_axis(before) is before


def test_float32_weight_scaling_gives_the_float64_products_bits():
    from tensorkiln import graph as g
    from tensorkiln.passes.fold_scale_axis import _scale_weight
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((64, 8, 3, 3)) * np.exp(rng.uniform(-85, 85, (64, 8, 3, 3)))).astype(np.float32)
    weight[0] = np.float32(1e-40)   # denormals
    vector = (rng.standard_normal(64) * np.exp(rng.uniform(-40, 40, 64))).astype(np.float32)
    vector[1] = np.float32(3e38)    # overflow to inf
    conv = g.nn.conv2d(g.var("x", shape=(1, 8, 5, 5)), g.const(weight))
    with np.errstate(over="ignore"):
        exact = (weight.astype(np.float64) * vector.astype(np.float64).reshape(64, 1, 1, 1)).astype(np.float32)
        scaled = _scale_weight(conv, vector).args[1].value
    assert scaled.dtype == np.float32
    np.testing.assert_array_equal(scaled.view(np.uint32), exact.view(np.uint32))
