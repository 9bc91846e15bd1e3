"""strategies/depthwise.py: NCHW depthwise conv (groups == input channels, any channel multiplier)
with its padding computed per channel in cache, not over the whole input at the root.

The generic NCHW conv materializes the padded input at the root: a stage as large as the input,
vectorized by a divisor of the padded width (58 columns: 2 lanes) and read back through clamped
indices, i.e. gathers. For a depthwise conv, which does only 9 multiply-adds per output, that pass
costs more than the conv (shufflenet's 112-channel stride-2 conv: 1.5 ms against onnxruntime's
0.1). Here the padded input of one channel is computed inside the parallel channel loop, into a
small buffer that stays in L1, and read without bounds checks:

    parallel for (batch, channel):
      pad[y, phase, q] = x[y - top, q * stride + phase - left] if inside else 0
                           (vectorized over q; masked contiguous loads: te.if_then_else)
      for multiplier, row, width block:
        acc[:] = sum over (ry, rx): pad[row * sh + ry * dh, phase(rx), x + shift(rx)] * w[o, 0, ry, rx]
        out[...] = epilogue(acc[:])            (vectorized over the output width)

With a column stride the padded row is split into `stride` column phases (column
q * stride + phase), as ops/nn/conv2d.py does for strided convs, so the conv's reads are
contiguous vectors (knob split_phases; without it each tap reads x * stride as one contiguous
span and a shuffle, see `_space`).

Knobs (`_space`): max_width (output columns per register tile), rows (output rows per tile),
split_phases.
"""
from __future__ import annotations

from functools import reduce

from tensorkiln import te, tir
from tensorkiln.ops import tags
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace
from tensorkiln.sdk.schedules import can_parallel, divisor_at_most, fuse_for_attach, inline_injective, vector_lanes
from tensorkiln.sdk.schedules.fused import find_anchor, output_of

from ..host import cpu_facts
from .anchors import accumulator

__all__ = ["depthwise_strategies", "DEPTHWISE_PAD_TAG"]

DEFAULT_TILE_WIDTH = 32
"""Default output columns per register tile (see `_space`)."""

DEPTHWISE_PAD_TAG = "depthwise_pad"
DEPTHWISE_ROWS_TAG = "depthwise_pad_rows"
"""The padded rows a column-phase split reads (not an injective tag either)."""
"""The per-channel padded (and phase-split) input; not an injective tag, so it is not inlined."""


def _attrs_ok(call) -> "bool | str":
    attrs = call.attrs
    data_type, weight_type = call.args[0].checked_type, call.args[1].checked_type
    if attrs.data_layout != "NCHW" or attrs.kernel_layout != "OIHW":
        return f"layouts {attrs.data_layout}/{attrs.kernel_layout}: only NCHW/OIHW"
    channels = int(data_type.shape[1])
    if attrs.groups != channels or channels == 1 or int(weight_type.shape[1]) != 1:
        return "not a depthwise conv (groups == input channels)"
    if data_type.dtype != "float32" or weight_type.dtype != "float32" or attrs.out_dtype not in ("", None, "float32"):
        return "only float32"
    return True


def _geometry(data_shape, weight_shape, attrs, lanes: int, split_phases: bool = True) -> dict:
    batch, channels, height, width = (int(d) for d in data_shape)
    out_channels, _, kernel_h, kernel_w = (int(d) for d in weight_shape)
    (stride_h, stride_w), (dil_h, dil_w) = attrs.strides, attrs.dilation
    top, left, bottom, right = attrs.padding
    out_h = (height + top + bottom - ((kernel_h - 1) * dil_h + 1)) // stride_h + 1
    out_w = (width + left + right - ((kernel_w - 1) * dil_w + 1)) // stride_w + 1
    rows = (out_h - 1) * stride_h + (kernel_h - 1) * dil_h + 1
    phases = stride_w if split_phases else 1
    columns = (out_w - 1) + ((kernel_w - 1) * dil_w) // stride_w + 1 if split_phases else \
        (out_w - 1) * stride_w + (kernel_w - 1) * dil_w + 1
    columns = -(-columns // lanes) * lanes  # whole vectors: the extra columns are zeros no output reads
    return dict(batch=batch, channels=channels, height=height, width=width, out_channels=out_channels,
                kernel=(kernel_h, kernel_w), strides=(stride_h, stride_w), dilation=(dil_h, dil_w),
                top=top, left=left, out=(out_h, out_w), pad_shape=(rows, phases, columns))


def depthwise_nchw(data: te.Tensor, weight: te.Tensor, attrs, lanes: int, split_phases: bool = True) -> te.Tensor:
    """out[b, o, y, x] = sum_{ry, rx} pad[b, o // m, y*sh + ry*dh, (rx*dw) % sw, x + (rx*dw) // sw] * w[o, 0, ry, rx],
    m = O / C, where pad[b, c, r, p, q] = data[b, c, r - top, q * sw + p - left] (0 outside)."""
    g = _geometry(data.shape, weight.shape, attrs, lanes, split_phases)
    top, left = g["top"], g["left"]
    height, width = g["height"], g["width"]
    stride_h, stride_w = g["strides"]
    dil_h, dil_w = g["dilation"]
    multiplier = g["out_channels"] // g["channels"]
    rows, phases, columns = g["pad_shape"]

    def padded(b, c, r, column):
        row, column = r - top, column - left
        inside = reduce(tir.And, (row >= 0, row < height, column >= 0, column < width))
        return te.if_then_else(inside, data[b, c, row, column], te.const(0.0, data.dtype))
    if phases == 1:
        pad = te.compute((g["batch"], g["channels"], rows, 1, columns), lambda b, c, r, p, q: padded(b, c, r, q),
                         name="T_depthwise_pad", tag=DEPTHWISE_PAD_TAG)
    else:
        # the padded rows first (contiguous masked loads), then their column phases (unmasked strided
        # loads: a span load and a shuffle). Split in one step, the masked strided loads become
        # gathers: LLVM narrows their mask to the lanes the shuffle keeps, then scalarizes the load.
        rows_padded = te.compute((g["batch"], g["channels"], rows, columns * phases), padded,
                                 name="T_depthwise_pad_rows", tag=DEPTHWISE_ROWS_TAG)
        pad = te.compute((g["batch"], g["channels"], rows, phases, columns),
                         lambda b, c, r, p, q: rows_padded[b, c, r, q * phases + p], name="T_depthwise_pad",
                         tag=DEPTHWISE_PAD_TAG)
    ry = te.reduce_axis((0, g["kernel"][0]), name="ry")
    rx = te.reduce_axis((0, g["kernel"][1]), name="rx")

    def body(b, o, y, x):
        offset = rx * dil_w if dil_w != 1 else rx
        row = (y * stride_h if stride_h != 1 else y) + (ry * dil_h if dil_h != 1 else ry)
        channel = o // multiplier if multiplier != 1 else o
        if phases == 1:  # stride 1, or a strided read (x * sw: one span load and a shuffle)
            value = pad[b, channel, row, 0, (x * stride_w if stride_w != 1 else x) + offset]
        else:
            value = pad[b, channel, row, offset % stride_w, x + offset // stride_w]
        return te.sum(value * weight[o, 0, ry, rx], axis=[ry, rx])
    out_h, out_w = g["out"]
    return te.compute((g["batch"], g["out_channels"], out_h, out_w), body, name="T_conv2d",
                      tag=tags.DEPTHWISE_CONV2D_NCHW,
                      attrs={"strides": tuple(attrs.strides), "dilation": tuple(attrs.dilation),
                             "groups": attrs.groups, "data_layout": "NCHW", "kernel_layout": "OIHW",
                             "multiplier": multiplier})


def _compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return depthwise_nchw(data, weight, attrs, vector_lanes(target, data.dtype), config["split_phases"])


def _schedule(outputs, target, config):
    s = te.create_schedule([t.op for t in outputs])
    inline_injective(s)
    anchor = find_anchor(list(outputs))
    output = output_of(anchor, list(outputs))
    (pad,) = [t for t in anchor.op.input_tensors if t.op.tag == DEPTHWISE_PAD_TAG]
    acc, output = accumulator(s, anchor, output)
    multiplier = anchor.op.attrs["multiplier"]
    lanes = vector_lanes(target, acc.dtype)
    _, _, out_h, out_w = (int(d) for d in output.shape)
    out = s[output]
    batch, channel, row, column = out.op.axis
    channel_outer, channel_inner = out.split(channel, factor=multiplier)
    row_block = divisor_at_most(out_h, config["rows"])
    width_block = divisor_at_most(out_w, config["max_width"])
    row_outer, row_inner = out.split(row, factor=row_block)
    width_outer, width_inner = out.split(column, factor=width_block)
    out.reorder(batch, channel_outer, channel_inner, row_outer, width_outer, row_inner, width_inner)
    fused = fuse_for_attach(out, [batch, channel_outer])
    if can_parallel(target):
        out.parallel(fused)
    if width_block > 1:
        out.vectorize(width_inner)
    s[pad].compute_at(out, fused)
    pad_stage = s[pad]
    *_, pad_phase, pad_columns = pad_stage.op.axis
    # the columns the conv reads (all phases): one vector op per padded row, no tail guard
    _, _, read_columns = _pad_region(anchor, out_w)
    block = read_columns if read_columns <= 4 * lanes else divisor_at_most(read_columns, lanes)
    _, pad_vector = pad_stage.split(pad_columns, factor=block)
    pad_stage.vectorize(pad_vector)
    pad_stage.unroll(pad_phase)
    for producer in pad.op.input_tensors:
        if producer.op.tag == DEPTHWISE_ROWS_TAG:
            s[producer].compute_at(out, fused)
            *_, row_columns = s[producer].op.axis
            extent = read_columns * 2 if read_columns * 2 <= 8 * lanes else lanes
            _, row_vector = s[producer].split(row_columns, factor=divisor_at_most(
                int(producer.shape[3]), extent) if extent == lanes else extent)
            s[producer].vectorize(row_vector)
    s[acc].compute_at(out, width_outer)
    stage = s[acc]
    b, o, y, x = stage.op.axis
    ry, rx = stage.op.reduce_axis
    stage.reorder(b, o, ry, rx, y, x)
    stage.unroll(rx)
    stage.unroll(y)
    if width_block > 1:
        stage.vectorize(x)
    return s


def _pad_region(anchor: te.Tensor, out_w: int) -> tuple[int, int, int]:
    """(rows, phases, columns) of the padded input one channel's outputs read: the columns are the
    output width plus the widest tap shift (x + (rx * dw) // sw reads up to out_w - 1 + shift)."""
    (pad,) = [t for t in anchor.op.input_tensors if t.op.tag == DEPTHWISE_PAD_TAG]
    rows, phases, columns = (int(d) for d in pad.shape[2:])
    (rx,) = [axis for axis in anchor.op.reduce_axis if axis.var.name == "rx"]
    stride_w, dil_w = anchor.op.attrs["strides"][1], anchor.op.attrs["dilation"][1]
    if phases == 1:
        return rows, phases, min(columns, (out_w - 1) * stride_w + (int(rx.dom.extent) - 1) * dil_w + 1)
    shift = ((int(rx.dom.extent) - 1) * dil_w) // stride_w
    return rows, phases, min(columns, out_w + shift)


def _space(workload, target) -> TuningSpace:
    lanes = vector_lanes(target, "float32")
    # Column phases (padded rows, then their phases) measured best or tied on shufflenet's stride-2
    # depthwise layers (1 thread; 56/28/14-wide inputs): AVX2 0.106/0.045/0.017 ms against 0.217/0.042/
    # 0.023 without; AVX-512 0.064/0.027/0.012 against 0.048/0.026/0.025 (the one loss: the 56-wide).
    split = True
    # Output columns per tile (the largest divisor of the output width up to max_width, one vector of
    # that many lanes); two rows per tile give the FMA units two independent chains of 9 taps.
    # With AVX-512's lane masks: up to 32, a whole row of the 7- to 28-wide outputs of light CNNs in
    # 2 accumulators (measured on shufflenet's depthwise layers, 1 thread: 32 x 2 best or within noise
    # of the best of the grid on each, 10-25% faster than 2 vectors x 1 row).
    # Without them (AVX2) at most one vector: a 28-wide tile is a vector of 28 lanes, which LLVM
    # builds and takes apart in 128-bit pieces (the 28x28x136 kernel: 217 vinsert/vextract and 659
    # xmm operands against 89 and 245 with 7 lanes, the same 72 FMAs). Measured on Zen 1, shufflenet,
    # one process alternating: its 28x28x136 depthwise layer 0.385 -> 0.249 ms at 1 thread (0.171 ->
    # 0.114 at 2), 14x14x272 0.175 -> 0.125 ms, the model 0.94x as long at 1 and 2 threads
    # (-mcpu=haswell 0.93x); a MobileNet-like graph (benchmarks/real_graphs.py depthwise_cnn: 112..7
    # wide) even.
    width = max(lanes, min(4 * lanes, DEFAULT_TILE_WIDTH)) if cpu_facts(target).vector_bits >= 512 else lanes
    return TuningSpace((Knob("max_width", tuple(sorted({lanes, 2 * lanes, 4 * lanes, width})), width),
                        Knob("rows", (1, 2, 4), 2), Knob("split_phases", (False, True), split)))



def depthwise_strategies(target) -> list[OpImplementation]:
    return [OpImplementation("cpu_llvm.depthwise_nchw", ("nn.conv2d",), _schedule, compute=_compute,
                             space=_space, condition=lambda call, target: _attrs_ok(call), priority=10)]
