"""ops/tags.py: the pattern tags every compute carries (`te.compute(..., tag=...)`).

Schedules find their anchor stage by tag, as TOPI does: the injective family is
inlined, a reduction or an out-elementwise-fusable op (conv2d, dense, pool) anchors
a fused group.
"""
from __future__ import annotations

__all__ = ["ELEMWISE", "BROADCAST", "INJECTIVE", "COMM_REDUCE", "CONV2D_NCHW", "DEPTHWISE_CONV2D_NCHW",
           "GROUP_CONV2D_NCHW", "CONV2D_NHWC", "CONV2D_NCHWC", "CONV2D_WINOGRAD_NHWC", "WINOGRAD_TRANSFORM",
           "WINOGRAD_PRODUCT", "CONV2D_TRANSPOSE_NCHW", "DENSE", "BATCH_MATMUL",
           "POOL", "GLOBAL_POOL", "SOFTMAX", "LOG_SOFTMAX", "NORM", "SCAN", "SORT", "is_injective", "ANCHOR_TAGS"]

ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
COMM_REDUCE = "comm_reduce"
CONV2D_NCHW = "conv2d_nchw"
DEPTHWISE_CONV2D_NCHW = "depthwise_conv2d_nchw"
GROUP_CONV2D_NCHW = "group_conv2d_nchw"
CONV2D_NHWC = "conv2d_nhwc"      # every NHWC conv2d (groups and depthwise included)
CONV2D_NCHWC = "conv2d_NCHWc"    # blocked NCHW{x}c data (groups 1), ops/nn/conv2d_nchwc.py
CONV2D_WINOGRAD_NHWC = "conv2d_winograd_nhwc"   # nn.conv2d_winograd's output, ops/nn/winograd.py
WINOGRAD_TRANSFORM = "winograd.transform"       # its data and inverse transform stages (kept, not inlined)
WINOGRAD_PRODUCT = "winograd.product"           # its batched GEMM over input channels
CONV2D_TRANSPOSE_NCHW = "conv2d_transpose_nchw"
DENSE = "dense"
BATCH_MATMUL = "batch_matmul"
POOL = "pool"
GLOBAL_POOL = "global_pool"
SOFTMAX = "softmax_output"
LOG_SOFTMAX = "log_softmax_output"
NORM = "norm"           # layer_norm / lrn reductions
SCAN = "scan"           # cumsum
SORT = "sort"           # topk ranks

_INJECTIVE_TAGS = (ELEMWISE, BROADCAST, INJECTIVE)

ANCHOR_TAGS = (CONV2D_NCHW, DEPTHWISE_CONV2D_NCHW, GROUP_CONV2D_NCHW, CONV2D_NHWC, CONV2D_NCHWC, CONV2D_WINOGRAD_NHWC,
               CONV2D_TRANSPOSE_NCHW,
               DENSE, BATCH_MATMUL, POOL, GLOBAL_POOL, SOFTMAX, LOG_SOFTMAX, NORM, SCAN, SORT, COMM_REDUCE)
"""Tags of stages that anchor a fused group, most specific first (the dispatch order)."""


def is_injective(tag: str) -> bool:
    """True for elemwise, broadcast and injective stages (including sub-tags like "elemwise.pad")."""
    return tag.split(".")[0] in _INJECTIVE_TAGS
