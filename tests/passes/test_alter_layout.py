"""alter_layout: conv2d converted to the target's preferred layout, transforms only at boundaries."""
import numpy as np

from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.passes import PassContext, PassManager, alter_layout
from tensorkiln.sdk.manifest import PluginManifest
from tensorkiln.sdk.target import Target, TargetSpec

from _graphs import const, inception, random_input


def _fake_target(layout: str) -> Target:
    manifest = PluginManifest.model_validate({
        "plugin": {"name": "fake_nhwc", "version": "0.1.0", "sdk_api": ">=1.0,<2", "device_kind": "cpu",
                   "available": False, "unavailable_reason": "test target"},
        "layouts": [{"op": "nn.conv2d", "layout": layout}]})
    return Target(TargetSpec(manifest=manifest), {})


def _calls(mod, name):
    return [n for n in graph.post_order(mod.main.body) if isinstance(n, graph.Call) and n.op.name == name]


def _conv_chain():
    # big enough that the convs' work pays for the two transforms (see MIN_MACS_PER_MOVED_ELEMENT)
    x = graph.var("x", shape=(1, 16, 16, 16))
    y = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(x, const(32, 16, 3, 3), padding=1), const(32)))
    y = graph.nn.conv2d(y * graph.const(2.0), const(24, 32, 1, 1)) + const(24, 1, 1)
    return x, Module.from_expr(graph.nn.max_pool2d(graph.nn.relu(y), pool_size=2, strides=2))


def test_nhwc_preference_converts_convs_with_transforms_only_at_the_boundaries():
    x, before = _conv_chain()
    after = alter_layout(before, target=_fake_target("NHWC"))
    assert [c.attrs.data_layout for c in _calls(after, "nn.conv2d")] == ["NHWC", "NHWC"]
    assert [c.attrs.kernel_layout for c in _calls(after, "nn.conv2d")] == ["HWIO", "HWIO"]
    transforms = _calls(after, "layout_transform")
    # one into the region (the input), one out of it (the result); max_pool2d stays in NHWC inside
    assert [(t.attrs.src_layout, t.attrs.dst_layout) for t in transforms] == [("NCHW", "NHWC"), ("NHWC", "NCHW")]
    assert transforms[0].args[0] is x
    (pool,) = _calls(after, "nn.max_pool2d")
    assert pool.attrs.layout == "NHWC" and transforms[1].args[0] is pool
    assert _calls(after, "nn.bias_add")[0].attrs.axis == 3
    data = random_input(x)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}), rtol=1e-5)


def test_nhwc_on_a_branchy_graph_keeps_concatenate_inside_the_region():
    before = inception(blocks=2)
    after = alter_layout(before, config={"nn.conv2d": "NHWC"})
    assert all(c.attrs.axis == 3 for c in _calls(after, "concatenate"))
    # the max_pool2d branches stay in the region too: one transform in, one out
    assert all(p.attrs.layout == "NHWC" for p in _calls(after, "nn.max_pool2d"))
    assert len(_calls(after, "layout_transform")) == 2
    data = random_input(before.main.params[0])
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}), rtol=1e-5)


def test_nchw_preference_changes_nothing():
    _, before = _conv_chain()
    assert alter_layout(before, target=_fake_target("NCHW")) is before
    assert alter_layout(before) is before


def test_an_unhonoured_blocked_preference_is_not_applied():
    _, before = _conv_chain()
    assert alter_layout(before, target=_fake_target("NCHW6c")) is before   # 6: not a power of two


def test_alter_layout_runs_from_the_default_opt_level_2():
    _, before = _conv_chain()
    manager = PassManager(PassContext(opt_level=1, verify=True), target=_fake_target("NHWC"))
    assert manager.run(before, ("alter_layout",)) is before
    assert manager.skipped[0].reason == "opt level 2 > 1"
    assert PassContext().opt_level == 2
    manager = PassManager(PassContext(verify=True), target=_fake_target("NHWC"))
    assert _calls(manager.run(before, ("alter_layout",)), "layout_transform")


def test_a_region_of_small_convs_between_channel_shuffles_stays_unconverted():
    """shufflenet's pattern: conv -> reshape/transpose/reshape shuffle -> conv; each conv would need a
    transform pair, which costs more than NHWC saves on such small convs."""
    x = graph.var("x", shape=(1, 8, 8, 8))
    y = x
    for index in range(3):
        w = graph.const(np.ones((8, 1, 1, 1), "float32"))
        y = graph.nn.conv2d(y, w, groups=8)                      # depthwise 1x1: 8 MACs per element
        y = graph.reshape(y, (1, 2, 4, 8, 8))
        y = graph.transpose(y, (0, 2, 1, 3, 4))
        y = graph.reshape(y, (1, 8, 8, 8))
    before = Module.from_expr(y)
    assert alter_layout(before, target=_fake_target("NHWC")) is before


def test_check_preference_says_which_preferences_alter_layout_honours():
    from tensorkiln.passes.alter_layout import check_preference, honoured_layouts

    assert honoured_layouts()["nn.conv2d"] == {"data": ("NCHW", "NHWC", "NCHW{x}c"),
                                               "weight": ("OIHW", "HWIO", "OHWI", "OIHW{x}i{x}o")}
    assert check_preference("nn.conv2d", "NHWC") == check_preference("nn.conv2d", "NHWC", "OHWI") == ""
    assert check_preference("nn.conv2d", "NCHW") == ""
    assert check_preference("nn.conv2d", "NCHW16c") == check_preference("nn.conv2d", "NCHW8c", "OIHW8i8o") == ""
    assert check_preference("nn.conv2d", "NCHW6c").startswith(
        "alter_layout cannot convert nn.conv2d to data layout NCHW6c: it converts to NCHW, NHWC, NCHW{x}c only")
    assert "takes OIHW8i8o weights" in check_preference("nn.conv2d", "NCHW8c", "HWIO")
    assert "weight layout IOHW" in check_preference("nn.conv2d", "NHWC", "IOHW")
    assert "the weight layout HWIO is applied only together with a converted data layout (NHWC, NCHW{x}c)" in \
        check_preference("nn.conv2d", "NCHW", "HWIO")
    assert check_preference("nn.max_pool2d", "NHWC") == (
        "alter_layout converts only nn.conv2d; a layout preference for nn.max_pool2d (NHWC) is never applied")


def test_nhwc_region_runs_through_a_resize_with_its_sizes_scales_and_roi_permuted():
    x = graph.var("x", shape=(1, 16, 8, 8))
    y = graph.nn.relu(graph.nn.conv2d(x, const(24, 16, 3, 3), padding=1))
    up = graph.call("image.resize", y, size=(1, 24, 16, 12), scales=(1.0, 1.0, 2.0, 1.5), method="linear",
                    coordinate_transformation_mode="tf_crop_and_resize",
                    roi=(0.0, 0.0, 0.1, 0.0, 1.0, 1.0, 0.9, 1.0))
    before = Module.from_expr(graph.nn.conv2d(up, const(8, 24, 3, 3), padding=1))
    after = alter_layout(before, config={"nn.conv2d": "NHWC"})
    (resize,) = _calls(after, "image.resize")
    assert resize.attrs.size == (1, 16, 12, 24) and resize.attrs.scales == (1.0, 2.0, 1.5, 1.0)
    assert resize.attrs.roi == (0.0, 0.1, 0.0, 0.0, 1.0, 0.9, 1.0, 1.0)
    assert len(_calls(after, "layout_transform")) == 2   # into the region and out of it, none around the resize
    data = random_input(x)
    np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}), rtol=1e-5,
                               atol=1e-5)


def test_a_global_pool_of_the_region_is_a_reduction_over_h_and_w_inside_it():
    # the pooled (1, 1, 1, C) leaves the region, not the whole (1, H, W, C) map
    for pool, reduction in ((graph.nn.global_avg_pool2d, "mean"), (graph.nn.global_max_pool2d, "max")):
        x = graph.var("x", shape=(1, 16, 13, 13))
        y = graph.nn.relu(graph.nn.conv2d(x, const(40, 16, 3, 3), padding=1))
        before = Module.from_expr(graph.reshape(pool(y), (1, 40)))
        after = alter_layout(before, target=_fake_target("NHWC"))
        (reduced,) = _calls(after, reduction)
        assert reduced.attrs.axis == (1, 2) and reduced.attrs.keepdims
        assert not _calls(after, "nn.global_avg_pool2d") and not _calls(after, "nn.global_max_pool2d")
        transforms = _calls(after, "layout_transform")
        assert [tuple(t.checked_type.shape) for t in transforms] == [(1, 13, 13, 16), (1, 40, 1, 1)]
        data = random_input(x)
        np.testing.assert_allclose(graph.evaluate(after, {"x": data}), graph.evaluate(before, {"x": data}),
                                   rtol=1e-5, atol=1e-6)
