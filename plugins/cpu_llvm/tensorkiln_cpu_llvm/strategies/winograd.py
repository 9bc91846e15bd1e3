"""strategies/winograd.py: cpu_llvm's schedule of nn.conv2d_winograd (3x3 stride-1 NHWC convs, F(m x m, 3 x 3)).

The compute (core ops/nn/winograd.py) has three parts; each is one parallel loop nest,
vectorized over channels, which are contiguous in NHWC:

    parallel for tile p:                                  the data transform
      tiles[p] = padded input tile (a x a x C)
      for channel vector c:
        rows = B^T tile          (a x a vectors, unrolled: the select on the row folds)
        data[:, :, p, c] = rows B
    parallel for (e, f) fused, for k.outer, for p.outer:  a^2 GEMMs over the input channels
      acc[rows][nb] = 0                                   (registers: rows x nb / lanes vectors)
      for rc: for row (unrolled): acc[row][:] += data[e, f, p, rc] (broadcast) * U[e, f, k.outer, rc, :]
      product[e, f, p, k] = acc
    parallel for tile row: for tile column: for channel vector k:   the inverse transform + epilogue
      inverse = A^T product[.., p, k] A      (m x m vectors, unrolled)
      out[n, y, x, k] = epilogue(inverse)    (bias, relu, residual add fused)

The register tile of the GEMM is `rows` tiles x nb output channels, nb the weight's block (two
vectors: cpu_llvm's graph pass packs U so, winograd_weights.py); `rows` is a knob (default 8 rows
with 32 vector registers, 6 with 16), taken as a divisor of the tile count where one is near.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.sdk.schedules import can_parallel, divisor_at_most, schedule_injective_stage, vector_lanes

from ..host import cpu_facts

__all__ = ["apply_conv2d_winograd", "default_rows", "row_candidates"]


def default_rows(target) -> int:
    """GEMM rows (tiles) per register tile, 2 accumulator vectors each: 8 with 32 vector registers, 6 with 16.

    Measured on one Zen 5 core, resnet50's 3x3 convs (14x14 256 -> 256 F(4x4), 7x7 512 -> 512
    F(2x2), both 16 tiles): 8 rows 0.65 / 1.02 ms, 12 rows 1.16 / 2.05 ms, 6 rows 0.69 / 1.42 ms."""
    return min(8, (cpu_facts(target).vector_registers - 4) // 2)


def row_candidates(target) -> tuple[int, ...]:
    most = (cpu_facts(target).vector_registers - 4) // 2   # two weight vectors, the broadcast and a spare
    return tuple(sorted({r for r in (4, 6, 8, 12, 14) if r <= most} | {default_rows(target)}))


def _stages(anchor: te.Tensor) -> dict[str, te.Tensor]:
    """The compute's stages by role ("tiles" ... "inverse"), found by walking up from the output."""
    found, stack = {}, [anchor]
    while stack:
        tensor = stack.pop()
        for producer in tensor.op.input_tensors:
            role = (getattr(producer.op, "attrs", None) or {}).get("winograd")
            if role and role not in found:
                found[role] = producer
                stack.append(producer)
    return found


def _rows_for(count: int, rows: int) -> int:
    """`rows`, or a divisor of the tile count within two of it (no tail block)."""
    for candidate in (rows, rows - 1, rows + 1, rows - 2, rows + 2):
        if candidate >= 1 and count % candidate == 0:
            return candidate
    return rows


def _parallel(stage, axis, target) -> None:
    if can_parallel(target):
        stage.parallel(axis)


def _schedule_data_transform(s: te.Schedule, stages, lanes: int, target) -> None:
    data = s[stages["data"]]
    e, f, p, c = data.op.axis
    channel_outer, channel_inner = data.split(c, factor=divisor_at_most(int(stages["data"].shape[3]), lanes))
    data.reorder(p, channel_outer, e, f, channel_inner)
    data.unroll(f)   # the row of B^T the select picks: unrolled, each copy is its row's few adds
    data.vectorize(channel_inner)
    _parallel(data, p, target)
    tiles = s[stages["tiles"]]
    tiles.compute_at(data, p)
    _, tile_inner = tiles.split(tiles.op.axis[3], factor=divisor_at_most(int(stages["tiles"].shape[3]), lanes))
    tiles.vectorize(tile_inner)
    rows = s[stages["rows"]]
    rows.compute_at(data, channel_outer)
    e, j, _, c = rows.op.axis
    rows.reorder(j, e)
    rows.unroll(e)
    rows.vectorize(c)


def _schedule_product(s: te.Schedule, stages, block: int, config: dict, target) -> None:
    tensor = stages["product"]
    acc = s.cache_write(tensor, "local")
    product = s[tensor]
    e, f, p, k = product.op.axis
    rows = _rows_for(int(tensor.shape[2]), config.get("rows", default_rows(target)))
    k_outer, k_inner = product.split(k, factor=block)
    p_outer, p_inner = product.split(p, factor=rows)
    product.reorder(e, f, k_outer, p_outer, p_inner, k_inner)
    _parallel(product, product.fuse(e, f), target)
    product.vectorize(k_inner)
    s[acc].compute_at(product, p_outer)
    stage = s[acc]
    _, _, p, k = stage.op.axis
    (rc,) = stage.op.reduce_axis
    stage.reorder(rc, p, k)
    stage.unroll(p)
    stage.vectorize(k)


def _schedule_inverse(s: te.Schedule, stages, carrier: te.Tensor, tile_size: int, lanes: int, target) -> None:
    """Tile the carrier (the output, or the anchor when the epilogue cannot take the tiles) by the
    transform's m x m blocks and compute the inverse transform per tile and channel vector."""
    out = s[carrier]
    image, y, x, k = out.op.axis
    y_outer, y_inner = out.split(y, factor=tile_size)
    x_outer, x_inner = out.split(x, factor=tile_size)
    k_outer, k_inner = out.split(k, factor=divisor_at_most(int(carrier.shape[3]), lanes))
    out.reorder(image, y_outer, x_outer, k_outer, y_inner, x_inner, k_inner)
    out.vectorize(k_inner)
    _parallel(out, y_outer, target)
    inverse_rows, inverse = s[stages["inverse_rows"]], s[stages["inverse"]]
    inverse_rows.compute_at(out, k_outer)
    inverse.compute_at(out, k_outer)
    v, f, _, channel = inverse_rows.op.axis
    inverse_rows.reorder(f, v)
    inverse_rows.unroll(v)          # the row of A^T its select picks
    inverse_rows.vectorize(channel)
    _, _, w, channel = inverse.op.axis
    inverse.unroll(w)
    inverse.vectorize(channel)


def apply_conv2d_winograd(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config: dict) -> None:
    stages = _stages(anchor)
    lanes = vector_lanes(target, anchor.dtype)
    tile_size = int(anchor.op.attrs["tile_size"])
    _schedule_data_transform(s, stages, lanes, target)
    weight = next(t for t in stages["product"].op.input_tensors if t.op is not stages["data"].op)
    _schedule_product(s, stages, int(weight.shape[4]), config, target)
    if output.op is not anchor.op and tuple(output.shape) == tuple(anchor.shape):
        s[anchor].compute_inline()   # a gather from the tiles: the epilogue reads them directly
        _schedule_inverse(s, stages, output, tile_size, lanes, target)
        return
    _schedule_inverse(s, stages, anchor, tile_size, lanes, target)
    if output.op is not anchor.op:
        schedule_injective_stage(s, output, target)
