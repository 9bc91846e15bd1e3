"""cpu_llvm_pack_conv_weights: constant NHWC conv weights packed OHWI{n}o at compile time, vs numpy.

The pass is checked where it applies (the block is the NHWC register tile's channels: two
vectors of the target, 32 on AVX-512 and 16 on AVX2), where it must not (convs the
micro-kernel runs, grouped and depthwise convs, weights that are inputs), and on random
conv shapes through the whole compile against numpy.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.driver import fused_groups
from tensorkiln.graph import Call
from tensorkiln_cpu_llvm.host import cpu_facts
from tensorkiln_cpu_llvm.strategies import conv_nhwc_tile
from tensorkiln_cpu_llvm.strategies.anchors import nhwc_tile

RNG = np.random.default_rng(11)


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _conv_reference(x, w, strides=(1, 1), padding=(0, 0, 0, 0), groups=1):
    """NHWC data, HWIO weight, through the graph op's numpy reference (written NCHW / OIHW)."""
    attrs = graph.get_op("nn.conv2d").attrs_type(strides=strides, padding=padding, groups=groups)
    out = graph.get_op("nn.conv2d").reference(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), attrs)
    return out.transpose(0, 2, 3, 1)


def _nhwc_conv(x_shape, w, b=None, weight_is_input=False, **keywords):
    x = graph.var("x", shape=x_shape)
    weight = graph.var("w", shape=w.shape) if weight_is_input else graph.const(w)
    conv = graph.nn.conv2d(x, weight, data_layout="NHWC", kernel_layout="HWIO", **keywords)
    if b is not None:
        conv = graph.nn.relu(graph.nn.bias_add(conv, graph.const(b), axis=3))
    return graph.Module.from_expr(conv)


def _kernel_layouts(model, target, opt_level=None) -> tuple[list[str], object]:
    """The kernel layouts of the convs `compile` lowers, and the resolved target."""
    groups, resolved = fused_groups(model, target, opt_level=opt_level)
    layouts = [node.attrs.kernel_layout for group in groups for node in graph.post_order(group.op.body)
               if isinstance(node, Call) and getattr(node.op, "name", "") == "nn.conv2d"]
    return layouts, resolved


@pytest.mark.parametrize("target", ["cpu_llvm", "cpu_llvm -mcpu=haswell", "cpu_llvm -mcpu=haswell -mattr=-avx2,-fma"])
@pytest.mark.parametrize("width", [14, 16])
def test_a_3x3_nhwc_conv_reads_its_weight_packed_in_the_tiles_channel_block(target, width):
    target = f"{target} -winograd=off"   # by default a 3x3 stride-1 conv runs as Winograd (test_winograd.py)
    x, w, b = _random(1, width, width, 64), _random(3, 3, 64, 128), _random(128)
    model = _nhwc_conv(x.shape, w, b, padding=(1, 1, 1, 1))
    layouts, resolved = _kernel_layouts(model, target)
    lanes = cpu_facts(resolved).vector_bits // 32
    _, block = conv_nhwc_tile(width, 128, 64, resolved)
    assert block % lanes == 0 and layouts == [f"OHWI{block}o"]
    lib = tk.compile(model, target)
    expected = np.maximum(_conv_reference(x, w, padding=(1, 1, 1, 1)) + b, 0)
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["micro-kernel 1x1", "grouped", "depthwise", "weight is an input", "opt level 1"])
def test_convs_the_pass_leaves_in_hwio(case):
    if case == "micro-kernel 1x1":   # 56 wide, 256 -> 64: strategies/ukernel.conv_applies
        x, w = _random(1, 56, 56, 256), _random(1, 1, 256, 64)
        model, keywords = _nhwc_conv(x.shape, w), {}
    elif case in ("grouped", "depthwise"):
        groups = 4 if case == "grouped" else 32
        x, w = _random(1, 12, 12, 32), _random(3, 3, 32 // groups, 32 if case == "grouped" else 32)
        model, keywords = _nhwc_conv(x.shape, w, padding=(1, 1, 1, 1), groups=groups), {"padding": (1, 1, 1, 1),
                                                                                         "groups": groups}
    else:
        x, w = _random(1, 10, 10, 32), _random(3, 3, 32, 64)
        model, keywords = _nhwc_conv(x.shape, w, weight_is_input=case == "weight is an input"), {}
    opt_level = 1 if case == "opt level 1" else None
    layouts, _ = _kernel_layouts(model, "cpu_llvm", opt_level)
    assert layouts and all(layout == "HWIO" for layout in layouts)
    lib = tk.compile(model, "cpu_llvm", opt_level=opt_level)
    args = (x, w) if case == "weight is an input" else (x,)
    got = lib(*args)
    expected = _conv_reference(x, w, **keywords)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_prime_widths_get_a_tile_with_a_tail_unless_the_channels_are_few():
    # AVX2 (8 lanes, 12 accumulators): 13 wide had divisor tiles of 1 position (2 accumulators)
    assert nhwc_tile(13, 256, 8, 12, 14, in_channels=64) == (5, 16)
    assert nhwc_tile(111, 64, 8, 12, 14, in_channels=3) == (3, 16)      # 3-channel stem: no tail
    assert nhwc_tile(56, 64, 8, 12, 14, in_channels=64) == (4, 16)      # a divisor tile fills enough
    assert nhwc_tile(13, 256, 16, 24, 14, in_channels=64, channel_block=16) == (13, 16)


@settings(max_examples=12, deadline=None)
@given(channels=st.sampled_from([3, 16, 24, 64]), outputs=st.sampled_from([16, 32, 48, 96]),
       size=st.integers(5, 17), kernel=st.sampled_from([1, 3, 5]), stride=st.sampled_from([1, 2]),
       pad=st.integers(0, 2), epilogue=st.booleans(), target=st.sampled_from(["cpu_llvm", "cpu_llvm -mcpu=haswell"]))
def test_random_nhwc_convs_through_the_packing_match_numpy(channels, outputs, size, kernel, stride, pad, epilogue,
                                                           target):
    """Random shapes, widths with and without divisor tiles (tails), on AVX-512 / AVX2 tiles."""
    if size + 2 * pad < kernel:
        pad = kernel
    x, w, b = _random(1, size, size, channels), _random(kernel, kernel, channels, outputs), _random(outputs)
    model = _nhwc_conv(x.shape, w, b if epilogue else None, strides=(stride, stride), padding=(pad,) * 4)
    lib = tk.compile(model, target)
    expected = _conv_reference(x, w, strides=(stride, stride), padding=(pad,) * 4)
    if epilogue:
        expected = np.maximum(expected + b, 0)
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)
