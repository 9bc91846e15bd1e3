"""cancel_layout_transforms: inverse transforms cancel, chains merge."""
from tensorkiln import graph
from tensorkiln.graph import Module, assert_structural_equal
from tensorkiln.passes import cancel_layout_transforms


def _transform(x, src, dst):
    return graph.call("layout_transform", x, src_layout=src, dst_layout=dst)


def test_inverse_transforms_cancel():
    x = graph.var("x", shape=(1, 4, 5, 6))
    before = Module.from_expr(graph.nn.relu(_transform(_transform(x, "NCHW", "NHWC"), "NHWC", "NCHW")))
    assert_structural_equal(cancel_layout_transforms(before), Module.from_expr(graph.nn.relu(x)))


def test_chains_merge_into_one_transform():
    x = graph.var("x", shape=(1, 8, 5, 6))
    before = Module.from_expr(_transform(_transform(x, "NCHW", "NHWC"), "NHWC", "NCHW4c"))
    assert_structural_equal(cancel_layout_transforms(before), Module.from_expr(_transform(x, "NCHW", "NCHW4c")))


def test_a_lone_transform_stays():
    x = graph.var("x", shape=(1, 4, 5, 6))
    before = Module.from_expr(_transform(x, "NCHW", "NHWC"))
    assert cancel_layout_transforms(before) is before
