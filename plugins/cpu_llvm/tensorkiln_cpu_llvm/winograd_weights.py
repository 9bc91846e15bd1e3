"""winograd_weights.py: 3x3 stride-1 NHWC convs with constant weights become nn.conv2d_winograd.

A 3x3 conv at stride 1 multiplies 9 values per output and channel pair; Winograd's
F(m x m, 3 x 3) (core graph/ops/winograd.py) multiplies (m + 2)^2 / m^2 of them: 2.25 for
F(4x4), 4 for F(2x2), at the price of transforms of the data and of the output that cost
O(a^3) adds per tile and channel. The weight transform U = G g G^T is done here, once: the
pass rewrites each eligible conv into nn.conv2d_winograd with U packed in blocks of nb = two
vectors of output channels (the batched GEMM's register tile, strategies/winograd.py), or one
where two do not divide the output channels.

Which convs, and which m (`winograd_tile`): float32, groups 1, NHWC data, a constant HWIO
weight, 3x3, stride 1, dilation 1, the output channels a multiple of a vector and at least 16 input
channels (below that the transforms cost more than the multiplies they save). m = 4 where
F(4x4) makes at least 32 tiles (the rows of its GEMMs; 28 x 28 outputs make 49), else m = 2:
with fewer tiles F(4x4)'s GEMMs are too short and its transformed weights, 2.25x those of
F(2x2), stream from memory for few rows (resnet50's 14x14 256 -> 256 convs, in the model:
0.69 ms with m = 4, 0.61 with m = 2; its 28x28 ones 0.42 against 0.58). Outputs under 7 x 7
stay direct (MIN_TILES). The target option
`-winograd=off` keeps every conv direct; `-winograd=2` or `=4` forces m.

Kernel times on one Zen 5 core, resnet50's 3x3 convs with bias and relu, direct -> Winograd
(benchmarks/winograd_layers.py; AVX-512, then -mcpu=haswell): 56x56 64->64 1.01 -> 0.33 ms and
2.31 -> 0.85; 28x28 128->128 1.02 -> 0.30 and 2.30 -> 0.89; 14x14 256->256 0.99 -> 0.48 and
2.22 -> 1.59; 7x7 512->512 1.14 -> 0.87 and 2.79 -> 1.87.

Rounding: F(4x4) float32 results differ from direct convolution by about 1e-5 relative
(F(2x2): about 1e-6); the op's tolerance says so.
"""
from __future__ import annotations

from tensorkiln.graph import (Call, Constant, Module, call, owned_constant, rewrite, winograd_tiles,
                              winograd_weight_transform)
from tensorkiln.ir.errors import TargetError
from tensorkiln.sdk.host_arrays import aligned_empty

__all__ = ["convert_to_winograd", "winograd_tile", "weight_block", "MIN_INPUT_CHANNELS", "MIN_F4_TILES", "MIN_TILES"]

MIN_INPUT_CHANNELS = 16
"""Fewer input channels: the data transform (per input channel) outweighs the saved multiplies."""

MIN_F4_TILES = 32
"""F(4x4, 3x3) where it makes at least this many output tiles per image; F(2x2, 3x3) below."""

MIN_TILES = 16
"""Fewer F(2x2) tiles per image (outputs under 7 x 7): the conv stays direct. Its GEMMs would be a few
rows over transformed weights 1.8x the direct ones. At 16 tiles it still pays: resnet50's 7x7
512 -> 512 convs ran 1.3x faster (each weight 17 MB instead of 9.4), densenet121's 7x7 128 -> 32
ones 1.05x."""


_OPTION_VALUES = ("auto", "off", "2", "4")


def weight_block(out_channels: int, target) -> int | None:
    """nb of the transformed weight: two float32 vectors of output channels, else one; None if neither divides."""
    from .host import cpu_facts
    lanes = max(1, cpu_facts(target).vector_bits // 32)
    return next((block for block in (2 * lanes, lanes) if out_channels % block == 0), None)


def _forced_tile(target) -> int | None | str:
    option = str(target.options.get("winograd", "auto"))
    if option not in _OPTION_VALUES:
        raise TargetError(f"cpu_llvm option -winograd={option}: expected one of {', '.join(_OPTION_VALUES)}")
    return None if option == "off" else "auto" if option == "auto" else int(option)


def winograd_tile(node: Call, target) -> int | None:
    """m of F(m x m, 3 x 3) for an nn.conv2d call the pass rewrites, else None (module docstring)."""
    attrs = node.attrs
    data, weight = node.args
    if (attrs.data_layout, attrs.kernel_layout) != ("NHWC", "HWIO") or attrs.groups != 1 or attrs.out_dtype \
            or attrs.out_layout not in ("", "NHWC") or tuple(attrs.strides) != (1, 1) \
            or tuple(attrs.dilation) != (1, 1):
        return None
    if not isinstance(weight, Constant) or weight.value.dtype != "float32" or data.checked_type.dtype != "float32":
        return None
    kernel_h, kernel_w, in_channels, out_channels = weight.value.shape
    if (kernel_h, kernel_w) != (3, 3) or in_channels < MIN_INPUT_CHANNELS or not weight_block(out_channels, target):
        return None
    forced = _forced_tile(target)
    if forced != "auto":
        return forced
    out_h, out_w = (int(d) for d in node.checked_type.shape[1:3])
    if _tile_count(out_h, out_w, 2) < MIN_TILES:
        return None
    return 4 if _tile_count(out_h, out_w, 4) >= MIN_F4_TILES else 2


def _tile_count(out_h: int, out_w: int, tile: int) -> int:
    tiles_h, tiles_w = winograd_tiles(out_h, out_w, tile)
    return tiles_h * tiles_w


def convert_to_winograd(mod: Module, target=None) -> Module:
    """Rewrite eligible nn.conv2d calls to nn.conv2d_winograd with their weights transformed (module docstring)."""
    if target is None:
        return mod

    def visit(node):
        if not (isinstance(node, Call) and getattr(node.op, "name", "") == "nn.conv2d"):
            return None
        tile = winograd_tile(node, target)
        if tile is None:
            return None
        data, weight = node.args
        block = weight_block(int(weight.value.shape[3]), target)
        # written once, 64-byte aligned: the executor keeps it as it is (weight_packing.py does the same)
        transformed = owned_constant(winograd_weight_transform(weight.value, "HWIO", tile, block, empty=aligned_empty))
        return call("nn.conv2d_winograd", data, transformed, tile_size=tile, padding=node.attrs.padding)
    return rewrite(mod, visit)
