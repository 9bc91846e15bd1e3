"""weight_packing.py: constant weights packed once, at compile time: conv weights for the NHWC register tile,
GEMM weights for the micro-kernel's slivers.

The NHWC conv schedule (strategies/anchors.apply_conv2d_nhwc) reads, for each reduction
step (ry, rx, c), one vector or two of a tile's n output channels. From an HWIO weight
those n channels are n * 4 bytes out of a row of O * 4: a tile streams its weights as
short pieces O * 4 bytes apart (2 KB for 512 channels), which the cache and the TLB
serve badly, and with power-of-two O every piece maps to the same few L1 sets. Packed
as OHWI{n}o (weight[o // n, ry, rx, c, o % n]), a tile's weights are one contiguous
stream. Measured before this pass, on one AVX-512 core: a 14x14x256 -> 256 3x3 conv ran
at 189 GFLOP/s, and the same conv with only 32 output channels (whose HWIO rows are
already one block) at 234.

`pack_conv_weights` rewrites every float32, groups-1 NHWC conv with a constant HWIO
weight that the NHWC register tile runs, with n its default tile's channel block (one
or two vectors); the schedule then keeps that block whatever the width knobs. Convs the
micro-kernel runs (strategies/ukernel.conv_applies) keep HWIO, and so do tiles narrower
than a vector (packing would not make their reads contiguous vectors).

`pack_dense_weights` rewrites every float32 2-D nn.matmul with a constant B[K, N] (and nn.dense with a
constant W[N, K]) that the whole-GEMM micro-kernel runs (strategies/ukernel.gemm_applies) into
nn.dense_pack, its weight packed once into the nr-wide slivers the call reads (Wp[N / nr, K, nr], nr the
default register tile's width): MLAS's and TVM's prepacked dense. Read in place, B had each sliver copied
on every call (into panels, slivers or the packing buffer, by rows a page apart when N is a power of two);
packed, each sliver is one contiguous stream of K x nr floats.
"""
from __future__ import annotations

from tensorkiln.graph import (Call, Constant, Module, call, owned_constant, pack_dense_weight, rewrite,
                              transform_layout)
from tensorkiln.sdk.host_arrays import aligned_empty

__all__ = ["pack_conv_weights", "packed_layout", "pack_dense_weights"]


def packed_layout(node: Call, target) -> str | None:
    """"OHWI{n}o" for a conv call the pass packs, else None."""
    from .host import cpu_facts
    from .strategies import conv_nhwc_tile
    from .strategies.ukernel import conv_applies
    attrs = node.attrs
    data, weight = node.args
    if (attrs.data_layout, attrs.kernel_layout) != ("NHWC", "HWIO") or attrs.groups != 1 or attrs.out_dtype:
        return None
    if not isinstance(weight, Constant) or weight.value.dtype != "float32" or data.checked_type.dtype != "float32":
        return None
    if conv_applies(node, target) is True:
        return None
    out_width, out_channels = (int(d) for d in node.checked_type.shape[2:])
    in_channels = int(weight.value.shape[2])
    _, block = conv_nhwc_tile(out_width, out_channels, in_channels, target)
    if block < cpu_facts(target).vector_bits // 32 or out_channels % block:   # narrower than one float32 vector
        return None
    return f"OHWI{block}o"


def pack_conv_weights(mod: Module, target=None) -> Module:
    """Rewrite NHWC convs with constant HWIO weights to their packed OHWI{n}o weights (module docstring)."""
    if target is None:
        return mod

    def visit(node):
        if not (isinstance(node, Call) and getattr(node.op, "name", "") == "nn.conv2d"):
            return None
        layout = packed_layout(node, target)
        if layout is None:
            return None
        data, weight = node.args
        # written once, 64-byte aligned: the executor keeps it as it is
        packed = owned_constant(transform_layout(weight.value, "HWIO", layout, empty=aligned_empty))
        attrs = {name: getattr(node.attrs, name) for name in ("strides", "padding", "dilation", "groups",
                                                                "data_layout", "out_dtype")}
        return call("nn.conv2d", data, packed, kernel_layout=layout, **attrs)
    return rewrite(mod, visit)


def pack_dense_weights(mod: Module, target=None) -> Module:
    """Rewrite micro-kernel GEMMs with a constant weight to nn.dense_pack (module docstring)."""
    if target is None:
        return mod
    from .strategies.gemm_blocking import default_packed_columns
    from .strategies.ukernel import gemm_applies
    packed_weights: dict[tuple[int, int], Constant] = {}   # a weight shared by several GEMMs is packed once

    def visit(node):
        name = getattr(node.op, "name", "") if isinstance(node, Call) else ""
        if name not in ("nn.matmul", "nn.dense"):
            return None
        data, weight = node.args
        if not isinstance(weight, Constant) or weight.value.ndim != 2 or data.checked_type.ndim != 2 \
                or gemm_applies(node, target) is not True:
            return None
        m, units = (int(d) for d in node.checked_type.shape)
        nr = default_packed_columns(target, m, units)
        key = (id(weight), nr)
        if key not in packed_weights:
            rows = weight.value.T if name == "nn.matmul" else weight.value   # W[N, K]
            # written once, 64-byte aligned: the executor keeps it as it is
            packed_weights[key] = owned_constant(pack_dense_weight(rows, nr, empty=aligned_empty))
        return call("nn.dense_pack", data, packed_weights[key], units=units)
    return rewrite(mod, visit)
