"""Graph IR nodes, types at construction, printer, traversal and rewrite."""
import dataclasses

import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import Call, Constant, Function, Module, TensorType, Tuple, TupleGetItem, TupleType
from tensorkiln.ir.errors import DTypeError, ShapeError


def test_types_are_computed_at_construction():
    x = graph.var("x", shape=(1, 3, 8, 8))
    y = graph.nn.conv2d(x, graph.const(np.zeros((4, 3, 3, 3), "float32")), strides=2, padding=1)
    assert y.checked_type == TensorType((1, 4, 4, 4), "float32")
    assert y.shape == (1, 4, 4, 4) and y.dtype == "float32"


def test_operators_build_calls():
    x = graph.var("x", shape=(2, 3))
    expr = (x + 1.0) * x / 2.0 - x
    assert isinstance(expr, Call) and expr.op.name == "subtract"
    assert expr.args[0].op.name == "divide"
    assert (-x).op.name == "negative"


def test_shape_error_names_op_node_and_both_shapes():
    x = graph.var("x", shape=(2, 3))
    with pytest.raises(ShapeError, match=r"add: shapes \(2, 3\) and \(4,\) do not broadcast(?s:.*)in add\(%x"):
        graph.add(x, graph.var("y", shape=(4,)))


def test_dtype_error_on_mixed_dtypes():
    with pytest.raises(DTypeError, match="add: inputs have different dtypes float32, int64"):
        graph.var("a", shape=(2,)) + graph.var("b", shape=(2,), dtype="int64")


def test_printer_is_ssa_text():
    x = graph.var("x", shape=(1, 3, 8, 8))
    w = graph.const(np.zeros((4, 3, 3, 3), "float32"))
    mod = Module.from_expr(graph.nn.relu(graph.nn.conv2d(x, w, strides=(2, 2))))
    text = str(mod)
    assert "fn main(%x: float32(1, 3, 8, 8)) -> float32(1, 4, 3, 3) {" in text
    assert "%0 = nn.conv2d(%x, const(float32(4, 3, 3, 3)), strides=(2, 2))" in text
    assert "%1 = nn.relu(%0)" in text


def test_module_from_expr_uses_free_vars_in_first_use_order():
    a, b = graph.var("a", shape=(2,)), graph.var("b", shape=(2,))
    mod = Module.from_expr(b * a + a)
    assert [p.name for p in mod.main.params] == ["b", "a"]
    assert mod.main.ret_type == TensorType((2,), "float32")


def test_tuple_outputs_and_split():
    x = graph.var("x", shape=(4, 6))
    parts = graph.split(x, 3, axis=1)
    assert isinstance(parts, Tuple) and len(parts) == 3
    assert parts[1].shape == (4, 2)
    assert isinstance(parts[1], TupleGetItem)
    assert isinstance(parts.checked_type, TupleType)


def test_post_order_visits_operands_first_once():
    x = graph.var("x", shape=(2,))
    shared = graph.exp(x)
    out = shared + shared
    order = list(graph.post_order(out))
    assert order == [x, shared, out]
    assert order.index(shared) < order.index(out)


def test_rewrite_replaces_and_keeps_sharing():
    x = graph.var("x", shape=(2,))
    shared = graph.exp(x)
    mod = Module.from_expr(shared * shared)

    def exp_to_log(node):
        if isinstance(node, Call) and node.op.name == "exp":
            return graph.log(node.args[0])
        return None

    new = graph.rewrite(mod, exp_to_log)
    body = new.main.body
    assert body.args[0] is body.args[1] and body.args[0].op.name == "log"
    graph.assert_structural_equal(new, Module.from_expr(graph.log(x) * graph.log(x)))


def test_rewrite_that_changes_nothing_returns_input():
    x = graph.var("x", shape=(2,))
    mod = Module.from_expr(graph.exp(x) + x)
    assert graph.rewrite(mod, lambda node: None) is mod


def test_rewrite_folds_constants_in_the_style_of_a_pass():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(x + (graph.const([1.0, 2, 3, 4]) + graph.const(1.0)))

    def fold(node):
        if isinstance(node, Call) and node.args and all(isinstance(a, Constant) for a in node.args):
            return Constant(graph.evaluate_call(node, [a.value for a in node.args]))
        return None

    expected = Module.from_expr(x + graph.const([2.0, 3, 4, 5]))
    graph.assert_structural_equal(graph.rewrite(before, fold), expected)


def test_rewrite_deep_graph_is_iterative():
    x = graph.var("x", shape=(2,))
    out = x
    for _ in range(5000):
        out = graph.exp(out)
    result = graph.rewrite(out, lambda n: graph.log(n.args[0]) if isinstance(n, Call) else None)
    assert result.op.name == "log"


def test_replace_rebuilds_type():
    x = graph.var("x", shape=(2, 3))
    call = graph.transpose(x)
    assert dataclasses.replace(call, args=(graph.var("y", shape=(5, 4)),)).shape == (4, 5)


def test_call_of_a_function_checks_argument_types():
    p = graph.var("p", shape=(2,))
    fused = Function((p,), graph.nn.relu(graph.exp(p)), {"Primitive": 1})
    x = graph.var("x", shape=(2,))
    call = Call(fused, (x,))
    assert call.shape == (2,)
    np.testing.assert_allclose(graph.evaluate(call, {"x": np.zeros(2, "float32")}), [1.0, 1.0])
    with pytest.raises(ShapeError, match="parameter types"):
        Call(fused, (graph.var("z", shape=(3,)),))


def test_verify_module_accepts_sound_ir_and_rejects_unbound_vars():
    x, y = graph.var("x", shape=(2,)), graph.var("y", shape=(2,))
    graph.verify_module(Module.from_expr(x + y))
    from tensorkiln.ir.errors import InternalError
    broken = Module((("main", Function((x,), x + y)),))
    with pytest.raises(InternalError, match=r"unbound variables \['y'\]"):
        graph.verify_module(broken)
