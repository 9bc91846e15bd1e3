"""nn.conv2d_winograd (graph/ops/winograd.py): the weight transform, the op's numpy reference and its
type rule, each against direct convolution (nn.conv2d's reference, float64) or the definition
U = G g G^T written out with einsum."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import AttrsError, winograd_matrices, winograd_weight_transform
from tensorkiln.ir.errors import DTypeError, ShapeError

RNG = np.random.default_rng(5)


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _direct(x, w, padding):
    """NHWC data, HWIO weight, stride 1: nn.conv2d's reference (written NCHW / OIHW)."""
    attrs = graph.get_op("nn.conv2d").attrs_type(padding=padding)
    out = graph.get_op("nn.conv2d").reference(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1), attrs)
    return out.transpose(0, 2, 3, 1)


@pytest.mark.parametrize("tile", [2, 4])
@pytest.mark.parametrize("layout", ["HWIO", "OIHW", "OHWI"])
def test_the_weight_transform_is_g_g_gt_in_blocks_of_output_channels(tile, layout):
    w = _random(3, 3, 24, 48)
    u = winograd_weight_transform(graph.transform_layout(w, "HWIO", layout), layout, tile, 16)
    alpha = tile + 2
    assert u.shape == (alpha, alpha, 3, 24, 16) and u.dtype == np.float32
    _, g, _ = winograd_matrices(tile)
    expected = np.einsum("ai,ijck,bj->abck", g, w.astype(np.float64), g)
    unblocked = u.transpose(0, 1, 3, 2, 4).reshape(alpha, alpha, 24, 48)
    np.testing.assert_allclose(unblocked, expected, rtol=1e-6, atol=1e-6)


def test_the_matrices_compute_a_3_tap_correlation():
    """Y = A^T [(G g) * (B^T d)] on one axis is the 3-tap correlation of d with g (float64)."""
    for tile in (2, 4):
        b_t, g, a_t = winograd_matrices(tile)
        d, taps = RNG.standard_normal(tile + 2), RNG.standard_normal(3)
        np.testing.assert_allclose(a_t @ ((g @ taps) * (b_t @ d)), np.correlate(d, taps, "valid"), atol=1e-12)


@pytest.mark.parametrize("shape, padding", [
    ((1, 8, 8, 16), (1, 1, 1, 1)),      # whole tiles of 2 and 4
    ((2, 7, 9, 8), (1, 1, 1, 1)),       # a partial tile at the bottom and the right, batch 2
    ((1, 6, 10, 4), (0, 2, 1, 0)),      # asymmetric padding
    ((1, 3, 3, 5), (0, 0, 0, 0)),       # one output
])
@pytest.mark.parametrize("tile", [2, 4])
def test_the_reference_equals_direct_convolution(shape, padding, tile):
    x, w = _random(*shape), _random(3, 3, shape[3], 32)
    u = winograd_weight_transform(w, "HWIO", tile, 8)
    call = graph.call("nn.conv2d_winograd", graph.var("x", shape=shape), graph.const(u), tile_size=tile,
                      padding=padding)
    out = graph.evaluate(call, {"x": x})
    expected = _direct(x, w, padding)
    assert call.checked_type.shape == expected.shape and out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_the_type_rule_names_what_is_wrong():
    x = graph.var("x", shape=(1, 8, 8, 16))
    u = graph.const(winograd_weight_transform(_random(3, 3, 16, 32), "HWIO", 4, 16))
    with pytest.raises(ShapeError, match=r"F\(2x2, 3x3\): the weight must be \(4, 4, K / nb, 16, nb\)"):
        graph.call("nn.conv2d_winograd", x, u, tile_size=2, padding=(1, 1, 1, 1))
    with pytest.raises(ShapeError, match=r"must be \(6, 6, K / nb, 8, nb\)"):
        graph.call("nn.conv2d_winograd", graph.var("y", shape=(1, 8, 8, 8)), u, tile_size=4, padding=(1, 1, 1, 1))
    with pytest.raises(DTypeError, match="must both be float32"):
        graph.call("nn.conv2d_winograd", graph.var("h", shape=(1, 8, 8, 16), dtype="float16"), u, tile_size=4)
    with pytest.raises(AttrsError, match="tile_size 3 is not one of"):
        graph.call("nn.conv2d_winograd", x, u, tile_size=3)
    with pytest.raises(AttrsError, match="data_layout"):
        graph.call("nn.conv2d_winograd", x, u, tile_size=4, data_layout="NCHW")


def test_the_weight_transform_refuses_what_it_cannot_transform():
    with pytest.raises(ShapeError, match="is not 3x3"):
        winograd_weight_transform(_random(5, 5, 4, 8), "HWIO", 4, 8)
    with pytest.raises(ShapeError, match="block 16 does not divide the 24 output channels"):
        winograd_weight_transform(_random(3, 3, 4, 24), "HWIO", 4, 16)
