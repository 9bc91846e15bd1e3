"""cpu_llvm_conv1x1_as_matmul: 1x1 convs as GEMMs, the epilogue fused after the sunk reshape, vs numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.pass_infra import PassContext

RNG = np.random.default_rng(7)


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _conv_nchw(x, w):
    return np.einsum("bchw,oc->bohw", x, w[:, :, 0, 0])


GEMMS = ("cpu_llvm.matmul_ukernel", "cpu_llvm.dense_pack_ukernel")
"""The whole-GEMM call: with B per call, or packed at compile time (an NHWC 1x1 conv's weight is B)."""


def _strategies(lib):
    return [row["strategy"] for row in lib.summary()["strategies"].values()]


@pytest.mark.parametrize("channels,size,outputs", [(16, 55, 64), (128, 13, 40), (3, 9, 17), (64, 20, 24)])
def test_nchw_1x1_conv_bias_relu_is_one_gemm_launch(channels, size, outputs):
    x, w, b = _random(1, channels, size, size), _random(outputs, channels, 1, 1), _random(outputs)
    model = graph.nn.relu(graph.nn.bias_add(graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w)),
                                            graph.const(b)))
    lib = tk.compile(model, "llvm")
    assert _strategies(lib) == ["cpu_llvm.matmul_ukernel"]
    assert lib.summary()["kernel_launches"] == 1
    expected = np.maximum(_conv_nchw(x, w) + b[:, None, None], 0)
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("groups,channels,outputs,size", [(4, 272, 272, 14), (3, 48, 96, 9), (2, 16, 24, 20)])
def test_grouped_nchw_1x1_conv_is_a_batch_of_gemms(groups, channels, outputs, size):
    x, w, b = _random(1, channels, size, size), _random(outputs, channels // groups, 1, 1), _random(outputs)
    model = graph.nn.relu(graph.nn.bias_add(graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w),
                                                       groups=groups), graph.const(b)))
    lib = tk.compile(model, "llvm")
    assert _strategies(lib) == ["cpu_llvm.matmul_ukernel"]
    assert lib.summary()["kernel_launches"] == 1
    per_in, per_out = channels // groups, outputs // groups
    expected = np.concatenate([_conv_nchw(x[:, g * per_in:(g + 1) * per_in], w[g * per_out:(g + 1) * per_out])
                               for g in range(groups)], axis=1)
    np.testing.assert_allclose(lib(x), np.maximum(expected + b[:, None, None], 0), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, outputs, gemm", [
    ("llvm", 1000, True),
    # AVX2: 1000 channels are 125 vectors but not pairs of them, which the NHWC register tile needs to keep up
    ("llvm -mcpu=haswell", 1000, True), ("llvm -mcpu=haswell", 40, True), ("llvm -mcpu=haswell", 48, False)])
def test_nhwc_1x1_conv_with_ragged_output_channels_is_a_gemm(target, outputs, gemm):
    x, w, b = _random(1, 13, 13, 64), _random(1, 1, 64, outputs), _random(outputs)
    model = graph.nn.bias_add(graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w),
                                         data_layout="NHWC", kernel_layout="HWIO"), graph.const(b), axis=3)
    lib = tk.compile(model, target)
    assert (_strategies(lib) == ["cpu_llvm.dense_pack_ukernel"]) == gemm, _strategies(lib)
    np.testing.assert_allclose(lib(x), np.einsum("bhwc,co->bhwo", x, w[0, 0]) + b, rtol=1e-4, atol=1e-4)


def test_residual_add_and_broadcast_operands_follow_the_gemm():
    x, w, r, scale = _random(1, 32, 14, 14), _random(64, 32, 1, 1), _random(1, 64, 14, 14), _random(64, 1, 1)
    conv = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w))
    model = graph.nn.relu(graph.add(graph.multiply(conv, graph.const(scale)), graph.var("r", shape=r.shape)))
    lib = tk.compile(model, "llvm")
    assert lib.summary()["kernel_launches"] == 1
    expected = np.maximum(_conv_nchw(x, w) * scale + r, 0)
    np.testing.assert_allclose(lib(x, r), expected, rtol=1e-4, atol=1e-4)


def test_a_conv_output_used_twice_and_an_unmappable_broadcast():
    x, w, row = _random(1, 8, 6, 20), _random(24, 8, 1, 1), _random(20)
    conv = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w))
    # a broadcast along the width alone has no 2-D equivalent: the reshape stays before it
    model = graph.Tuple([graph.nn.relu(conv), graph.add(conv, graph.const(row))])
    lib = tk.compile(model, "llvm")
    conv_value = _conv_nchw(x, w)
    first, second = lib(x)
    np.testing.assert_allclose(first, np.maximum(conv_value, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(second, conv_value + row, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["strided", "padded", "grouped", "batch2", "3x3"])
def test_convs_that_are_not_plain_gemms_keep_the_conv_schedule(case):
    shapes = {"grouped": ((1, 8, 10, 10), (8, 4, 1, 1)), "batch2": ((2, 8, 10, 10), (16, 8, 1, 1)),
              "3x3": ((1, 8, 10, 10), (16, 8, 3, 3))}
    x_shape, w_shape = shapes.get(case, ((1, 8, 10, 10), (16, 8, 1, 1)))
    x, w = _random(*x_shape), _random(*w_shape)
    attrs = {"strided": {"strides": (2, 2)}, "padded": {"padding": (1, 1, 1, 1)}, "grouped": {"groups": 2}}.get(case, {})
    model = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w), **attrs)
    lib = tk.compile(model, "llvm")
    assert not set(GEMMS) & set(_strategies(lib))
    with PassContext(opt_level=0):
        reference = tk.compile(graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w), **attrs), "llvm")
    np.testing.assert_allclose(lib(x), reference(x), rtol=1e-4, atol=1e-4)


def test_the_pass_can_be_disabled():
    x, w = _random(1, 16, 8, 8), _random(32, 16, 1, 1)
    with PassContext(opt_level=3, disabled={"cpu_llvm_conv1x1_as_matmul"}):
        lib = tk.compile(graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w)), "llvm")
    assert not set(GEMMS) & set(_strategies(lib))
    np.testing.assert_allclose(lib(x), _conv_nchw(x, w), rtol=1e-4, atol=1e-4)
