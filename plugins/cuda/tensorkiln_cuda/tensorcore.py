"""tensorcore.py: the cuda strategy that puts float16 dense layers on tensor cores (wmma).

nn.dense on float16 operands accumulates in float32 (`T_dense`, the core's compute) and casts
back; when M, N and K are multiples of 16 this schedule makes each block one warp on one
16x16 output tile: the float32 tile is a __shared__ array that `cuda_wmma_16x16x16_f16_nt`
accumulates into over K (weight rows are (j, k): the transposed form), then the warp's 32
threads apply the cast and any fused epilogue (bias, relu) element by element after the barrier
te's lowering inserts behind a shared producer.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.ops import tags
from tensorkiln.sdk import OpImplementation
from tensorkiln.sdk.schedules.fused import find_anchor
from tensorkiln.sdk.schedules.gpu import schedule_gpu

from .intrinsics import WMMA_NT, cuda_intrinsics

__all__ = ["tensorcore_strategies", "TILE"]

TILE = 16
WARP = 32


def _dense_on_tensor_cores(call, target):
    """True for a 2-D float16 dense whose M, N, K are multiples of 16; else the reason."""
    data, weight = (arg.checked_type for arg in call.args[:2])
    if str(data.dtype) != "float16" or str(weight.dtype) != "float16":
        return f"operands_are_{data.dtype}_{weight.dtype}_not_float16"
    if len(data.shape) != 2:
        return f"data_has_{len(data.shape)}_dims_not_2"
    extents = (int(data.shape[0]), int(weight.shape[0]), int(data.shape[1]))
    if any(extent % TILE for extent in extents):
        return f"M_N_K_{'x'.join(map(str, extents))}_not_multiples_of_{TILE}"
    if getattr(call.attrs, "out_dtype", "") not in ("", None, "float16"):
        return f"out_dtype_{call.attrs.out_dtype}"
    return True


def _schedule(outputs, target, config):
    outputs = list(outputs)
    anchor = find_anchor(outputs)
    if anchor is None or len(outputs) != 1 or anchor.op is outputs[0].op or anchor.op.tag != tags.DENSE:
        return schedule_gpu(outputs, target, config)
    (out,) = outputs
    s = te.create_schedule(out.op)
    for stage in s.stages:   # the cast and epilogue read the tile element by element: inline them
        if not stage.is_output and stage.op is not anchor.op and not isinstance(stage.op.body, te.Reduce):
            stage.compute_inline()
    stage = s[out]
    rows, columns = stage.op.axis
    row_block, row = stage.split(rows, factor=TILE)
    column_block, column = stage.split(columns, factor=TILE)
    stage.reorder(row_block, column_block, row, column)
    stage.bind(row_block, te.thread_axis("blockIdx.y"))
    stage.bind(column_block, te.thread_axis("blockIdx.x"))
    _, lane = stage.split(stage.fuse(row, column), factor=WARP)
    stage.bind(lane, te.thread_axis("threadIdx.x"))
    tile = s[anchor]
    tile.set_scope("shared")
    tile.compute_at(stage, column_block)
    # split by the tile although the region is one tile: tensorize matches the extents of the
    # split axes (bound inference makes the outer ones 1 once the tile is attached)
    i_outer, i = tile.split(tile.op.axis[0], factor=TILE)
    j_outer, j = tile.split(tile.op.axis[1], factor=TILE)
    k_block, k_inner = tile.split(tile.op.reduce_axis[0], factor=TILE)
    tile.reorder(i_outer, j_outer, k_block, i, j, k_inner)
    tile.tensorize(i, next(x for x in cuda_intrinsics(target) if x.name == WMMA_NT))
    return s


def tensorcore_strategies(target) -> list[OpImplementation]:
    return [OpImplementation("cuda.dense_wmma", ("nn.dense",), _schedule, condition=_dense_on_tensor_cores,
                             priority=10)]
