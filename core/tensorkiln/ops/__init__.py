"""tensorkiln.ops: te computes and default schedules for every graph op (TOPI-like).

    import tensorkiln.ops                     # attaches computes + schedules to the registry
    op = tensorkiln.graph.get_op("nn.conv2d")
    out = op.compute([data, weight], attrs, out_type)          # te.Tensor (list for split/topk)
    s = tensorkiln.ops.schedule_for([out], tk.target("llvm"))  # te.Schedule

Layout: elementwise / broadcast / transform / reduction / image (families of computes),
nn/ (conv2d, dense, pooling, softmax, norm), schedule/ (default schedules), tags,
strategy (schedule dispatch) and registration (the one place mapping op names to computes).
"""
from . import nn, schedule, tags
from .registration import COMPUTES, register_all, uncovered_ops
from .schedule import (find_anchor, schedule_conv2d_nchw, schedule_dense, schedule_fused, schedule_injective,
                       schedule_norm, schedule_pool, schedule_reduce, schedule_softmax)
from .strategy import schedule_for

register_all()

__all__ = ["nn", "schedule", "tags", "COMPUTES", "register_all", "uncovered_ops", "schedule_for", "schedule_fused",
           "find_anchor", "schedule_injective", "schedule_reduce", "schedule_softmax", "schedule_pool",
           "schedule_conv2d_nchw", "schedule_dense", "schedule_norm"]
