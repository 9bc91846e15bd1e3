"""strategies/conv_nchwc.py: blocked NCHW{x}c conv2d and pools (what alter_layout makes for an NCHW{x}c
preference), after TVM's x86 conv2d_NCHWc schedule (topi/x86/conv2d_avx_common.py).

The conv (ops/nn/conv2d_nchwc.py) reads OIHW{x}i{x}o weights, one output-channel block `ob` of x
lanes contiguous; its register tile is `oc_blocks` channel blocks x `reg_n / oc_blocks` output columns,
each a vector (TVM's tile is one block; two let each broadcast input feed two FMAs):

    for batch: parallel for (oc_chunk / oc_blocks, oh):     <- the weight blocks stay in cache
      for ow_chunk:
        acc[oc_blocks][columns][x] = 0                      (local: vector registers)
        for rco, ry, rx, rci:                               (unroll_kw: rco, ry, rci, rx with rx unrolled)
          for block, column (unrolled):
            acc[block][column][:] += pad[.., rci] (broadcast) * w[oc, rco, ry, rx, rci, :]
        for block, column: out[b, oc, oh, ow, :] = epilogue(acc[block][column][:])   (vectorized over ob)

The padded input is materialized first (in parallel), so the tile reads it without bounds checks.
Knobs (`_conv_space`): reg_n (accumulators per tile: at most three quarters of the vector registers,
the rest for the weight vectors and the broadcast input, and at most 16, see `_default_reg_n`),
oc_blocks and unroll_kw. Two blocks measured 10-15% faster than one on resnet-like 3x3 and 1x1 convs
(AVX-512, 1 thread, 24 accumulators: 56x56x64 1.57 -> 1.42 ms, 14x14x256 1.26 -> 1.12, 7x7x512 1.70 -> 1.40).
The block x comes from the alter_layout preference; `preferred_block(target)` gives the host's
vector lanes (8 on AVX2, 16 on AVX-512) for users who ask for NCHW{lanes}c.

The pools of a blocked region are vectorized over the channel block: (batch, channel chunk)
parallel, the padded plane computed per chunk.
"""
from __future__ import annotations

from tensorkiln.graph import data_layout_block, primal_sizes
from tensorkiln.ops import tags
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace
from tensorkiln.sdk.schedules import (can_parallel, divisor_at_most, extent_of, schedule_fused,
                                      schedule_injective_stage, schedule_reduce_stage, vector_lanes)

from ..host import cpu_facts
from .anchors import ANCHOR_SCHEDULES, accumulator

__all__ = ["conv_nchwc_strategies", "preferred_block", "tile_columns", "register_tile", "apply_conv2d_nchwc",
           "apply_pool_nchwc"]

REG_N_CANDIDATES = (4, 7, 8, 12, 14, 16, 24, 28)
TAIL_MIN_CHANNELS = 16
"""A column tile with a tail needs this many input channels: its bounds check then sits outside the
unrolled channel loop (as the NHWC tile's, anchors.nhwc_tile)."""


def tile_columns(out_width: int, most: int, in_channels: int) -> int:
    """Output columns per register tile, at most `most`: the largest divisor of the width (no tail), unless
    it fills fewer than half of `most` (squeezenet's 13- and 55-wide outputs); then the width in
    [most / 2, most] whose tail tile wastes the fewest columns (13 wide, most 12: tiles of 7)."""
    width = divisor_at_most(out_width, most)
    if 2 * width >= most or width == out_width or in_channels < TAIL_MIN_CHANNELS:
        return width
    return min(range(max(1, most // 2), most + 1), key=lambda t: (-(-out_width // t) * t - out_width, -t))


TWO_BLOCK_BONUS = 1.25
"""Weight of a two-block tile's accumulators against a one-block tile's: each broadcast input then feeds
two FMAs (the NHWC tile's TWO_VECTOR_BONUS)."""


def register_tile(out_width: int, out_chunks: int, accumulators: int, max_blocks: int,
                  in_channels: int) -> tuple[int, int]:
    """(channel blocks, columns) of the register tile: of one and (up to `max_blocks`) two blocks, the one
    with more useful accumulators (columns inside the output), two blocks counted TWO_BLOCK_BONUS times.
    27 wide, 12 accumulators (AVX2): 9 columns of one block, not 3 columns of two (6 accumulators)."""
    best = (0.0, 1, 1)
    for blocks in range(1, max_blocks + 1):
        if out_chunks % blocks:
            continue
        columns = tile_columns(out_width, max(1, accumulators // blocks), in_channels)
        useful = columns * blocks * out_width / (-(-out_width // columns) * columns)
        best = max(best, (useful * (TWO_BLOCK_BONUS if blocks == 2 else 1.0), blocks, columns))
    return best[1], best[2]


def preferred_block(target) -> int:
    """x of NCHW{x}c for this target: the float32 lanes of one vector register (8 on AVX2, 16 on AVX-512)."""
    return max(1, min(16, cpu_facts(target).vector_bits // 32))


MAX_DEFAULT_ACCUMULATORS = 16


def _default_reg_n(target) -> int:
    """Three quarters of the vector registers, at most 16, hold accumulators (AVX2: 12 of 16, AVX-512: 16
    of 32). Measured on one core of an AMD EPYC (AVX-512) host, two blocks per tile: on AVX-512, 16 ran
    resnet50's and squeezenet's conv shapes as fast as 24 or faster, and inception's 55-wide 64 -> 192
    3x3 in 4.0 ms against 5.5 (24 makes its tile 11 columns x 2 blocks, 22 accumulators); on AVX2, 12
    beat 8 on 9 of 11 shapes."""
    return min(cpu_facts(target).vector_registers * 3 // 4, MAX_DEFAULT_ACCUMULATORS)


UNROLL_KW_MAX_CHANNELS = 128


def _default_unroll_kw(workload, target) -> bool:
    """Unroll the kernel columns (one rci step then feeds kw x tile FMAs) below UNROLL_KW_MAX_CHANNELS input
    channels. Conv kernel times, 1 thread, unrolled / not, AVX2: 0.54 (13x13 24 -> 64 5x5), 0.79 (27x27
    96 -> 128 3x3), 1.00-1.03 at 64 and 128 channels, 1.16 (7x7 512) and 1.71 (14x14 256: registers
    spilled); AVX-512 kernels 0.91-1.06 below 128 channels. Unrolled everywhere, whole models ran slower:
    AVX-512 resnet50 40.15 against 39.10 ms, inception_v1 15.50 against 15.39; AVX2 resnet50 90.4
    against 83.1 (but inception_v1 30.6 against 32.2, which the channel rule keeps)."""
    channels = _in_channels(workload)
    return channels is not None and channels < UNROLL_KW_MAX_CHANNELS


def _in_channels(workload) -> int | None:
    call = workload.call
    if call is not None and getattr(call.op, "name", "") == "nn.conv2d":
        weight = tuple(int(d) for d in call.args[1].checked_type.shape)
        return primal_sizes(weight, call.attrs.kernel_layout)["I"]
    anchor = workload.anchor
    if anchor is None or anchor.op.tag != tags.CONV2D_NCHWC:
        return None
    return _reduced_channels(anchor)


def _reduced_channels(anchor) -> int:
    channels = 1
    for axis in anchor.op.reduce_axis:
        if axis.var.name in ("rco", "rci"):
            channels *= extent_of(axis)
    return channels


def _conv_space(workload, target) -> TuningSpace:
    default = _default_reg_n(target)
    most = cpu_facts(target).vector_registers - 2     # beside a weight vector and the broadcast input
    candidates = sorted({r for r in REG_N_CANDIDATES if r <= most} | {default})
    return TuningSpace((Knob("reg_n", tuple(candidates), default),
                        Knob("unroll_kw", (False, True), _default_unroll_kw(workload, target)),
                        Knob("oc_blocks", (1, 2), 2)))


def apply_conv2d_nchwc(s, anchor, output, target, config: dict) -> None:
    """NCHW{x}c conv: register tiles of oc_blocks channel blocks x reg_n / oc_blocks columns (module docstring)."""
    for producer in anchor.op.input_tensors:
        if producer.op.tag == "injective.pad" and producer.op in s.stage_map:
            schedule_injective_stage(s, producer, target)   # materialized: the tile reads no bounds checks
    acc, output = accumulator(s, anchor, output)
    if tuple(acc.shape) != tuple(output.shape):
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    batch, chunk, row, column, block = out.op.axis
    oc_blocks, reg_n = register_tile(int(output.shape[3]), int(output.shape[1]), config["reg_n"],
                                     config.get("oc_blocks", 1), _reduced_channels(anchor))
    chunk, chunk_inner = out.split(chunk, factor=oc_blocks)
    column_outer, column_inner = out.split(column, factor=reg_n)
    out.reorder(batch, chunk, row, column_outer, chunk_inner, column_inner, block)
    # batch stays serial: a third fused axis is recovered as (fused // a) % b, which bound
    # inference relaxes to the whole axis (see fuse_for_attach)
    fused = out.fuse(chunk, row)
    if can_parallel(target):
        out.parallel(fused)
    out.vectorize(block)
    s[acc].compute_at(out, column_outer)
    stage = s[acc]
    b, o, y, x, ob = stage.op.axis
    rco, ry, rx, rci = stage.op.reduce_axis
    if config["unroll_kw"]:
        stage.reorder(b, y, rco, ry, rci, rx, o, x, ob)
        stage.unroll(rx)
    else:
        stage.reorder(b, y, rco, ry, rx, rci, o, x, ob)
    stage.unroll(o)
    stage.unroll(x)
    stage.vectorize(ob)


def apply_pool_nchwc(s, anchor, output, target, config: dict) -> None:
    """NCHW{x}c max / avg pool: (batch, chunk) parallel, padded plane per chunk, vectorized over the block."""
    acc, output = accumulator(s, anchor, output)
    if tuple(acc.shape) != tuple(output.shape) or len(output.shape) != 5:
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    batch, chunk, row, column, block = out.op.axis
    fused = out.fuse(batch, chunk)
    if can_parallel(target):
        out.parallel(fused)
    lanes = vector_lanes(target, acc.dtype)
    vector = divisor_at_most(int(output.shape[4]), lanes) if lanes > 1 else 1
    if vector > 1:
        block_outer, block_inner = out.split(block, factor=vector)
        out.vectorize(block_inner)
    for producer in anchor.op.input_tensors:
        if producer.op.tag == "injective.pad" and producer.op in s.stage_map:
            s[producer].compute_at(out, fused)
            pad_block = s[producer].op.axis[4]
            if vector > 1 and extent_of(pad_block) % vector == 0:
                _, inner = s[producer].split(pad_block, factor=vector)
                s[producer].vectorize(inner)
    s[acc].compute_at(out, column)
    stage = s[acc]
    a0, a1, a2, a3, a4 = stage.op.axis
    ry, rx = stage.op.reduce_axis
    stage.reorder(a0, a1, a2, a3, ry, rx, a4)
    if vector > 1:
        stage.vectorize(a4)


_TABLE = {**ANCHOR_SCHEDULES, tags.CONV2D_NCHWC: apply_conv2d_nchwc}
_POOL_TABLE = {**ANCHOR_SCHEDULES, tags.POOL: apply_pool_nchwc}
_KEEP_TAGS = ("injective.pad",)


def _schedule_conv(outputs, target, config):
    return schedule_fused(outputs, target, _TABLE, config, keep_tags=_KEEP_TAGS)


def _schedule_pool(outputs, target, config):
    return schedule_fused(outputs, target, _POOL_TABLE, config, keep_tags=_KEEP_TAGS)


def _blocked_pool(call, target) -> "bool | str":
    return True if data_layout_block(call.attrs.layout) else f"layout {call.attrs.layout}, not NCHW{{x}}c"


def conv_nchwc_strategies(target) -> list[OpImplementation]:
    return [OpImplementation("cpu_llvm.conv2d_nchwc", (tags.CONV2D_NCHWC,), _schedule_conv, space=_conv_space),
            OpImplementation("cpu_llvm.pool_nchwc", ("nn.max_pool2d", "nn.avg_pool2d"), _schedule_pool,
                             condition=_blocked_pool, priority=10)]
