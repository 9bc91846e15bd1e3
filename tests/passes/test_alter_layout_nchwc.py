"""alter_layout to blocked NCHW{x}c: conv chains converted where the channels divide the block,
compared with the unconverted graph's numpy reference (graph.evaluate) and compiled for cpu_llvm."""
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.passes import PassContext, alter_layout

import _graphs
from _graphs import const, inception, random_input


@pytest.fixture(autouse=True)
def _keep_the_shared_rng():
    """The pass tests share _graphs.RNG; tests later in the run see the draws they saw before this file."""
    state = _graphs.RNG.bit_generator.state
    yield
    _graphs.RNG.bit_generator.state = state


def _calls(mod, name):
    return [n for n in graph.post_order(mod.main.body) if isinstance(n, graph.Call) and n.op.name == name]


def _same_result(before, after, x):
    data = random_input(x)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}),
                               rtol=1e-5, atol=1e-5)


def _chain(first_in=16):
    x = graph.var("x", shape=(1, first_in, 12, 12))
    y = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, const(32, first_in, 3, 3), padding=1), const(32)))
    y = graph.nn.conv2d(y * graph.const(2.0), const(16, 32, 1, 1)) + const(16, 1, 1)
    y = graph.nn.max_pool2d(graph.nn.relu(y), pool_size=2, strides=2)
    y = graph.nn.avg_pool2d(graph.nn.conv2d(y, const(16, 16, 3, 3, low=-1, high=1), padding=1), pool_size=3,
                            padding=1)
    return x, Module.from_expr(y)


def test_a_conv_chain_converts_with_transforms_only_at_the_boundaries():
    x, before = _chain()
    after = alter_layout(before, config={"nn.conv2d": "NCHW8c"})
    convs = _calls(after, "nn.conv2d")
    assert [(c.attrs.data_layout, c.attrs.kernel_layout) for c in convs] == [("NCHW8c", "OIHW8i8o")] * 3
    assert convs[0].args[1].checked_type.shape == (4, 2, 3, 3, 8, 8)
    transforms = _calls(after, "layout_transform")
    assert [(t.attrs.src_layout, t.attrs.dst_layout) for t in transforms] == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW")]
    assert transforms[0].args[0] is x
    assert [p.attrs.layout for p in _calls(after, "nn.max_pool2d") + _calls(after, "nn.avg_pool2d")] == ["NCHW8c"] * 2
    # the bias becomes a blocked (C/x, 1, 1, x) constant added; the (C, 1, 1) one is blocked as (1, C/x, 1, 1, x)
    assert not _calls(after, "nn.bias_add")
    assert sorted(a.args[1].checked_type.shape for a in _calls(after, "add")) == [(1, 2, 1, 1, 8), (4, 1, 1, 8)]
    _same_result(before, after, x)


def test_a_first_conv_on_3_channels_reads_nchw_and_writes_the_blocked_layout():
    x, before = _chain(first_in=3)   # resnet's first conv: 3 input channels
    after = alter_layout(before, config={"nn.conv2d": "NCHW16c"})
    first, *rest = _calls(after, "nn.conv2d")
    assert (first.attrs.data_layout, first.attrs.out_layout, first.attrs.kernel_layout) == ("NCHW", "NCHW16c",
                                                                                          "OIHW3i16o")
    assert first.args[0] is x and first.checked_type.shape == (1, 2, 12, 12, 16)
    assert [c.attrs.data_layout for c in rest] == ["NCHW16c", "NCHW16c"]
    transforms = _calls(after, "layout_transform")
    assert [(t.attrs.src_layout, t.attrs.dst_layout) for t in transforms] == [("NCHW16c", "NCHW")]
    _same_result(before, after, x)


def test_a_conv_whose_output_channels_do_not_divide_the_block_stays_nchw():
    x = graph.var("x", shape=(1, 16, 8, 8))
    y = graph.nn.relu(graph.nn.conv2d(x, const(16, 16, 3, 3), padding=1))
    y = graph.nn.relu(graph.nn.conv2d(y, const(12, 16, 1, 1)))          # 12 channels: stays NCHW
    before = Module.from_expr(graph.nn.conv2d(y, const(16, 12, 3, 3)))
    after = alter_layout(before, config={"nn.conv2d": "NCHW8c"})
    convs = _calls(after, "nn.conv2d")
    assert [(c.attrs.data_layout, c.attrs.out_layout) for c in convs] == [("NCHW8c", ""), ("NCHW", ""),
                                                                          ("NCHW", "NCHW8c")]
    transforms = _calls(after, "layout_transform")
    assert [(t.attrs.src_layout, t.attrs.dst_layout) for t in transforms] == [("NCHW", "NCHW8c"), ("NCHW8c", "NCHW"),
                                                                            ("NCHW8c", "NCHW")]
    _same_result(before, after, x)


def test_concatenate_along_c_stays_blocked_when_each_part_divides():
    before = inception(channels=8, size=8, blocks=2)   # branches of 8 channels each
    after = alter_layout(before, config={"nn.conv2d": "NCHW8c"})
    assert [c.attrs.axis for c in _calls(after, "concatenate")] == [1, 1]
    assert all(c.checked_type.ndim == 5 for c in _calls(after, "concatenate"))
    assert len(_calls(after, "layout_transform")) == 2
    _same_result(before, after, before.main.params[0])


def test_concatenate_with_a_part_that_does_not_divide_goes_back_to_nchw():
    x = graph.var("x", shape=(1, 16, 8, 8))
    a = graph.nn.relu(graph.nn.conv2d(x, const(16, 16, 3, 3), padding=1))
    b = graph.nn.relu(graph.nn.conv2d(x, const(4, 16, 1, 1)))      # 4 channels: stays NCHW
    y = graph.nn.conv2d(graph.concatenate([a, b], axis=1), const(16, 20, 1, 1))
    before = Module.from_expr(y)
    after = alter_layout(before, config={"nn.conv2d": "NCHW8c"})
    assert [c.attrs.data_layout for c in _calls(after, "nn.conv2d")] == ["NCHW8c", "NCHW", "NCHW"]
    (concat,) = _calls(after, "concatenate")
    assert concat.attrs.axis == 1 and concat.checked_type.ndim == 4
    _same_result(before, after, x)


def test_broadcast_constants_along_h_and_w_broadcast_over_both_channel_axes():
    x = graph.var("x", shape=(1, 8, 6, 6))
    y = graph.nn.conv2d(x, const(8, 8, 3, 3), padding=1) * const(1, 6, 6)
    before = Module.from_expr(graph.nn.conv2d(y, const(8, 8, 1, 1)))
    after = alter_layout(before, config={"nn.conv2d": "NCHW8c"})
    (multiply,) = _calls(after, "multiply")
    assert multiply.args[1].checked_type.shape == (1, 1, 6, 6, 1)
    _same_result(before, after, x)


@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c"])
def test_a_converted_chain_compiles_for_cpu_llvm_and_matches_numpy(layout):
    x, before = _chain()
    data = random_input(x)
    expected = graph.evaluate(before, {"x": data})
    lib = tk.compile(before, "cpu_llvm", context=PassContext(config={"alter_layout": {"nn.conv2d": layout}}))
    # float32 sums of ~1000-sized terms: the error scales with the largest value, not each one
    np.testing.assert_allclose(lib(data), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())
    strategies = lib.summary()["strategies"].values()
    assert sum("nn.conv2d" in entry["ops"] for entry in strategies) == 3


@pytest.mark.parametrize("layout", ["NCHW8c", "NCHW16c"])
def test_the_conformance_kit_checks_a_blocked_preference_on_its_residual_cnn(layout, monkeypatch):
    """A target preferring NCHW{x}c passes models/layout_preferences: every conv of the kit's CNN (its
    channels widened to the block) takes the layout, the stem through out_layout."""
    import sys

    from tensorkiln.conformance.levels.models import _layout_check

    module = sys.modules["tensorkiln.passes.alter_layout"]
    monkeypatch.setattr(module, "layout_preferences", lambda target, config=None: {"nn.conv2d": (layout, None)})
    facts = _layout_check(0)(tk.target("cpu_llvm"))
    assert facts["layout"] == layout and facts["convs"] == facts["conv_kernels_on_target"] == 3
