"""simplify_inference: batch_norm -> scale/shift -> folded into conv2d; identities vanish."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import fuse_ops, simplify_inference

from _graphs import conv_bn_relu, random_input


def _bn_params(channels):
    rng = np.random.default_rng(1)
    return [rng.uniform(0.5, 1.5, channels).astype("float32") for _ in range(4)]


def test_simplify_inference_turns_conv_bn_relu_into_conv_bias_relu():
    x = graph.var("x", shape=(1, 3, 8, 8))
    weight = np.random.default_rng(2).uniform(-1, 1, (4, 3, 3, 3)).astype("float32")
    gamma, beta, mean, var = _bn_params(4)
    conv = graph.nn.conv2d(x, graph.const(weight), padding=1)
    bn = graph.nn.batch_norm(conv, *map(graph.const, (gamma, beta, mean, var)), epsilon=1e-3)
    before = Module.from_expr(graph.nn.relu(bn))

    # The pass computes in float64 and rounds the scale to float32 before it scales the weight.
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-3)
    rounded_scale = scale.astype("float32").astype(np.float64)
    new_weight = (weight.astype(np.float64) * rounded_scale[:, None, None, None]).astype("float32")
    new_bias = (beta.astype(np.float64) - mean.astype(np.float64) * scale).astype("float32")
    expected = Module.from_expr(graph.nn.relu(graph.nn.bias_add(
        graph.nn.conv2d(x, graph.const(new_weight), padding=1), graph.const(new_bias))))
    after = simplify_inference(before)
    assert_structural_equal(after, expected)
    data = random_input(x)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}),
                               rtol=1e-5, atol=1e-5)


def test_conv_bn_relu_fuses_into_one_group_after_simplify_inference():
    x = graph.var("x", shape=(1, 3, 8, 8))
    fused = fuse_ops(simplify_inference(Module.from_expr(conv_bn_relu(x, 3, 4))))
    (group,) = [n for n in graph.post_order(fused.main.body) if isinstance(n, graph.Call)]
    ops = [n.op.name for n in graph.post_order(group.op.body) if isinstance(n, graph.Call)]
    assert ops == ["nn.conv2d", "nn.bias_add", "nn.relu"]


def test_batch_norm_without_a_foldable_producer_becomes_multiply_add():
    x = graph.var("x", shape=(2, 4, 3))
    gamma, beta, mean, var = _bn_params(4)
    before = Module.from_expr(graph.nn.batch_norm(x, *map(graph.const, (gamma, beta, mean, var))))
    scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + 1e-5)
    shift = beta - mean * scale
    expected = Module.from_expr(graph.add(graph.multiply(x, graph.const(scale.astype("float32").reshape(4, 1))),
                                          graph.const(shift.astype("float32").reshape(4, 1))))
    after = simplify_inference(before)
    assert_structural_equal(after, expected)
    data = random_input(x)
    # atol: an output near zero is the difference of two rounded terms (whichever inputs the shared
    # generator hands this test)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}), rtol=1e-5,
                               atol=1e-6)


def test_batch_norm_with_computed_parameters_keeps_the_algebra_as_ops():
    x = graph.var("x", shape=(1, 4, 2, 2))
    gamma = graph.var("gamma", shape=(4,))
    _, beta, mean, var = _bn_params(4)
    before = Module.from_expr(graph.nn.batch_norm(x, gamma, *map(graph.const, (beta, mean, var))))
    after = simplify_inference(before)
    assert "nn.batch_norm" not in str(after)
    inputs = {"x": random_input(x), "gamma": np.linspace(0.5, 1.5, 4, dtype="float32")}
    np.testing.assert_allclose(graph.evaluate(after, inputs), graph.evaluate(before, inputs), rtol=1e-5, atol=1e-6)


def test_identity_ops_vanish():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.call("copy", graph.call("copy", graph.nn.relu(x))))
    assert_structural_equal(simplify_inference(before), Module.from_expr(graph.nn.relu(x)))


def test_a_copy_of_a_model_input_stays():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.call("copy", x))
    assert simplify_inference(before) is before


def test_simplify_inference_leaves_a_graph_without_work_unchanged():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.nn.relu(x))
    assert simplify_inference(before) is before
