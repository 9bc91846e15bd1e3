"""strategies/anchors.py: how cpu_llvm schedules each anchor kind inside a fused group.

Every `apply_*(s, anchor, output, target, config)` gets a schedule whose injective
intermediates are already inlined, the anchor stage's tensor, and the group's output
tensor (the anchor itself, or the elementwise epilogue that consumes it). When the
anchor is the output, a "local" cache stage accumulates instead, so in both cases the
output stage carries the tiling and the accumulation is computed at its tile:

    parallel for (batch, block) fused:          <- output stage tiles
      for tile:
        allocate acc (local)                    <- anchor compute_at the tile
        for reduction: for block: acc[...] += ...   (vectorized block)
        for block: out[...] = epilogue(acc[...])    (vectorized)

The convolutions: NHWC (`apply_conv2d_nhwc`, what alter_layout makes for targets that
prefer it) vectorizes over output channels, with a register tile of several output
positions, weights HWIO read as vectors and the input broadcast; NCHW (`apply_conv2d`)
vectorizes over the output width with the weights broadcast (a strided conv reads its
input split into column phases, see ops/nn/conv2d.py). The batch-1 dense streams the
weight rows with vectors over K (`_apply_dense_split`).

A producer computed at a fused loop sees its region through the fused loop's
decomposition; see `fuse_for_attach` for which fusions keep that region exact.

The tile sizes are knobs (`config`), declared with their analytic defaults in
strategies/__init__.py from the host's vector width and register count (host.py).
"""
from __future__ import annotations

from collections import Counter

from tensorkiln import te
from tensorkiln.graph import is_blocked_kernel_layout, parse_layout
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.ops import tags
from tensorkiln.sdk.schedules import (can_parallel, divisor_at_most, extent_of, fuse_all, fuse_for_attach,
                                      power_of_two_lanes, reduces_outer_only, schedule_injective_stage,
                                      schedule_reduce_stage, vector_lanes)
from tensorkiln.sdk.schedules.common import PARALLEL_MIN_WORK

from ..host import cache_sizes
from .winograd import apply_conv2d_winograd

__all__ = ["apply_conv2d", "apply_conv2d_nhwc", "nhwc_tile", "packed_block", "nhwc_loop_order", "nhwc_tile_rows", "LOOP_ORDERS", "apply_dense", "apply_pool", "apply_softmax", "apply_norm",
           "apply_reduce", "accumulator"]

UNROLL_KERNEL_MAX = 3
"""Kernel loops (ry, rx) of an NCHW conv are unrolled up to 3x3: larger kernels would bloat the code."""


def accumulator(s: te.Schedule, anchor: te.Tensor, output: te.Tensor) -> tuple[te.Tensor, te.Tensor]:
    """(accumulating tensor, output tensor): a local cache of the anchor when it is the output."""
    if anchor.op is output.op or s[anchor].is_output:
        cache = s.cache_write(anchor, "local")
        return cache, anchor
    return anchor, output


def _same_shape(a: te.Tensor, b: te.Tensor) -> bool:
    return tuple(a.shape) == tuple(b.shape)


def _parallel(stage, axis, target) -> None:
    if axis is not None and can_parallel(target):
        stage.parallel(axis)


def apply_conv2d(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """NCHW conv: register tiles of (channel_block output channels x width_vectors vectors along the width),
    each input vector feeding channel_block FMAs with broadcast weights; the padded input at root."""
    for producer in anchor.op.input_tensors:
        if producer.op.tag == "injective.pad" and producer.op in s.stage_map:
            schedule_injective_stage(s, producer, target)  # materialized: reads stay contiguous
    acc, output = accumulator(s, anchor, output)
    if not _same_shape(acc, output):
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    batch, channel, row, column = out.op.axis
    _, out_channels, _, width = (int(d) for d in output.shape)
    lanes = vector_lanes(target, acc.dtype)
    channel_block = divisor_at_most(out_channels, config["channel_block"])
    width_block = divisor_at_most(width, lanes)
    vectors = divisor_at_most(width // width_block, config["width_vectors"])
    channel_outer, channel_inner = out.split(channel, factor=channel_block)
    width_outer, width_tile = out.split(column, factor=width_block * vectors)
    width_mid, width_inner = out.split(width_tile, factor=width_block)
    out.reorder(batch, channel_outer, row, width_outer, channel_inner, width_mid, width_inner)
    # (channel block, row) in parallel, batch serial (as the NHWC tile): a wide channel block leaves
    # few blocks (one for 8 channels), rows are many
    fused = out.fuse(channel_outer, row)
    _parallel(out, fused, target)
    if width_block > 1:
        out.vectorize(width_inner)
    s[acc].compute_at(out, width_outer)
    stage = s[acc]
    b, o, y, x = stage.op.axis
    rc, ry, rx = stage.op.reduce_axis
    x_mid, x_inner = stage.split(x, factor=width_block)
    stage.reorder(b, y, rc, ry, rx, o, x_mid, x_inner)
    if extent_of(ry) <= UNROLL_KERNEL_MAX and extent_of(rx) <= UNROLL_KERNEL_MAX:
        stage.unroll(rx)
    stage.unroll(o)
    stage.unroll(x_mid)
    if width_block > 1:
        stage.vectorize(x_inner)


TAIL_MIN_CHANNELS = 16
TWO_VECTOR_BONUS = 1.25
"""Weight of a two-vector tile's accumulators against a one-vector tile's (nhwc_tile). Measured, 1 core:
a 111-wide 3 -> 64 3x3 conv on AVX2 ran at 72 GFLOP/s as 3 positions x 2 vectors and 56 as 8 x 1
(with a tail, before TAIL_MIN_CHANNELS); a 13-wide 64 -> 256 3x3 on AVX-512 at 201 as 7 x 2 (with a tail), 183 as 13 x 1."""


def _tile_width(out_width: int, most: int, max_accumulators: int, tails: bool) -> int:
    """Positions per tile with at most `most` of them: the largest divisor of the width (no tail) unless
    it fills fewer than half of `max_accumulators` (`most` counts one vector's accumulators per position
    when scaled by the caller); then the width in [most / 2, most] that wastes the fewest positions in
    its tail tile. A 13-wide output with 6 positions per tile (AVX2, two vectors): the divisor tile has
    1 position (2 accumulators, 32 GFLOP/s on a 13x13x64 -> 256 3x3 conv); tiles of 5 with a tail
    reach 104."""
    width = divisor_at_most(out_width, most)
    if not tails or 2 * width * (max_accumulators // max(1, most)) >= max_accumulators or width == out_width:
        return width
    candidates = range(max(1, most // 2), most + 1)
    return min(candidates, key=lambda t: (-(-out_width // t) * t - out_width, -t))


def nhwc_tile(out_width: int, out_channels: int, lanes: int, max_accumulators: int,
              max_width: int, in_channels: int, channel_block: int | None = None) -> tuple[int, int]:
    """(output positions, output channels) of the NHWC register tile.

    Channels: one or two vectors when they divide the channels (else the largest divisor
    of the channels below a vector). Positions: the largest divisor of the output width
    within `max_width` whose accumulators fit in `max_accumulators` vectors, so no tile
    has a tail, unless that fills fewer than half of the accumulators (a prime width such
    as 13): then a tile with a tail (`_tile_width`). Of one and two vectors, the tile with
    more accumulators (counting only the positions inside the output) wins, those of two
    vectors counted TWO_VECTOR_BONUS times (each broadcast input then feeds two FMAs).

    `channel_block` fixes the channels: a weight packed in blocks of that many output
    channels (kernel layout OHWI{n}o, weight_packing.py) is read one block per tile.
    Tails need `in_channels` >= TAIL_MIN_CHANNELS: the tail's bounds checks sit on every
    multiply-add, and LLVM moves them out of the channel loop only when there is one left
    after unrolling (a 3-channel stem unrolls all its 27 taps).
    """
    tails = in_channels >= TAIL_MIN_CHANNELS
    if channel_block is not None:
        vectors = max(1, channel_block // lanes)
        most = min(max_width, max(1, max_accumulators // vectors))
        return _tile_width(out_width, most, vectors * most, tails), channel_block
    if out_channels % lanes:
        block = divisor_at_most(out_channels, lanes)
        most = min(max_width, max_accumulators)
        return _tile_width(out_width, most, most, tails), block
    best = (0.0, 0, 0)
    for vectors in (1, 2):
        if out_channels % (vectors * lanes):
            continue
        most = min(max_width, max_accumulators // vectors)
        width = _tile_width(out_width, most, vectors * most, tails)
        useful = width * vectors * out_width / (-(-out_width // width) * width)
        best = max(best, (useful * (TWO_VECTOR_BONUS if vectors == 2 else 1.0), vectors, width))
    _, vectors, width = best
    return width, vectors * lanes


L1_SET_SHARE = 2 / 3
"""Of an L1 set's ways, how many the input lines of one tile may take (the rest: weights streaming through)."""


def l1_set_width(anchor: te.Tensor, rows: int, max_width: int, caches) -> int:
    """The widest NHWC tile, up to `max_width` positions in each of `rows` rows, whose positions read
    input lines that share no L1 set beyond L1_SET_SHARE of its ways.

    A position's input is stride x channels elements after the previous one's: 4 KB on a 1x1 conv
    over 1024 channels (or a stride-2 one over 512), one L1 way, so every position's line falls into
    the same set, and each is evicted before its 16 channels are all read. Measured on Zen 5 (12
    ways, 1 core): 14 positions ran such convs 1.4-1.6x slower than 7."""
    data = anchor.op.input_tensors[0]
    if len(data.shape) != 4:
        return max_width
    stride_h, stride_w = (anchor.op.attrs or {}).get("strides", (1, 1))
    _, _, width, channels = (int(d) for d in data.shape)
    item = dtype_of(data.dtype).bytes
    column, row = stride_w * channels * item, stride_h * width * channels * item
    sets = max(1, caches.l1d_way_bytes // 64)
    limit = max(2, int(caches.l1d_ways * L1_SET_SHARE))
    for positions in range(max_width, 1, -1):
        lines = {(r * row + x * column) // 64 for r in range(rows) for x in range(positions)}
        if max(Counter(line % sets for line in lines).values()) <= limit:
            return positions
    return 1


def packed_block(anchor: te.Tensor) -> int | None:
    """n of a conv whose weight is packed in blocks of n output channels, innermost (kernel layout "OHWI{n}o"), else None."""
    layout = (anchor.op.attrs or {}).get("kernel_layout", "")
    if not is_blocked_kernel_layout(layout):
        return None
    axis, factor = parse_layout(layout)[-1]
    return factor if axis == "o" else None   # the block is read as one vector only when it is innermost


LOOP_ORDERS = ("channels", "rows")
"""The outer loops of the NHWC conv: "channels" sweeps every output row for one channel block before
the next (the block's weights stay in L1, the input is read once per block), "rows" computes every
channel block of one output row before the next (the row's input stays in L1, every weight is read
once per row, and the output and a fused residual are written and read row by row, contiguously)."""


def nhwc_loop_order(anchor: te.Tensor, target) -> str:
    """The analytic default of the NHWC conv's `loop_order` knob: "rows" when all the conv's weights
    fit in half of L2, so they stay there from one output row to the next; else "channels".

    With the channel blocks outermost, each block writes its 128 bytes of every output position
    (and reads as much of a fused residual) at a stride of the whole channel count: none of it
    contiguous, and the streaming prefetchers fetch lines no pass wants yet. Measured on resnet50's
    NHWC convs, one core of a two-FMA-pipe AVX-512 Xeon (L2 2 MB), rows against channels: weights
    of 16 KB-1 MB 0.80-0.92x (56x56x64 -> 256 with the residual 0.81x, 14x14x256 -> 1024 0.88x,
    14x14x1024 -> 256 1.01x), of 2 MB and more 1.13-1.56x (7x7x512 -> 2048 1.38x).
    """
    weight_elements = 1
    for axis in anchor.op.reduce_axis:
        weight_elements *= extent_of(axis)
    weight_bytes = weight_elements * int(anchor.shape[-1]) * dtype_of(anchor.dtype).bytes
    return "rows" if weight_bytes <= cache_sizes(target).l2 // 2 else "channels"


TWO_ROW_GAIN = 1.5
"""How many times the one-row tile's accumulators a two-row tile must fill to be the default (nhwc_tile_rows):
reading two input rows costs a second stream, so a few more accumulators (AVX-512's 28-wide rows: 16
against 14) do not make up for it."""


def nhwc_tile_rows(anchor: te.Tensor, target, max_accumulators: int, max_tile_width: int) -> int:
    """The analytic default of the NHWC conv's `tile_rows` knob: 2 when a two-row register tile has no
    tail and fills TWO_ROW_GAIN times the accumulators of the one-row tile, or at least half of them
    where the one-row tile has a tail; else 1.

    A tile with a tail checks its positions' bounds inside the reduction loop, which costs more than
    the accumulators it adds; and where the input's lines share L1 sets (l1_set_width) a row holds only
    a few positions, which a second row doubles. Measured on one AVX2 core (Zen 1, 12 accumulators),
    resnet50's 14x14 1x1 convs, one row against two rows of 2 positions x 2 vectors: 14x14x256 -> 1024
    with the residual, 5 positions with a tail (5, 5, 4), 3.51 -> 2.84 ms; 14x14x1024 -> 256, 2 positions
    (the L1 sets allow 5), 3.54 -> 2.66. A prime width (13) keeps its tail: two rows of one position
    fill too little."""
    groups = (anchor.op.attrs or {}).get("groups", 1)
    if groups > 1 or len(anchor.shape) != 4 or int(anchor.shape[1]) % 2:
        return 1
    out_width, out_channels = int(anchor.shape[2]), int(anchor.shape[3])
    in_channels = extent_of(anchor.op.reduce_axis[-1])
    lanes, caches = vector_lanes(target, anchor.dtype), cache_sizes(target)

    def tile(rows: int) -> tuple[bool, int]:
        """(whether it has a tail, accumulators it fills)"""
        max_width = l1_set_width(anchor, rows, max_tile_width, caches)
        width, channels = nhwc_tile(out_width, out_channels, lanes, max_accumulators // rows, max_width,
                                    in_channels, packed_block(anchor))
        return out_width % width != 0, rows * width * max(1, channels // lanes)

    (one_tail, one_filled), (two_tail, two_filled) = tile(1), tile(2)
    if two_tail:
        return 1
    if one_tail:
        return 2 if 2 * two_filled >= max_accumulators else 1
    return 2 if two_filled >= TWO_ROW_GAIN * one_filled else 1


DEPTHWISE_BAND_ROWS = 4
"""Output rows of an NHWC depthwise conv per parallel step (at most; a divisor of the rows)."""


def apply_conv2d_nhwc(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """NHWC conv: register tiles of (output positions x output-channel vectors), epilogue on the tile.

        for batch: parallel for (channel block, row):       <- the weight block stays in cache
          for width block:                                  ("rows" loop_order: (row, channel block))
            acc[positions][channels] = 0                         (local: registers)
            for ry, rx, rc:                                      reduction outside the tile
              for position (unrolled): acc[position][:] += data[.., rc] (broadcast) * w[ry, rx, rc, :]
            for position: out[b, y, x, :] = epilogue(acc[position][:])   (vectorized over channels)

    The padded input is materialized first (its rows then need no bounds checks). With the
    `tile_rows` knob at 2, a tile spans two output rows (sharing the accumulators): a 7-wide output
    then fills 28 accumulators (2 x 7 positions x 2 vectors) where one row filled 14. The
    `loop_order` knob (one row per tile only) puts the rows outermost (`nhwc_loop_order` says when).
    """
    groups = (anchor.op.attrs or {}).get("groups", 1)
    depthwise = groups > 1 and groups == int(output.shape[3])
    pads = [p for p in anchor.op.input_tensors if p.op.tag == "injective.pad" and p.op in s.stage_map]
    acc, output = accumulator(s, anchor, output)
    if not _same_shape(acc, output) or not depthwise:
        for producer in pads:
            schedule_injective_stage(s, producer, target)
    if not _same_shape(acc, output):
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    batch, row, column, channel = out.op.axis
    _, _, out_width, out_channels = (int(d) for d in output.shape)
    per_group = out_channels // groups
    grouped = groups > 1 and per_group > 1
    in_channels = extent_of(anchor.op.reduce_axis[-1])    # (ry, rx, rc): the channels per group
    # rows per tile: a divisor of the output rows, each row of the tile taking its share of the accumulators
    rows = 1 if grouped or depthwise else divisor_at_most(int(output.shape[1]), config.get("tile_rows", 1))
    max_width = l1_set_width(anchor, rows, config["max_tile_width"], cache_sizes(target))
    width_block, channel_block = nhwc_tile(out_width, per_group if grouped else out_channels,
                                           vector_lanes(target, acc.dtype), config["max_accumulators"] // rows,
                                           max_width, in_channels, packed_block(anchor))
    if grouped:
        # Split by the group first: the input channel (o // per_group) * C/G + rc then
        # simplifies to group * C/G + rc, invariant over the vector of output channels.
        group, within = out.split(channel, factor=per_group)
        block, channel_inner = out.split(within, factor=channel_block)
        width_outer, width_inner = out.split(column, factor=width_block)
        out.reorder(batch, group, block, row, width_outer, width_inner, channel_inner)
        # group stays serial too: fused with block, (group * G + block) * b simplifies to one
        # product and the group no longer divides out of the input channel
        parallel = out.fuse(block, row)
    else:
        channel_outer, channel_inner = out.split(channel, factor=channel_block)
        width_outer, width_inner = out.split(column, factor=width_block)
        if rows > 1:
            row, row_inner = out.split(row, factor=rows)
            outer = (channel_outer, row)
            out.reorder(batch, *outer, width_outer, row_inner, width_inner, channel_inner)
        elif depthwise and pads and tuple((anchor.op.attrs or {}).get("strides", (1, 1)))[0] == 1:
            # a band of rows per parallel step: its padded input (band + kernel - 1 rows) is built once
            # for all of them, where one row per step padded 3 input rows for each (3x3 stride 1).
            # Measured, 1 thread, alternating: 28x28x128 AVX-512 21-34 -> 16-18 us, AVX2 37-58 -> 30-38;
            # 112x112x32 AVX-512 107 -> 90; with row stride 2 it was slower (56x56x64: 22 -> 24-34)
            band = divisor_at_most(int(output.shape[1]), DEPTHWISE_BAND_ROWS)
            row, row_inner = out.split(row, factor=band)
            outer = (channel_outer, row)
            out.reorder(batch, *outer, row_inner, width_outer, width_inner, channel_inner)
        else:
            rows_first = not depthwise and (config.get("loop_order") or nhwc_loop_order(anchor, target)) == "rows"
            outer = (row, channel_outer) if rows_first else (channel_outer, row)
            out.reorder(batch, *outer, width_outer, width_inner, channel_inner)
        parallel = out.fuse(*outer)
    # Only two loops are fused into the parallel one, and batch stays serial: a third would be
    # recovered through (fused // a) % b, which bound inference relaxes to the whole axis.
    _parallel(out, parallel, target)
    if depthwise:
        # a depthwise conv does 9 FMAs per output: a root pass over the padded input costs it as much
        # as the conv, so each (channel block, output row) pads the input rows it reads (in L1)
        lanes = vector_lanes(target, acc.dtype)
        for producer in pads:
            s[producer].compute_at(out, parallel)
            _, pad_channels = s[producer].split(s[producer].op.axis[3], factor=divisor_at_most(channel_block, lanes))
            s[producer].vectorize(pad_channels)
    if channel_block > 1:
        out.vectorize(channel_inner)
    s[acc].compute_at(out, width_outer)
    stage = s[acc]
    b, y, x, o = stage.op.axis
    ry, rx, rc = stage.op.reduce_axis
    if rows > 1:
        stage.reorder(b, ry, rx, rc, y, x, o)
        stage.unroll(y)
    else:
        stage.reorder(b, y, ry, rx, rc, x, o)
    stage.unroll(x)
    if channel_block > 1:
        stage.vectorize(o)


def apply_dense(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """dense / batch_matmul: (row block x column vector) tiles, batch and row blocks parallel."""
    if (anchor.op.attrs or {}).get("split"):
        _apply_dense_split(s, anchor, output, target, config)
        return
    for producer in anchor.op.input_tensors:
        if producer.op.tag == "dense_pack" and producer.op in s.stage_map:
            schedule_injective_stage(s, producer, target)
    acc, output = accumulator(s, anchor, output)
    if not _same_shape(acc, output) or not output.shape:
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    axes = list(out.op.axis)
    lanes = vector_lanes(target, acc.dtype)
    pack = anchor.op.attrs.get("pack", 1) if hasattr(anchor.op, "attrs") else 1
    columns = int(output.shape[-1])
    column_block = pack if pack > 1 else divisor_at_most(columns, lanes)
    column_outer, column_inner = out.split(axes[-1], factor=column_block)
    if len(axes) >= 2:
        row_block = divisor_at_most(int(output.shape[-2]), config["row_block"])
        row_outer, row_inner = out.split(axes[-2], factor=row_block)
        out.reorder(*axes[:-2], row_outer, column_outer, row_inner, column_inner)
        fused = fuse_for_attach(out, [*axes[:-2], row_outer, column_outer])
    else:
        fused = column_outer
    _parallel(out, fused, target)
    if column_block > 1:
        out.vectorize(column_inner)
    s[acc].compute_at(out, fused)
    stage = s[acc]
    data_axes = list(stage.op.axis)
    (k,) = stage.op.reduce_axis
    stage.reorder(*data_axes[:-2], k, *data_axes[-2:]) if len(data_axes) >= 2 else stage.reorder(k, data_axes[-1])
    if len(data_axes) >= 2:
        stage.unroll(data_axes[-2])
    if column_block > 1:
        stage.vectorize(data_axes[-1])


def _apply_dense_split(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """Batch-1 dense (T_dense_partial -> T_dense, see ops/nn/dense.py): parallel over blocks of
    outputs; per block, the partial sums of config["split_rows"] weight rows accumulate in vectors
    while the rows stream once from memory, then each row's lanes are added and the epilogue
    applied.

        parallel for j.outer:
          for ko: for j (unrolled): partial[j][:] = fma(data[ko, :], weight[j, ko, :], partial[j][:])
          for j: acc[j] = sum(partial[j][:]);  out[j] = epilogue(acc[j])
    """
    (partial,) = [t for t in anchor.op.input_tensors if t.op.tag == "dense_partial"]
    acc, output = accumulator(s, anchor, output)
    out = s[output]
    axes = list(out.op.axis)
    units = int(output.shape[-1])
    block = divisor_at_most(units, config["split_rows"])
    outer, inner = out.split(axes[-1], factor=block)
    # batch axes (all of extent 1) stay serial outside: fused, bound inference would relax them
    _parallel(out, outer, target)
    s[partial].compute_at(out, outer)
    s[acc].compute_at(out, outer)
    stage = s[partial]
    *leading, row, lane = stage.op.axis
    (ko,) = stage.op.reduce_axis
    stage.reorder(*leading, ko, row, lane)
    stage.unroll(row)
    stage.vectorize(lane)


def apply_pool(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """Pooling over the axes (a0, a1, a2, a3) of NCHW or NHWC data alike: (a0, a1) parallel, i.e.
    (batch, channel) or (batch, row), the padded input computed per parallel iteration, and the last
    axis (width, or channels: each window tap a contiguous vector load) vectorized inside the taps."""
    acc, output = accumulator(s, anchor, output)
    if not _same_shape(acc, output):
        schedule_reduce_stage(s, acc, target)
        schedule_injective_stage(s, output, target)
        return
    out = s[output]
    first, second, _, last = out.op.axis
    lanes = vector_lanes(target, acc.dtype)
    block = divisor_at_most(int(output.shape[3]), lanes)
    last_outer, last_inner = out.split(last, factor=block)
    fused = out.fuse(first, second)
    _parallel(out, fused, target)
    if block > 1:
        out.vectorize(last_inner)
    for producer in anchor.op.input_tensors:
        if producer.op.tag == "injective.pad" and producer.op in s.stage_map:
            s[producer].compute_at(out, fused)
    s[acc].compute_at(out, last_outer)
    stage = s[acc]
    a0, a1, a2, a3 = stage.op.axis
    ry, rx = stage.op.reduce_axis
    stage.reorder(a0, a1, a2, ry, rx, a3)
    if block > 1:
        stage.vectorize(a3)


def _outer_inner_split(output: te.Tensor, first_inner: int):
    stage_axes = list(output.op.axis)
    return stage_axes[:first_inner], stage_axes[first_inner:]


def _attach_rows(s: te.Schedule, output: te.Tensor, reductions: list[te.Tensor], first_inner: int, target) -> None:
    """Parallel over the output's outer axes; each reduction computed per row; the row vectorized."""
    out = s[output]
    outer, inner = _outer_inner_split(output, first_inner)
    lanes = vector_lanes(target, output.dtype)
    if inner:
        row = fuse_all(out, inner)
        length = 1
        for axis in inner:
            length *= extent_of(axis)
        block = divisor_at_most(length, lanes)
        if block > 1:
            _, vector = out.split(row, factor=block)
            out.vectorize(vector)
    fused = fuse_for_attach(out, outer)
    if fused is None:
        for tensor in reductions:
            schedule_reduce_stage(s, tensor, target)
        return
    _parallel(out, fused, target)
    for tensor in reductions:
        partial = _vector_partials(s, tensor, target)
        if partial is not None:
            s[partial].compute_at(out, fused)
        s[tensor].compute_at(out, fused)


MIN_ROW_LANES = 4
"""Narrowest vector of partial results a row reduction is split into (_vector_partials)."""
_SPLITTABLE = frozenset({"sum", "prod", "max", "min"})
"""Reducers whose partial results over interleaved lanes combine into the whole (tensorkiln.te's own)."""


def _vector_partials(s: te.Schedule, tensor: te.Tensor, target) -> te.Tensor | None:
    """A reduction over a row's contiguous last axis as a vector of partial results: the axis split by
    the widest power-of-two vector dividing it, its inner part factored out (rfactor) into a stage that
    accumulates one vector per step, which the reduction then sums. Returns that stage's tensor, or None
    (not a single reduction axis read as the last index, or too narrow a vector).

    The row reductions of softmax (max, sum of exponentials) and layer_norm (mean, variance) otherwise
    ran one scalar element per step, the exponential a scalar call: kernel time, 1 thread, AVX-512, a softmax
    over 4 x 64 x 64 67.8 us (now 8.5; onnxruntime 7), a layer_norm over 64 x 256 33.6 us (now 3.7)."""
    stage = s[tensor]
    body = getattr(stage.op, "body", None)
    if not isinstance(body, te.Reduce) or body.condition is not None or body.combiner.name not in _SPLITTABLE:
        return None
    reduce_axes = list(stage.op.reduce_axis)
    if len(reduce_axes) != 1 or not _reads_as_last_index(body, reduce_axes[0].var):
        return None
    lanes = power_of_two_lanes(extent_of(reduce_axes[0]), _partial_width(extent_of(reduce_axes[0]),
                                                                         vector_lanes(target, tensor.dtype)))
    if lanes < MIN_ROW_LANES:
        return None
    _, inner = stage.split(reduce_axes[0], factor=lanes)
    partial = s.rfactor(tensor, inner, factor_axis=len(stage.op.axis))
    partial_stage = s[partial]
    lane_axis = partial_stage.op.axis[-1]
    partial_stage.reorder(*partial_stage.op.axis[:-1], *partial_stage.op.reduce_axis, lane_axis)
    partial_stage.vectorize(lane_axis)
    return partial


def _partial_width(length: int, lanes: int) -> int:
    """How many partial results a row of `length` accumulates (before the power-of-two divisor): up to
    four vectors, so as many independent chains of vector steps (one chain ran a 256 x 1024 max at 28 us
    where LLVM's own four took 17), but about sqrt(length), as the partials are then summed one by one."""
    width = lanes
    while width < 4 * lanes and (2 * width) ** 2 <= length:
        width *= 2
    return width


def _reads_as_last_index(body, var) -> bool:
    """Whether every tensor read that `var` indexes has it as its last index, alone (a contiguous row)."""
    from tensorkiln.tir.visit import post_order_visit, uses_var
    verdicts = []

    def visit(x):
        if isinstance(x, te.TensorRead) and x.indices:
            uses = [index for index in x.indices if uses_var(index, [var])]
            if uses:
                verdicts.append(len(uses) == 1 and x.indices[-1] is var)
    post_order_visit(body.source if isinstance(body, te.Reduce) else body, visit)
    return bool(verdicts) and all(verdicts)


def apply_softmax(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """softmax / log_softmax: rows parallel, max and exp-sum computed per row (softmax axis last)."""
    axis = anchor.op.attrs.get("axis", anchor.ndim - 1)
    reductions = _with_reduce_producers([t for t in anchor.op.input_tensors if _is_reduction(t)])
    if axis != anchor.ndim - 1 or anchor.op is not output.op:
        for tensor in reductions:
            schedule_reduce_stage(s, tensor, target)
        schedule_injective_stage(s, output, target)
        return
    _attach_rows(s, output, reductions, axis, target)


def _is_reduction(tensor: te.Tensor) -> bool:
    return isinstance(tensor.op, te.ComputeOp) and isinstance(tensor.op.body, te.Reduce)


def _with_reduce_producers(reductions: list[te.Tensor]) -> list[te.Tensor]:
    """The reductions plus the reductions they read (expsum reads max), producers first."""
    ordered: list[te.Tensor] = []
    for tensor in reductions:
        for producer in tensor.op.input_tensors:
            if _is_reduction(producer) and all(p.op is not producer.op for p in ordered):
                ordered.append(producer)
        if all(p.op is not tensor.op for p in ordered):
            ordered.append(tensor)
    return ordered


def apply_norm(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """layer_norm (mean, variance per row) and lrn (windowed sum per element row)."""
    reductions = _with_reduce_producers([t for t in anchor.op.input_tensors if _is_reduction(t)])
    if anchor.op is not output.op or not reductions:
        for tensor in reductions:
            schedule_reduce_stage(s, tensor, target)
        schedule_injective_stage(s, output, target)
        return
    reduced_rank = len(reductions[0].shape)
    if all(_same_shape(t, output) for t in reductions):  # lrn: same-shape window sums
        _attach_rows(s, output, reductions, output.ndim - 1, target)
    elif all(len(t.shape) == reduced_rank for t in reductions) and reduced_rank < output.ndim:
        _attach_rows(s, output, reductions, reduced_rank, target)
    else:
        for tensor in reductions:
            schedule_reduce_stage(s, tensor, target)
        schedule_injective_stage(s, output, target)


def apply_reduce(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    """A reduction (sum, argmax, global pool, cumsum, topk) with an optional elementwise epilogue."""
    if anchor.op is output.op or not _same_shape(anchor, output) or not output.shape:
        if not _reduce_rows_at_root(s, anchor, target):
            schedule_reduce_stage(s, anchor, target)
        if anchor.op is not output.op:
            schedule_injective_stage(s, output, target)
        return
    out = s[output]
    axes = list(out.op.axis)
    # the widest power-of-two vector dividing the innermost axis (1000 channels: 8 lanes, AVX-512 or AVX2)
    lanes = power_of_two_lanes(int(output.shape[-1]), vector_lanes(target, output.dtype))
    if lanes >= 2 and reduces_outer_only(s[anchor]):
        # a reduction over outer axes (an NHWC global pool over H and W): a vector of the innermost
        # axis accumulates inside the reduction loops, where one scalar per channel walked 169 rows
        # 4 KB apart (squeezenet's 13x13x1000 mean: 71 us)
        outer_last, inner_last = out.split(axes[-1], factor=lanes)
        fused = fuse_for_attach(out, [*axes[:-1], outer_last])
        _parallel_if_large(out, fused, output, target, anchor)
        out.vectorize(inner_last)
        s[anchor].compute_at(out, fused)
        stage = s[anchor]
        stage.reorder(*stage.op.axis[:-1], *stage.op.reduce_axis, stage.op.axis[-1])
        stage.vectorize(stage.op.axis[-1])
        return
    # not fuse_all: a (1, 1024, 1, 1) global pool computed at such a loop summed all 1024
    # channels for each output (see fuse_for_attach)
    partial = _vector_partials(s, anchor, target)
    fused = fuse_for_attach(out, axes)
    _parallel_if_large(out, fused, output, target, anchor)
    if partial is not None:
        s[partial].compute_at(out, fused)
    s[anchor].compute_at(out, fused)


def _reduce_rows_at_root(s: te.Schedule, anchor: te.Tensor, target) -> bool:
    """A reduction over its input's contiguous last axis at the root: its outputs fused (parallel when
    large), each a vector of partial results (_vector_partials) computed at them. False: not such a
    reduction (schedule_reduce_stage's job). A sum over rows of 1024 took 129 us for 256 rows, one
    scalar add per step, where the max (which LLVM vectorizes by itself) took 17."""
    partial = _vector_partials(s, anchor, target)
    if partial is None:
        return False
    stage = s[anchor]
    fused = fuse_all(stage, list(stage.op.axis))
    if fused is not None:
        _parallel_if_large(stage, fused, anchor, target, anchor)
        s[partial].compute_at(stage, fused)
    return True


def _parallel_if_large(stage, axis, output, target, reduction: te.Tensor | None = None) -> None:
    """Parallel when there are 1024 outputs, each a whole window or reduction, or when the outputs times
    the reduction's extent reach PARALLEL_MIN_WORK (squeezenet's global pool: 1000 channels of 169,
    56 us on one thread)."""
    size = 1
    for d in output.shape:
        size *= int(d)
    window = 1
    for axis_ in (reduction.op.reduce_axis if reduction is not None and isinstance(reduction.op, te.ComputeOp)
                  else ()):
        window *= int(axis_.dom.extent)
    if size >= PARALLEL_MIN_WORK // 32 or size * window >= PARALLEL_MIN_WORK:
        _parallel(stage, axis, target)


def _reduce_at_root(s, tensor, target, config) -> None:
    schedule_reduce_stage(s, tensor, target)


def _injective_at_root(s, tensor, target, config) -> None:
    schedule_injective_stage(s, tensor, target)


ANCHOR_SCHEDULES = {
    "reduce": _reduce_at_root, "injective": _injective_at_root,
    tags.CONV2D_NCHW: apply_conv2d, tags.DEPTHWISE_CONV2D_NCHW: apply_conv2d,
    tags.GROUP_CONV2D_NCHW: apply_conv2d, tags.CONV2D_TRANSPOSE_NCHW: apply_conv2d,
    tags.CONV2D_NHWC: apply_conv2d_nhwc, tags.CONV2D_WINOGRAD_NHWC: apply_conv2d_winograd,
    tags.DENSE: apply_dense, tags.BATCH_MATMUL: apply_dense,
    tags.POOL: apply_pool,
    tags.SOFTMAX: apply_softmax, tags.LOG_SOFTMAX: apply_softmax,
    tags.NORM: apply_norm,
    tags.GLOBAL_POOL: apply_reduce, tags.COMM_REDUCE: apply_reduce, tags.SCAN: apply_reduce,
    tags.SORT: apply_reduce,
}
"""Anchor tag -> `apply(s, anchor, output, target, config)`, plus the fused walker's root-stage entries."""
