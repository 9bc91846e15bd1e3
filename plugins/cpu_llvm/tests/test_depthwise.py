"""cpu_llvm.depthwise_nchw (per-channel padding in cache) and strided vector loads, vs numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, te, tir


def buf(name: str, shape, dtype: str = "float32") -> tir.Buffer:
    return tir.Buffer(name, tuple(tir.const(int(d)) for d in shape), dtype)


def loop(var: tir.Var, extent: int, body) -> tir.For:
    return tir.For(var, tir.const(0), tir.const(extent), tir.ForKind.SERIAL, body)


RNG = np.random.default_rng(11)


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _depthwise_reference(x, w, strides, padding, dilation):
    """out[b, o, y, x] = sum_{ry, rx} xpad[b, o // m, y*sh + ry*dh, x*sw + rx*dw] * w[o, 0, ry, rx]."""
    batch, channels, _, _ = x.shape
    out_channels, _, kh, kw = w.shape
    (sh, sw), (dh, dw) = strides, dilation
    top, left, bottom, right = padding
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_h = (padded.shape[2] - (kh - 1) * dh - 1) // sh + 1
    out_w = (padded.shape[3] - (kw - 1) * dw - 1) // sw + 1
    source = padded[:, np.arange(out_channels) // (out_channels // channels)]
    out = np.zeros((batch, out_channels, out_h, out_w), "float64")
    for ry in range(kh):
        for rx in range(kw):
            window = source[:, :, ry * dh:ry * dh + (out_h - 1) * sh + 1:sh, rx * dw:rx * dw + (out_w - 1) * sw + 1:sw]
            out += window * w[None, :, 0, ry, rx, None, None]
    return out.astype("float32")


def _strategies(lib):
    return [row["strategy"] for row in lib.summary()["strategies"].values()]


CASES = [  # x shape, multiplier, kernel, strides, padding, dilation
    ((1, 112, 56, 56), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),   # shufflenet's
    ((1, 136, 28, 28), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 24, 7, 7), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 8, 13, 11), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),     # batch 2, odd sizes
    ((1, 6, 17, 19), 2, (3, 3), (1, 2), (0, 2, 1, 1), (1, 1)),     # multiplier 2, asymmetric pad and stride
    ((1, 5, 20, 23), 1, (5, 5), (1, 1), (2, 2, 2, 2), (2, 2)),     # dilation
    ((1, 4, 15, 31), 3, (3, 5), (3, 3), (1, 2, 0, 1), (1, 2)),
    ((2, 3, 9, 9), 1, (1, 1), (2, 2), (0, 0, 0, 0), (1, 1)),       # 1x1 kernel, stride 2, no padding
]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("shape,multiplier,kernel,strides,padding,dilation", CASES)
def test_depthwise_nchw_matches_numpy(target, shape, multiplier, kernel, strides, padding, dilation):
    channels = shape[1]
    x, w, b = _random(*shape), _random(channels * multiplier, 1, *kernel), _random(channels * multiplier)
    conv = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w), strides=strides, padding=padding,
                      dilation=dilation, groups=channels)
    lib = tk.compile(graph.nn.relu(graph.nn.bias_add(conv, graph.const(b))), target)
    assert _strategies(lib) == ["cpu_llvm.depthwise_nchw"]
    expected = np.maximum(_depthwise_reference(x, w, strides, padding, dilation) + b[:, None, None], 0)
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape,strides,padding,dilation", [((1, 16, 14, 14), (2, 2), (1, 1, 1, 1), (1, 1)),
                                                          ((2, 4, 15, 31), (3, 3), (1, 2, 0, 1), (1, 2))])
def test_depthwise_knobs_all_give_numpy(shape, strides, padding, dilation):
    from tensorkiln_cpu_llvm.strategies import depthwise
    x, w = _random(*shape), _random(shape[1], 1, 3, 3)
    target = tk.target("llvm")
    space = depthwise._space(None, target)
    expected = _depthwise_reference(x, w, strides, padding, dilation)
    attrs = type("Attrs", (), dict(strides=strides, padding=padding, dilation=dilation, groups=shape[1]))
    for config in space:
        data, weight = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
        out = depthwise.depthwise_nchw(data, weight, attrs, 16, config["split_phases"])
        s = depthwise._schedule([out], target, config)
        module = tk.build(s, [data, weight, out], target="llvm")
        result = np.zeros(expected.shape, "float32")
        module(x, w, result)
        np.testing.assert_allclose(result, expected, rtol=1e-4, atol=1e-4, err_msg=str(config))


def test_the_default_row_tile_is_one_vector_without_lane_masks():
    """AVX2 has no lane masks: a 28-wide output row as one 28-lane vector is assembled in 128-bit pieces on
    every tap, so the default tile is at most one vector there (28 -> 7 lanes); AVX-512 masks the tail of
    its 2-register tile in hardware and keeps rows of up to 32 columns (depthwise._space)."""
    from tensorkiln_cpu_llvm.strategies import depthwise
    assert depthwise._space(None, tk.target("llvm -mcpu=haswell")).default_config()["max_width"] == 8
    assert depthwise._space(None, tk.target("llvm -mcpu=skylake-avx512")).default_config()["max_width"] == 32


def test_grouped_and_nhwc_convs_keep_their_strategies():
    x = _random(1, 8, 10, 10)
    grouped = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(_random(8, 2, 3, 3)), groups=4,
                         padding=(1, 1, 1, 1))
    assert _strategies(tk.compile(grouped, "llvm")) != ["cpu_llvm.depthwise_nchw"]


@pytest.mark.parametrize("stride,lanes", [(2, 16), (3, 8), (4, 4), (2, 7)])
@pytest.mark.parametrize("masked", [False, True])
def test_strided_vector_load_matches_numpy(stride, lanes, masked):
    """B[i] = A[i * stride + 1] as vector code (a Ramp of stride 2..4, as a schedule's vector phases read): one
    contiguous load of the span and a shuffle (exprs._strided_load); with a predicate (what te.if_then_else
    gives a guarded load), a masked load that reads nothing past the guarded range. Built as tir: tir's
    vectorize_loops makes only contiguous ramps, and LLVM's own vectorizer decides per CPU on a scalar loop."""
    size = 4 * lanes
    a, b = buf("A", (size * stride + 1,)), buf("B", (size,))
    limit = size * stride // 2
    i = tir.Var("i")
    index = tir.Ramp(tir.Add(tir.Mul(i, tir.const(lanes * stride)), tir.const(1)), tir.const(stride), lanes)
    if masked:
        guard = tir.LT(index, tir.Broadcast(tir.const(limit), lanes))
        value = tir.Select(guard, tir.Load(a, index, guard), tir.Broadcast(tir.const(-5.0, "float32"), lanes))
    else:
        value = tir.Load(a, index)
    store = tir.Store(b, value, tir.Ramp(tir.Mul(i, tir.const(lanes)), tir.const(1), lanes))
    module = tk.build(tir.PrimFunc("strided", (a, b), loop(i, 4, store)), target="llvm", name="strided")
    unoptimized = module.artifact.sources["llvm-unoptimized"]
    assert "shufflevector" in unoptimized and "gather" not in unoptimized
    data = _random(size * stride + 1)
    result = np.zeros(size, "float32")
    module(data, result)
    expected = data[1::stride][:size]
    if masked:
        expected = np.where(np.arange(size) * stride + 1 < limit, expected, -5.0).astype("float32")
    np.testing.assert_array_equal(result, expected)


@pytest.mark.parametrize("lanes", [15, 12, 16])
def test_masked_contiguous_load_of_any_lane_count_matches_numpy(lanes):
    """A padded read vectorized by a lane count that is not a power of two: a power-of-two masked load with
    the extra lanes masked off (exprs._masked_load), zeros outside the guard."""
    size = 3 * lanes
    a = te.placeholder((size - 2,), name="A")
    out = te.compute((size,), lambda i: te.if_then_else(tir.And(i >= 1, i < size - 1), a[i - 1],
                                                        te.const(0.0, "float32")), name="B")
    s = te.create_schedule(out.op)
    _, inner = s[out].split(out.op.axis[0], factor=lanes)
    s[out].vectorize(inner)
    module = tk.build(s, [a, out], target="llvm")
    data = _random(size - 2)
    result = np.full(size, 7.0, "float32")
    module(data, result)
    np.testing.assert_array_equal(result, np.pad(data, 1))


NHWC_CASES = [  # x shape (NCHW), multiplier, kernel, strides, padding, dilation
    ((1, 136, 28, 28), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 64, 23, 23), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 24, 13, 11), 1, (3, 3), (2, 2), (1, 1, 1, 1), (1, 1)),
    ((1, 5, 20, 23), 1, (5, 5), (1, 1), (2, 2, 2, 2), (2, 2)),
    ((1, 48, 15, 17), 1, (3, 5), (3, 2), (1, 2, 0, 1), (1, 2)),
    ((1, 6, 17, 19), 2, (3, 3), (1, 2), (0, 2, 1, 1), (1, 1)),   # multiplier 2: the root pad path
    # row stride 1: bands of output rows per parallel step (4, 2 of 14, a column stride of 2 under them)
    ((1, 32, 28, 28), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((2, 16, 14, 9), 1, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)),
    ((1, 24, 12, 10), 1, (3, 3), (1, 2), (1, 0, 1, 1), (1, 1)),
]


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("shape,multiplier,kernel,strides,padding,dilation", NHWC_CASES)
def test_depthwise_nhwc_matches_numpy(target, shape, multiplier, kernel, strides, padding, dilation):
    """NHWC depthwise (apply_conv2d_nhwc): the padded input rows computed per (channel block, output row), or
    per band of output rows when the row stride is 1."""
    channels = shape[1]
    x, w, b = _random(*shape), _random(channels * multiplier, 1, *kernel), _random(channels * multiplier)
    conv = graph.call("nn.conv2d", graph.var("x", shape=x.transpose(0, 2, 3, 1).shape),
                      graph.const(np.ascontiguousarray(w.transpose(2, 3, 1, 0))), strides=strides, padding=padding,
                      dilation=dilation, groups=channels, data_layout="NHWC", kernel_layout="HWIO")
    lib = tk.compile(graph.nn.relu(graph.nn.bias_add(conv, graph.const(b), axis=3)), target)
    assert _strategies(lib) == ["cpu_llvm.conv2d_nhwc"]
    expected = np.maximum(_depthwise_reference(x, w, strides, padding, dilation) + b[:, None, None], 0)
    np.testing.assert_allclose(lib(np.ascontiguousarray(x.transpose(0, 2, 3, 1))), expected.transpose(0, 2, 3, 1),
                               rtol=1e-4, atol=1e-4)
