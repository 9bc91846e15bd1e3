"""eliminate_common_subexpr: equal calls on identical operands, and equal constants, merge."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import eliminate_common_subexpr

from _graphs import random_input


def test_equal_calls_merge():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.nn.relu(x) + graph.nn.relu(x))
    relu = graph.nn.relu(x)
    expected = Module.from_expr(relu + relu)
    after = eliminate_common_subexpr(before)
    assert_structural_equal(after, expected)
    body = after.main.body
    assert body.args[0] is body.args[1]
    data = random_input(x)
    np.testing.assert_array_equal(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}))


def test_chains_on_equal_constants_merge_transitively():
    x = graph.var("x", shape=(1, 2, 4, 4))
    weight = np.ones((2, 2, 1, 1), dtype="float32")
    first = graph.nn.relu(graph.nn.conv2d(x, graph.const(weight)))
    second = graph.nn.relu(graph.nn.conv2d(x, graph.const(weight.copy())))
    after = eliminate_common_subexpr(Module.from_expr(first * second))
    calls = [n for n in graph.post_order(after.main.body) if isinstance(n, graph.Call)]
    assert [c.op.name for c in calls] == ["nn.conv2d", "nn.relu", "multiply"]


def test_different_attributes_do_not_merge():
    x = graph.var("x", shape=(4, 4))
    before = Module.from_expr(graph.sum(x, axis=0) + graph.sum(x, axis=1))
    assert eliminate_common_subexpr(before) is before


def test_ops_with_side_effects_do_not_merge(monkeypatch):
    op = graph.get_op("nn.relu")
    monkeypatch.setattr(type(op), "has_side_effects", property(lambda self: self.name == "nn.relu"), raising=False)
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.nn.relu(x) + graph.nn.relu(x))
    assert eliminate_common_subexpr(before) is before
