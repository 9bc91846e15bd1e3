"""Default schedules, TOPI style. They read only `target.capabilities` (vector width, threads).

Each family entry point (`schedule_conv2d_nchw`, ...) dispatches through `schedule_fused`,
which finds the group's anchor by tag, so a family schedule also handles its fused epilogue.
"""
from .common import schedule_injective_stage, schedule_reduce_stage, vector_lanes
from .fused import (find_anchor, schedule_conv2d_nchw, schedule_dense, schedule_fused, schedule_injective,
                    schedule_norm, schedule_pool, schedule_reduce, schedule_softmax)

__all__ = ["schedule_fused", "find_anchor", "schedule_injective", "schedule_reduce", "schedule_softmax",
           "schedule_pool", "schedule_conv2d_nchw", "schedule_dense", "schedule_norm",
           "schedule_injective_stage", "schedule_reduce_stage", "vector_lanes"]
