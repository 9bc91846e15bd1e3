"""tensorkiln.ops: te computes for every graph op (TOPI-like) and the core's naive default schedule.

    import tensorkiln.ops                     # attaches the computes to the registry
    op = tensorkiln.graph.get_op("nn.conv2d")
    out = op.compute([data, weight], attrs, out_type)          # te.Tensor (list for split/topk)
    s = tensorkiln.ops.naive_schedule([out])                   # correct, serial, scalar

Layout: elementwise / broadcast / transform / reduction / image (families of computes),
nn/ (conv2d, dense, pooling, softmax, norm), tags, schedule/ (the naive default) and
registration (the one place mapping op names to computes). Fast schedules are the
targets' business: their `tensorkiln_strategies` hook (tensorkiln.sdk.strategy); the
compiler picks among them (tensorkiln.compiler.strategy).
"""
from . import nn, schedule, tags
from .registration import COMPUTES, register_all, uncovered_ops
from .schedule import naive_schedule

register_all()

__all__ = ["nn", "schedule", "tags", "COMPUTES", "register_all", "uncovered_ops", "naive_schedule"]
