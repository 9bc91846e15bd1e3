"""nn.conv2d_winograd: a 3x3, stride-1 NHWC conv whose weight is already Winograd-transformed.

Winograd's minimal filtering F(m x m, 3 x 3) (Lavin & Gray, "Fast Algorithms for Convolutional
Neural Networks", 2016) computes an m x m block of outputs from an (m + 2) x (m + 2) tile of
the input with (m + 2)^2 multiplications per channel pair instead of 9 m^2:

    Y = A^T [ (G g G^T) * (B^T d B) ] A          (* elementwise, summed over input channels)

G g G^T, the transformed weight U, depends only on the weights: a target transforms constant
weights once, at compile time (`winograd_weight_transform`), and rewrites nn.conv2d into this
op (cpu_llvm's graph pass, TVM's `contrib_conv2d_winograd_without_weight_transform`). The rest
runs per call: the data tiles' transform B^T d B, one (m + 2)^2-batched GEMM over input channels
and the inverse transform A^T . A, which writes the output (ops/nn/winograd.py has the compute).

The weight is U in blocks of `nb` output channels, innermost (the GEMM reads an nb-wide
sliver of one transform position as one contiguous stream):

    weight[eps, nu, o // nb, c, o % nb] = U[eps, nu, c, o]     shape (m + 2, m + 2, K / nb, C, nb)

The matrices are the standard ones with interpolation points 0, +-1, +-2 (and infinity);
F(4x4, 3x3) multiplies by 4x fewer values than direct convolution and F(2x2, 3x3) by 2.25x.
Rounding grows with m: F(4x4) loses about one decimal digit of float32 against direct
convolution (relative errors near 1e-6 become near 1e-5); F(2x2) loses almost none.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.errors import DTypeError, ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import shape_text, tensor_args
from .layout import transform_layout

__all__ = ["Conv2DWinogradAttrs", "WINOGRAD_TILES", "winograd_matrices", "winograd_weight_transform",
           "winograd_tiles"]

WINOGRAD_TILES = (2, 4)
"""The output tile sizes m of F(m x m, 3 x 3) this op computes."""

_B_T = {
    2: [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]],
    4: [[4, 0, -5, 0, 1, 0], [0, -4, -4, 1, 1, 0], [0, 4, -4, -1, 1, 0],
        [0, -2, -1, 2, 1, 0], [0, 2, -1, -2, 1, 0], [0, 4, 0, -5, 0, 1]],
}
_G = {
    2: [[1, 0, 0], [1 / 2, 1 / 2, 1 / 2], [1 / 2, -1 / 2, 1 / 2], [0, 0, 1]],
    4: [[1 / 4, 0, 0], [-1 / 6, -1 / 6, -1 / 6], [-1 / 6, 1 / 6, -1 / 6],
        [1 / 24, 1 / 12, 1 / 6], [1 / 24, -1 / 12, 1 / 6], [0, 0, 1]],
}
_A_T = {
    2: [[1, 1, 1, 0], [0, 1, -1, -1]],
    4: [[1, 1, 1, 1, 1, 0], [0, 1, -1, 2, -2, 0], [0, 1, 1, 4, 4, 0], [0, 1, -1, 8, -8, 1]],
}


def winograd_matrices(tile_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B^T, G, A^T) of F(m x m, 3 x 3) for m = `tile_size`, in float64: shapes (a, a), (a, 3), (m, a), a = m + 2."""
    if tile_size not in WINOGRAD_TILES:
        raise ShapeError(f"nn.conv2d_winograd: tile_size {tile_size} is not one of {WINOGRAD_TILES}")
    return (np.array(_B_T[tile_size], np.float64), np.array(_G[tile_size], np.float64),
            np.array(_A_T[tile_size], np.float64))


def winograd_tiles(out_height: int, out_width: int, tile_size: int) -> tuple[int, int]:
    """Tiles along the output's height and width (a partial tile at the bottom / right edge counts)."""
    return -(-out_height // tile_size), -(-out_width // tile_size)


def winograd_weight_transform(weight: np.ndarray, kernel_layout: str, tile_size: int, block: int,
                              empty=np.empty) -> np.ndarray:
    """U = G g G^T of a 3x3 conv weight in `kernel_layout` (HWIO, OIHW, OHWI), as float32 in the op's
    layout (m + 2, m + 2, K / block, C, block); `block` must divide K. `empty(shape, dtype)` makes the
    result's array (a target passes an aligned allocator, as for transform_layout)."""
    weight = np.asarray(weight)
    hwio = weight if kernel_layout == "HWIO" else transform_layout(weight, kernel_layout, "HWIO")
    if hwio.shape[:2] != (3, 3):
        raise ShapeError(f"nn.conv2d_winograd: the weight {shape_text(weight.shape)} ({kernel_layout}) is not 3x3")
    _, in_channels, out_channels = hwio.shape[1:]
    if block < 1 or out_channels % block:
        raise ShapeError(f"nn.conv2d_winograd: block {block} does not divide the {out_channels} output channels")
    _, g, _ = winograd_matrices(tile_size)
    alpha = tile_size + 2
    # U[a, b] = sum_ij G[a, i] G[b, j] g[i, j]: one GEMM, kron(G, G) (a^2 x 9) by the 9 taps' rows, each
    # already in the blocked order (K / block, C, block), so the product is the result: in float32,
    # without a float64 or transposed copy of U (those cost more than the rest of resnet50's compile)
    taps = hwio.reshape(9, in_channels, out_channels // block, block).transpose(0, 2, 1, 3)
    taps = np.ascontiguousarray(taps, dtype=np.float32).reshape(9, -1)
    u = empty((alpha, alpha, out_channels // block, in_channels, block), np.float32)
    np.matmul(np.kron(g, g).astype(np.float32), taps, out=u.reshape(alpha * alpha, -1))
    return u


@dataclass(frozen=True, slots=True)
class Conv2DWinogradAttrs(Attrs):
    """tile_size m of F(m x m, 3 x 3); padding (top, left, bottom, right) of the NHWC data."""
    tile_size: int = 4
    padding: tuple[int, int, int, int] = (1, 1, 1, 1)
    data_layout: str = "NHWC"
    _choices = {"data_layout": ("NHWC",)}

    def _check(self) -> None:
        if self.tile_size not in WINOGRAD_TILES:
            self.fail(f"tile_size {self.tile_size} is not one of {WINOGRAD_TILES}")
        if len(self.padding) != 4 or any(p < 0 for p in self.padding):
            self.fail(f"padding must be four non-negative sizes (top, left, bottom, right), got {self.padding}")


def _conv2d_winograd_type(arg_types, attrs: Conv2DWinogradAttrs) -> TensorType:
    data, weight = tensor_args("nn.conv2d_winograd", arg_types)
    if data.dtype != "float32" or weight.dtype != "float32":
        raise DTypeError(f"nn.conv2d_winograd: data {data.dtype} and weight {weight.dtype} must both be float32; "
                         "keep other dtypes on nn.conv2d")
    alpha = attrs.tile_size + 2
    if data.ndim != 4 or weight.ndim != 5 or weight.shape[:2] != (alpha, alpha) or weight.shape[3] != data.shape[3]:
        raise ShapeError(f"nn.conv2d_winograd: data {shape_text(data.shape)} (NHWC) and weight "
                         f"{shape_text(weight.shape)} do not fit F({attrs.tile_size}x{attrs.tile_size}, 3x3): the weight "
                         f"must be ({alpha}, {alpha}, K / nb, {data.shape[3] if data.ndim == 4 else 'C'}, nb), "
                         "as winograd_weight_transform makes it")
    top, left, bottom, right = attrs.padding
    height, width = data.shape[1] + top + bottom - 2, data.shape[2] + left + right - 2
    if height < 1 or width < 1:
        raise ShapeError(f"nn.conv2d_winograd: the 3x3 window is larger than the padded input "
                         f"{data.shape[1] + top + bottom}x{data.shape[2] + left + right}")
    return TensorType((data.shape[0], height, width, weight.shape[2] * weight.shape[4]), "float32")


def _conv2d_winograd_reference(data: np.ndarray, weight: np.ndarray, attrs: Conv2DWinogradAttrs) -> np.ndarray:
    """The transforms in float64 with numpy, tile by tile (the definition above)."""
    m = attrs.tile_size
    b_t, _, a_t = winograd_matrices(m)
    alpha = m + 2
    top, left, bottom, right = attrs.padding
    batch, height, width, _ = data.shape
    out_h, out_w = height + top + bottom - 2, width + left + right - 2
    tiles_h, tiles_w = winograd_tiles(out_h, out_w, m)
    padded = np.pad(data.astype(np.float64), ((0, 0), (top, tiles_h * m + 2 - height - top),
                                              (left, tiles_w * m + 2 - width - left), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (alpha, alpha), axis=(1, 2))[:, ::m, ::m]
    v = np.einsum("ai,nyxcij,bj->nyxabc", b_t, windows, b_t, optimize=True)
    u = weight.astype(np.float64)
    u = u.transpose(0, 1, 3, 2, 4).reshape(alpha, alpha, u.shape[3], -1)       # (a, a, C, K)
    product = np.einsum("nyxabc,abck->nyxabk", v, u, optimize=True)
    y = np.einsum("ia,nyxabk,jb->nyixjk", a_t, product, a_t, optimize=True)
    y = y.reshape(batch, tiles_h * m, tiles_w * m, -1)[:, :out_h, :out_w]
    return np.ascontiguousarray(y).astype(np.float32)


register_op("nn.conv2d_winograd", attrs=Conv2DWinogradAttrs, type_rule=_conv2d_winograd_type,
            reference=_conv2d_winograd_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            tolerance={"float32": 1e-3},
            doc="3x3 stride-1 NHWC conv2d with a Winograd-transformed weight (winograd_weight_transform).")
