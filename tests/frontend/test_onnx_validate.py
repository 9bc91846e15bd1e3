"""validate.py: invalid ONNX models are rejected with a FrontendError naming the node, op or field
(onnx.checker's full check plus our own checks); valid ones, with symbolic dims or function ops, pass."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import FrontendError


def _model(nodes, inputs, outputs, initializers=(), opset=17, extra_opsets=()):
    g = helper.make_graph(nodes, "test", inputs, outputs, list(initializers))
    opsets = [helper.make_opsetid("", opset), *(helper.make_opsetid(d, v) for d, v in extra_opsets)]
    return helper.make_model(g, opset_imports=opsets)


def _info(name, shape, dtype=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _relu(**attrs):
    return helper.make_node("Relu", ["x"], ["y"], name="relu_0", **attrs)


def test_duplicate_graph_output_names_are_rejected():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2]), _info("y", [2])])
    with pytest.raises(FrontendError, match="graph output 'y' is listed twice"):
        from_onnx(model)


def test_a_value_defined_twice_names_both_definitions():
    nodes = [_relu(), helper.make_node("Neg", ["x"], ["y"], name="neg_1")]
    model = _model(nodes, [_info("x", [2])], [_info("y", [2])])
    with pytest.raises(FrontendError, match=r"ONNX node 'neg_1' \(Neg\) output 0 redefines 'y', already defined by "
                                            r"ONNX node 'relu_0' \(Relu\) output 0"):
        from_onnx(model)


def test_duplicate_initializer_and_empty_names_are_rejected():
    w = numpy_helper.from_array(np.ones(2, np.float32), "w")
    add = helper.make_node("Add", ["x", "w"], ["y"])
    with pytest.raises(FrontendError, match="initializer 'w' is defined twice"):
        from_onnx(_model([add], [_info("x", [2])], [_info("y", [2])], [w, w]))
    with pytest.raises(FrontendError, match="a graph output has an empty name"):
        from_onnx(_model([helper.make_node("Relu", ["x"], [""])], [_info("x", [2])], [_info("", [2])]))


def test_unknown_attribute_is_rejected_with_the_checkers_message():
    model = _model([_relu(foo=3)], [_info("x", [2])], [_info("y", [2])])
    with pytest.raises(FrontendError, match=r"ONNX node 'relu_0' \(Relu\): .*onnx.checker.*"
                                            r"Unrecognized attribute: foo for operator Relu"):
        from_onnx(model)


def test_declared_output_dtype_that_differs_names_the_output_and_both_dtypes():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2], TensorProto.INT32)])
    with pytest.raises(FrontendError, match=r"graph output 'y' declares element type INT32 \(int32\), but the "
                                            r"graph computes float32"):
        from_onnx(model)


def test_undefined_output_element_type_is_rejected():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2], TensorProto.UNDEFINED)])
    with pytest.raises(FrontendError, match=r"graph output 'y' declares element type UNDEFINED"):
        from_onnx(model)


def test_dtype_override_skips_the_declared_output_dtype_check():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2])])
    assert from_onnx(model, dtype="float64").main.body.checked_type.dtype == "float64"


@pytest.mark.parametrize("domain, version, label, high", [("", 99, "ai.onnx \\(default\\)", 28),
                                                           ("", 0, "ai.onnx \\(default\\)", 28),
                                                           ("ai.onnx.ml", 99, "ai.onnx.ml", None)])
def test_unsupported_opset_names_domain_version_and_range(domain, version, label, high):
    import onnx
    high = high or onnx.defs.onnx_ml_opset_version()
    if domain:
        model = _model([_relu()], [_info("x", [2])], [_info("y", [2])], extra_opsets=[(domain, version)])
    else:
        model = _model([_relu()], [_info("x", [2])], [_info("y", [2])], opset=version)
    high = onnx.defs.onnx_opset_version() if not domain else high
    with pytest.raises(FrontendError, match=rf"domain '{label}' version {version} is not supported; tensorkiln "
                                            rf"supports versions 1 to {high}"):
        from_onnx(model)


def test_a_domain_imported_twice_is_rejected():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2])], extra_opsets=[("ai.onnx", 13)])
    with pytest.raises(FrontendError, match="lists domain 'ai.onnx \\(default\\)' twice"):
        from_onnx(model)


def test_declared_output_shape_that_strict_inference_refutes_is_rejected():
    model = _model([_relu()], [_info("x", [2, 3])], [_info("y", [5, 3])])
    with pytest.raises(FrontendError, match=r"ONNX node 'relu_0' \(Relu\): .*strict shape inference.*"
                                            r"existing shape differ in dimension 0: \(2\) vs \(5\)"):
        from_onnx(model)


def test_cycle_is_a_frontend_error_naming_the_node():
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="first"), helper.make_node("Relu", ["a"], ["b"], name="second")]
    model = _model(nodes, [_info("x", [2])], [_info("b", [2])])
    with pytest.raises(FrontendError, match=r"ONNX node 'first' \(Relu\) reads 'b', which no node"):
        from_onnx(model)


def test_missing_ir_version_is_rejected_by_the_checker():
    model = _model([_relu()], [_info("x", [2])], [_info("y", [2])])
    model.ir_version = 0
    with pytest.raises(FrontendError, match="onnx.checker.*ir_version"):
        from_onnx(model)


def test_symbolic_dims_pass_the_full_check_when_bound():
    model = _model([_relu()], [_info("x", ["N", 3])], [_info("y", ["N", 3])])
    assert from_onnx(model, shape={"x": (4, 3)}).main.body.checked_type.shape == (4, 3)


def test_outputs_without_shape_and_ops_of_local_functions_pass():
    body = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                [helper.make_opsetid("", 17)])
    g = helper.make_graph([helper.make_node("Twice", ["x"], ["y"], domain="local")], "t", [_info("x", [2])],
                          [_info("y", None)])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)],
                              functions=[body])
    assert from_onnx(model).main.body.checked_type.shape == (2,)


def test_strict_inference_failing_inside_a_function_body_is_not_our_error():
    # onnx's own inference of MeanVarianceNormalization's body at opset 13 fails (a Constant whose value is an
    # attribute reference); onnxruntime runs the model, and so do we.
    node = helper.make_node("MeanVarianceNormalization", ["x"], ["y"])
    model = _model([node], [_info("x", [3, 3, 3, 1])], [_info("y", [3, 3, 3, 1])], opset=13)
    assert from_onnx(model).main.body.checked_type.shape == (3, 3, 3, 1)


def test_float_mod_without_fmod_before_opset_28_is_rejected():
    node = helper.make_node("Mod", ["x", "x"], ["y"], name="mod_0")
    model = _model([node], [_info("x", [2])], [_info("y", [2])])
    with pytest.raises(FrontendError, match=r"ONNX node 'mod_0' \(Mod, opset 17\): attribute fmod=0 with float32"):
        from_onnx(model)
