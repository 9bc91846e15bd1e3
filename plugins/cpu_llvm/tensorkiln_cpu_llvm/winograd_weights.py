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
channels (below that the transforms cost more than the multiplies they save). m = 4 unless the
output is smaller than 12 x 12, where the tiles of 4 waste more (a 7x7 output is computed as
8x8 either way, but F(4x4) transforms weights 2.25x larger than F(2x2) for few tiles). The
target option `-winograd=off` keeps every conv direct; `-winograd=2` or `=4` forces m.

Measured on one AVX-512 core (Zen 5; resnet50's 3x3 convs, bias and relu fused; direct ->
F(m)): 56x56 64->64 1.22 -> 0.37 ms (m 4); 28x28 128->128 1.18 -> 0.34 (m 4); 14x14 256->256
1.33 -> 0.52 (m 4; 0.60 with m 2); 7x7 512->512 1.87 -> 1.23 (m 2; 1.35 with m 4).

Rounding: F(4x4) float32 results differ from direct convolution by about 1e-5 relative
(F(2x2): about 1e-6); the op's tolerance says so.
"""
from __future__ import annotations

from tensorkiln.graph import Call, Constant, Module, call, owned_constant, rewrite, winograd_weight_transform
from tensorkiln.ir.errors import TargetError

__all__ = ["convert_to_winograd", "winograd_tile", "weight_block", "MIN_INPUT_CHANNELS", "LARGE_OUTPUT"]

MIN_INPUT_CHANNELS = 16
"""Fewer input channels: the data transform (per input channel) outweighs the saved multiplies."""

LARGE_OUTPUT = 12
"""Outputs at least this high and wide use F(4x4, 3x3); smaller ones F(2x2, 3x3)."""

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
    return 4 if min(out_h, out_w) >= LARGE_OUTPUT else 2


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
        transformed = owned_constant(winograd_weight_transform(weight.value, "HWIO", tile, block))
        return call("nn.conv2d_winograd", data, transformed, tile_size=tile, padding=node.attrs.padding)
    return rewrite(mod, visit)
