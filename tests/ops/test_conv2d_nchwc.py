"""nn.conv2d with blocked NCHW{x}c data (ops/nn/conv2d_nchwc.py): type rule, numpy reference and the
te compute under the core's naive default schedule, each against a plain numpy convolution."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln.ops  # noqa: F401  (attaches computes to the registry)
from tensorkiln.graph import get_op
from tensorkiln.graph.attrs import AttrsError
from tensorkiln.graph.ops.layout import transform_layout
from tensorkiln.graph.ops.nn import Conv2DAttrs
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.errors import ShapeError

from .harness import run_op

CONV = get_op("nn.conv2d")


def numpy_conv(x: np.ndarray, w: np.ndarray, strides=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1)) -> np.ndarray:
    """Plain NCHW x OIHW convolution, one tap at a time (independent of the op's reference)."""
    top, left, bottom, right = padding
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (top, bottom), (left, right)))
    out_c, _, kh, kw = w.shape
    out_h = (x.shape[2] - (kh - 1) * dilation[0] - 1) // strides[0] + 1
    out_w = (x.shape[3] - (kw - 1) * dilation[1] - 1) // strides[1] + 1
    out = np.zeros((x.shape[0], out_c, out_h, out_w))
    for i in range(kh):
        for j in range(kw):
            y0, x0 = i * dilation[0], j * dilation[1]
            rows = slice(y0, y0 + (out_h - 1) * strides[0] + 1, strides[0])
            window = x[:, :, rows, x0:x0 + (out_w - 1) * strides[1] + 1:strides[1]]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j].astype(np.float64))
    return out


# (batch, C, H, W, O, kernel, strides, padding, dilation, block)
CASES = [
    (1, 16, 8, 8, 16, 3, (1, 1), (1, 1, 1, 1), (1, 1), 8),
    (1, 8, 9, 7, 16, 3, (2, 2), (1, 1, 1, 1), (1, 1), 8),      # odd sizes, stride 2
    (2, 16, 10, 10, 8, 3, (1, 1), (2, 2, 2, 2), (2, 2), 8),    # dilation, batch 2
    (1, 32, 7, 7, 32, 1, (1, 1), (0, 0, 0, 0), (1, 1), 16),    # 1x1, block 16
    (1, 16, 11, 13, 32, 5, (2, 1), (2, 1, 0, 2), (1, 1), 16),  # asymmetric padding and strides
    (1, 8, 6, 6, 8, (1, 3), (1, 1), (0, 1, 0, 1), (1, 1), 4),  # a 1x3 kernel
]


def _case(case, seed=0):
    batch, channels, height, width, out_c, kernel, strides, padding, dilation, block = case
    kh, kw = (kernel, kernel) if isinstance(kernel, int) else kernel
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, channels, height, width)).astype(np.float32)
    w = rng.standard_normal((out_c, channels, kh, kw)).astype(np.float32)
    layout = f"NCHW{block}c"
    attrs = Conv2DAttrs(strides=strides, padding=padding, dilation=dilation, data_layout=layout,
                        kernel_layout=f"OIHW{block}i{block}o")
    blocked = [transform_layout(x, "NCHW", layout), transform_layout(w, "OIHW", attrs.kernel_layout)]
    expected = transform_layout(numpy_conv(x, w, strides, padding, dilation), "NCHW", layout)
    return blocked, attrs, expected


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}x{c[2]}x{c[3]}-O{c[4]}-k{c[5]}-s{c[6]}-d{c[8]}-b{c[9]}")
def test_reference_and_type_match_numpy(case):
    arrays, attrs, expected = _case(case)
    out_type = CONV.type_rule(tuple(TensorType(a.shape, "float32") for a in arrays), attrs)
    assert out_type.shape == expected.shape
    np.testing.assert_allclose(CONV.reference(*arrays, attrs), expected, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"C{c[1]}x{c[2]}x{c[3]}-O{c[4]}-k{c[5]}-s{c[6]}-d{c[8]}-b{c[9]}")
def test_compute_naive_schedule_matches_numpy(case):
    arrays, attrs, expected = _case(case)
    (got,) = run_op(CONV, arrays, attrs, "llvm", naive=True)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_compute_with_a_plain_weight_layout():
    """A weight left in OIHW is read through its layout (slower, still right)."""
    arrays, attrs, expected = _case(CASES[1])
    weight = transform_layout(arrays[1], attrs.kernel_layout, "OIHW")
    plain = Conv2DAttrs(strides=attrs.strides, padding=attrs.padding, data_layout=attrs.data_layout)
    (got,) = run_op(CONV, [arrays[0], weight], plain, "llvm", naive=True)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(CONV.reference(arrays[0], weight, plain), expected, rtol=1e-5, atol=1e-4)


def test_output_channels_not_divisible_by_the_block_is_a_shape_error():
    attrs = Conv2DAttrs(data_layout="NCHW8c", kernel_layout="OIHW")
    with pytest.raises(ShapeError, match="12 output channels, not divisible by the block 8"):
        CONV.type_rule((TensorType((1, 2, 5, 5, 8), "float32"), TensorType((12, 16, 3, 3), "float32")), attrs)


def test_data_not_in_the_blocked_layout_is_a_shape_error():
    attrs = Conv2DAttrs(data_layout="NCHW8c", kernel_layout="OIHW8i8o")
    with pytest.raises(ShapeError, match=r"not in NCHW8c: expected \(N, C/8, H, W, 8\)"):
        CONV.type_rule((TensorType((1, 16, 5, 5), "float32"), TensorType((2, 2, 3, 3, 8, 8), "float32")), attrs)
    with pytest.raises(ShapeError, match="input channels"):   # the weight expects 24 channels, the data has 16
        CONV.type_rule((TensorType((1, 2, 5, 5, 8), "float32"), TensorType((2, 3, 3, 3, 8, 8), "float32")), attrs)


def test_input_channels_not_divisible_by_the_block_fail_at_the_transform():
    transform = get_op("layout_transform")
    attrs = transform.make_attrs(src_layout="NCHW", dst_layout="NCHW8c")
    with pytest.raises(ShapeError, match="axis C of size 12 is not divisible by the block 8"):
        transform.type_rule((TensorType((1, 12, 5, 5), "float32"),), attrs)


@pytest.mark.parametrize("layout", ["NCHW6c", "NCHWc", "NHWC8c", "NCHW8h"])
def test_unknown_blocked_layouts_are_refused(layout):
    with pytest.raises(AttrsError, match="power of two"):
        Conv2DAttrs(data_layout=layout)


def test_grouped_blocked_conv_is_refused_with_the_fix():
    with pytest.raises(AttrsError, match="grouped and depthwise convs have no blocked compute; keep them in NCHW"):
        Conv2DAttrs(data_layout="NCHW8c", groups=2)


@pytest.mark.parametrize("block, stride", [(8, 2), (16, 1)])
def test_nchw_data_into_a_blocked_output_matches_numpy(block, stride):
    """A first conv: 3 input channels (no block divides them) read as NCHW, the output blocked."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 3, 11, 11)).astype(np.float32)
    w = rng.standard_normal((2 * block, 3, 7, 7)).astype(np.float32)
    layout = f"NCHW{block}c"
    attrs = Conv2DAttrs(strides=(stride, stride), padding=(3, 3, 3, 3), kernel_layout=f"OIHW3i{block}o",
                        out_layout=layout)
    arrays = [x, transform_layout(w, "OIHW", attrs.kernel_layout)]
    expected = transform_layout(numpy_conv(x, w, (stride, stride), (3, 3, 3, 3)), "NCHW", layout)
    out_type = CONV.type_rule(tuple(TensorType(a.shape, "float32") for a in arrays), attrs)
    assert out_type.shape == expected.shape
    np.testing.assert_allclose(CONV.reference(*arrays, attrs), expected, rtol=1e-5, atol=1e-4)
    (got,) = run_op(CONV, arrays, attrs, "llvm", naive=True)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)


def test_out_layout_needs_nchw_data_and_a_blocked_layout():
    with pytest.raises(AttrsError, match="must be NCHW{x}c, with NCHW data and groups 1"):
        Conv2DAttrs(data_layout="NHWC", out_layout="NCHW8c")
    with pytest.raises(AttrsError, match="must be NCHW{x}c"):
        Conv2DAttrs(out_layout="NHWC")
    with pytest.raises(ShapeError, match="12 output channels, not divisible by the block 8 of out_layout"):
        CONV.type_rule((TensorType((1, 3, 5, 5), "float32"), TensorType((12, 3, 3, 3), "float32")),
                       Conv2DAttrs(out_layout="NCHW8c"))
