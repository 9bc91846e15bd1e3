"""Seeded random ops (RandomUniform, RandomNormal, their *Like forms, Dropout in training mode, Bernoulli)
draw from numpy's RandomState(seed) as onnx's reference does, so they match ReferenceEvaluator exactly;
an op without a seed is refused with the reason."""
from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.ir.errors import UnsupportedOpError


def _model(nodes, inputs, outputs, opset=22):
    graph = helper.make_graph(nodes, "random", inputs, outputs)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _info(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.mark.parametrize("op, attrs", [
    ("RandomUniform", dict(low=-2.0, high=3.0)), ("RandomNormal", dict(mean=1.0, scale=0.5)),
    ("RandomUniform", dict(dtype=TensorProto.DOUBLE)), ("RandomNormal", dict(dtype=TensorProto.FLOAT16))])
def test_seeded_random_tensor_matches_onnx_reference(op, attrs):
    elem = attrs.get("dtype", TensorProto.FLOAT)
    node = helper.make_node(op, [], ["y"], shape=[3, 4, 5], seed=7.0, **attrs)
    model = _model([node], [], [_info("y", elem, [3, 4, 5])])
    (got,) = tk.compile(model, target="cpu_llvm").run({})
    (want,) = ReferenceEvaluator(model).run(None, {})
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike"])
def test_seeded_random_like_matches_onnx_reference(op):
    node = helper.make_node(op, ["x"], ["y"], seed=3.0, dtype=TensorProto.DOUBLE)
    model = _model([node], [_info("x", TensorProto.FLOAT, [6, 2])], [_info("y", TensorProto.DOUBLE, [6, 2])])
    feeds = {"x": np.zeros((6, 2), np.float32)}
    (got,) = tk.compile(model, target="cpu_llvm").run(feeds)
    (want,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("ratio", [0.25, 0.75])
def test_dropout_training_mode_with_seed_matches_onnx_reference(ratio):
    node = helper.make_node("Dropout", ["x", "r", "t"], ["y", "mask"], seed=5)
    model = _model([node], [_info("x", TensorProto.FLOAT, [4, 8]), _info("r", TensorProto.FLOAT, []),
                            _info("t", TensorProto.BOOL, [])],
                   [_info("y", TensorProto.FLOAT, [4, 8]), _info("mask", TensorProto.BOOL, [4, 8])])
    feeds = {"x": np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32),
             "r": np.array(ratio, np.float32), "t": np.array(True)}
    compiled = tk.compile(model, target="cpu_llvm")
    got = compiled.run(feeds)
    want = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    # inference mode at run time: the identity and an all-true mask
    inference = compiled.run({**feeds, "t": np.array(False)})
    np.testing.assert_array_equal(inference[0], feeds["x"])
    assert inference[1].all()


def test_seeded_bernoulli_draws_zeros_and_ones_at_the_given_rates():
    # the reference draws with RandomState.binomial, the function body with RandomUniformLike: same law,
    # other numbers, so the rates are compared (n = 20000: a rate off by more than 0.02 is ~6 sigma)
    p = np.repeat(np.array([0.1, 0.5, 0.9], np.float32), 20000)
    node = helper.make_node("Bernoulli", ["p"], ["y"], seed=11.0)
    model = _model([node], [_info("p", TensorProto.FLOAT, [p.size])], [_info("y", TensorProto.FLOAT, [p.size])])
    compiled = tk.compile(model, target="cpu_llvm")
    (got,) = compiled.run({"p": p})
    assert set(np.unique(got)) <= {0.0, 1.0}
    np.testing.assert_allclose(got.reshape(3, -1).mean(axis=1), [0.1, 0.5, 0.9], atol=0.02)
    np.testing.assert_array_equal(compiled.run({"p": p})[0], got)   # seeded: the same draw every run


def test_random_op_without_a_seed_is_refused_with_the_reason():
    node = helper.make_node("RandomUniform", [], ["y"], shape=[2, 2])
    model = _model([node], [], [_info("y", TensorProto.FLOAT, [2, 2])])
    with pytest.raises(UnsupportedOpError, match=r"RandomUniform.*no seed attribute.*give the node a seed"):
        tk.compile(model, target="cpu_llvm")
