"""fuse_ops (the seed's example): conv2d -> bias_add -> relu becomes one primitive group."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.passes import fuse_ops

from _graphs import const, random_input


def _groups(mod):
    return [n for n in graph.post_order(mod.main.body) if isinstance(n, graph.Call) and isinstance(n.op, graph.Function)]


def test_conv2d_bias_add_relu_become_one_group():
    x = graph.var("x", shape=(1, 3, 8, 8))
    before = Module.from_expr(graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, const(4, 3, 3, 3)), const(4))))
    after = fuse_ops(before)
    (group,) = _groups(after)
    assert group.op.attr("Primitive") == 1
    assert [n.op.name for n in graph.post_order(group.op.body) if isinstance(n, graph.Call)] == \
        ["nn.conv2d", "nn.bias_add", "nn.relu"]
    data = random_input(x)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}), rtol=1e-6)


def test_two_convs_stay_in_two_groups():
    x = graph.var("x", shape=(1, 3, 8, 8))
    first = graph.nn.relu(graph.nn.conv2d(x, const(4, 3, 3, 3)))
    after = fuse_ops(Module.from_expr(graph.nn.conv2d(first, const(4, 4, 3, 3))))
    assert len(_groups(after)) == 2


def test_a_group_takes_at_most_max_group_inputs_tensors():
    from tensorkiln.passes.fuse_ops import MAX_GROUP_INPUTS

    # injective concats of 10 inputs each, nested 8 deep: 8 ops (well under MAX_GROUP_SIZE) but
    # 73 distinct inputs, more than one kernel takes; a chain of 100 adds: 64 ops would take 65
    xs = [graph.var(f"x{i}", shape=(2,)) for i in range(100)]
    nested = graph.concatenate(xs[:10])
    for start in range(10, 73, 9):
        nested = graph.concatenate([nested, *xs[start:start + 9]])
    chain = xs[0]
    for x in xs[1:]:
        chain = chain + x
    for body in (nested, chain):
        before = Module.from_expr(body)
        after = fuse_ops(before)
        assert all(len(group.args) <= MAX_GROUP_INPUTS for group in _groups(after))
        data = {x.name: random_input(x) for x in before.main.params}
        np.testing.assert_array_equal(graph.evaluate(after, data), graph.evaluate(before, data))
