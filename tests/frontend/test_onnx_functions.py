"""from_onnx expands ONNX function ops (schema function bodies and model-local functions)."""
import numpy as np
import pytest
from onnx import AttributeProto, TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import UnsupportedOpError


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _model(nodes, inputs, outputs, opset=23, functions=(), extra_opsets=()):
    g = helper.make_graph(nodes, "test", inputs, outputs)
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    return helper.make_model(g, opset_imports=opsets, functions=list(functions))


def _attention_rms_model():
    """RMSNormalization on Q, then causal grouped-query Attention (4 query heads, 2 kv heads)."""
    nodes = [helper.make_node("RMSNormalization", ["q", "scale"], ["q_norm"], axis=-1, epsilon=1e-5),
             helper.make_node("Attention", ["q_norm", "k", "v"], ["y"], is_causal=1)]
    inputs = [_info("q", [2, 4, 3, 8]), _info("scale", [8]), _info("k", [2, 2, 5, 8]), _info("v", [2, 2, 5, 6])]
    return _model(nodes, inputs, [_info("y", [2, 4, 3, 6])])


def _feeds(model, seed=0):
    rng = np.random.default_rng(seed)
    return {i.name: rng.standard_normal([d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32)
            for i in model.graph.input}


def test_attention_and_rms_normalization_expand_to_their_function_bodies():
    model = _attention_rms_model()
    feeds = _feeds(model)
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    mod = from_onnx(model)
    ops = {node.op.name for node in graph.post_order(mod.main.body) if isinstance(node, graph.Call)}
    assert {"nn.matmul", "nn.softmax"} <= ops, ops
    np.testing.assert_allclose(graph.evaluate(mod, feeds), expected, rtol=1e-5, atol=1e-5)


def test_attention_and_rms_normalization_compile_for_cpu_llvm():
    from tensorkiln.onnx_backend import backend_for
    model = _attention_rms_model()
    feeds = _feeds(model, seed=1)
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    (got,) = backend_for("cpu_llvm").prepare(model).run(feeds)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def _local_functions():
    """`local.ScaledNorm(x, s) <alpha>` = alpha * RMSNormalization(x, s) and `local.Twice`, which
    applies ScaledNorm twice: nested expansion, repeated inlining and attribute references."""
    alpha = helper.make_node("Constant", [], ["a"])
    alpha.attribute.append(helper.make_attribute_ref("value_float", AttributeProto.FLOAT, ref_attr_name="alpha"))
    scaled_norm = helper.make_function(
        "local", "ScaledNorm", ["x", "s"], ["y"],
        [helper.make_node("RMSNormalization", ["x", "s"], ["n"], axis=-1), alpha,
         helper.make_node("Mul", ["n", "a"], ["y"])],
        [helper.make_opsetid("", 23)], attributes=["alpha"])
    twice = helper.make_function(
        "local", "Twice", ["x", "s"], ["y"],
        [helper.make_node("ScaledNorm", ["x", "s"], ["t"], domain="local", alpha=2.0),
         helper.make_node("ScaledNorm", ["t", "s"], ["y"], domain="local", alpha=0.5)],
        [helper.make_opsetid("", 23), helper.make_opsetid("local", 1)])
    return [scaled_norm, twice]


def test_local_functions_expand_recursively_with_bound_attributes():
    nodes = [helper.make_node("Twice", ["x", "s"], ["y"], domain="local")]
    model = _model(nodes, [_info("x", [3, 4]), _info("s", [4])], [_info("y", None)],
                   functions=_local_functions(), extra_opsets=[("local", 1)])
    feeds = _feeds(model, seed=2)
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    np.testing.assert_allclose(graph.evaluate(from_onnx(model), feeds), expected, rtol=1e-5, atol=1e-5)


def test_ops_unsupported_inside_a_function_body_are_listed():
    bad = helper.make_function("local", "Bad", ["x"], ["y"], [helper.make_node("FooOp", ["x"], ["y"], name="foo")],
                               [helper.make_opsetid("", 23)])
    nodes = [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("Bad", ["a"], ["y"], domain="local", name="b1")]
    model = _model(nodes, [_info("x", [2])], [_info("y", None)], functions=[bad], extra_opsets=[("local", 1)])
    with pytest.raises(UnsupportedOpError, match=r"1 unsupported op type\(s\): FooOp \(nodes: b1/foo\)"):
        from_onnx(model)


def test_op_without_converter_or_function_stays_unsupported():
    nodes = [helper.make_node("ImageDecoder", ["x"], ["y"], name="dec")]
    model = _model(nodes, [_info("x", [16], TensorProto.UINT8)], [_info("y", None, TensorProto.UINT8)])
    with pytest.raises(UnsupportedOpError, match=r"unsupported op type\(s\): ImageDecoder \(nodes: dec\)"):
        from_onnx(model)


def test_a_function_that_calls_itself_is_unsupported_not_endless():
    loop = helper.make_function("local", "Loop", ["x"], ["y"],
                                [helper.make_node("Loop", ["x"], ["y"], domain="local", name="again")],
                                [helper.make_opsetid("local", 1)])
    nodes = [helper.make_node("Loop", ["x"], ["y"], domain="local", name="l")]
    model = _model(nodes, [_info("x", [2])], [_info("y", None)], functions=[loop], extra_opsets=[("local", 1)])
    with pytest.raises(UnsupportedOpError, match=r"unsupported op type\(s\): local::Loop \(nodes: l/again/again"):
        from_onnx(model)
