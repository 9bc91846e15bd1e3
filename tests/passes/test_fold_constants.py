"""fold_constants: constant subgraphs become values; big broadcasts stay."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import PassContext, PassManager, fold_constants


def test_fold_constants_folds_the_seed_example():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(x + (graph.const([1.0, 2, 3, 4]) + graph.const(1.0)))
    expected = Module.from_expr(x + graph.const([2.0, 3, 4, 5]))
    after = fold_constants(before)
    assert_structural_equal(after, expected)
    data = np.arange(4, dtype="float32")
    np.testing.assert_array_equal(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}))


def test_fold_constants_makes_shape_arithmetic_static():
    # What exporters emit for x.reshape(x.shape[0], -1): shape_of -> take -> concatenate.
    x = graph.var("x", shape=(2, 3, 4))
    batch = graph.take(graph.shape_of(x), graph.const(np.array([0], dtype="int64")))
    newshape = graph.concatenate([batch, graph.const(np.array([-1], dtype="int64"))])
    before = Module.from_expr(graph.add(graph.cast(newshape, "float32"), graph.const(0.5)))
    expected = Module.from_expr(graph.Function((x,), graph.const(np.array([2.5, -0.5], dtype="float32"))))
    assert_structural_equal(fold_constants(before), expected)


def test_fold_constants_folds_tuple_fields():
    x = graph.var("x", shape=(2,))
    parts = graph.split(graph.const([1.0, 2.0, 3.0, 4.0]), 2)
    before = Module.from_expr(x * parts[1])
    assert_structural_equal(fold_constants(before), Module.from_expr(x * graph.const([3.0, 4.0])))


def test_fold_constants_keeps_huge_broadcasts():
    x = graph.var("x", shape=(64, 128, 256))
    big = graph.broadcast_to(graph.const(np.float32(2.0)), (64, 128, 256))
    before = Module.from_expr(x * big)
    assert fold_constants(before) is before
    small = fold_constants(before, config={"max_elements": 1 << 30})
    assert isinstance(small.main.body.args[1], graph.Constant)


def test_fold_constants_keeps_variable_subgraphs_and_returns_its_input():
    x = graph.var("x", shape=(4,))
    before = Module.from_expr(graph.nn.relu(x) + graph.const(1.0))
    assert fold_constants(before) is before


def test_fold_constants_config_reaches_the_pass_through_the_context():
    x = graph.var("x", shape=(64, 128, 256))
    before = Module.from_expr(x * graph.broadcast_to(graph.const(np.float32(2.0)), (64, 128, 256)))
    context = PassContext(opt_level=1, config={"fold_constants": {"max_elements": 1 << 30}}, verify=True)
    after = PassManager(context).run(before, ("fold_constants",))
    assert isinstance(after.main.body.args[1], graph.Constant)
