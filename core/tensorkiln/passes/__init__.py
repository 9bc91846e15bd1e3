"""Graph passes and the pass manager.

Pipelines are data: `GRAPH_PIPELINE` lists the passes `tk.compile` runs, in order.
"""
from . import fuse_ops as _fuse_ops  # noqa: F401  (registers the pass)
from .fuse_ops import fuse_ops, group_each_op
from .manager import (
    Pass, PassContext, PassInstrument, PassManager, PassTimingInstrument, PrintIRInstrument, Sequential,
    SkippedPass, VerifyInstrument, current_pass_context, get_pass, register_pass, registered_passes,
)

# Ordering: simplification and folding first so fusion sees the final graph; fusion last
# because every later stage works on fused groups.
# fuse_ops is not listed: the compiler runs it after placement (a group never mixes targets).
GRAPH_PIPELINE: tuple[str, ...] = ()

__all__ = [
    "Pass", "PassContext", "PassInstrument", "PassManager", "PassTimingInstrument", "PrintIRInstrument",
    "Sequential", "SkippedPass", "VerifyInstrument", "current_pass_context", "get_pass", "register_pass",
    "registered_passes", "fuse_ops", "group_each_op", "GRAPH_PIPELINE",
]
