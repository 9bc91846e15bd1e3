"""eliminate_dead_code: tuple fields forward, partially used splits become slices."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import eliminate_dead_code

from _graphs import random_input


def test_tuple_get_item_of_a_tuple_forwards_the_field():
    x = graph.var("x", shape=(4,))
    pair = graph.tuple_(graph.nn.relu(x), graph.exp(x))
    before = Module.from_expr(graph.TupleGetItem(pair, 1) + 1.0)
    assert_structural_equal(eliminate_dead_code(before), Module.from_expr(graph.exp(x) + 1.0))


def test_partially_used_split_becomes_slices():
    x = graph.var("x", shape=(2, 6))
    parts = graph.call("split", x, indices_or_sections=3, axis=1)
    before = Module.from_expr(graph.TupleGetItem(parts, 0) * graph.TupleGetItem(parts, 2))
    expected = Module.from_expr(graph.strided_slice(x, (0,), (2,), (1,), (1,))
                                * graph.strided_slice(x, (4,), (6,), (1,), (1,)))
    after = eliminate_dead_code(before)
    assert_structural_equal(after, expected)
    data = random_input(x)
    np.testing.assert_array_equal(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}))


def test_fully_used_split_stays():
    x = graph.var("x", shape=(2, 6))
    parts = graph.call("split", x, indices_or_sections=2, axis=1)
    before = Module.from_expr(graph.TupleGetItem(parts, 0) * graph.TupleGetItem(parts, 1))
    assert eliminate_dead_code(before) is before


def test_unused_model_inputs_stay():
    x, unused = graph.var("x", shape=(4,)), graph.var("unused", shape=(4,))
    before = Module.from_expr(graph.Function((x, unused), graph.nn.relu(x)))
    assert eliminate_dead_code(before) is before
