"""ops/strategy.py: the default schedule of a fused group, chosen by its anchor stage's tag.

`schedule_for` is what the registry's `schedule` slot holds for every op; a target plugin's
schedule rules (tensorkiln_schedule_rules) and tuned records take precedence in the compiler.
"""
from __future__ import annotations

from .schedule.fused import schedule_fused

__all__ = ["schedule_for"]


def schedule_for(outputs, target):
    """The default te.Schedule for `outputs` (te tensors of one fused group) on `target`.

    Dispatch happens on the anchor's tag (conv2d_nchw, dense, pool, softmax_output, norm,
    comm_reduce, ...; see tags.ANCHOR_TAGS); a group without an anchor is scheduled as injective.
    """
    return schedule_fused(outputs, target)
