"""ops/schedule/naive.py: the naive default schedule of a fused group (see the package docstring)."""
from __future__ import annotations

from ... import te
from .. import tags

__all__ = ["naive_schedule"]


def naive_schedule(outputs, target=None) -> te.Schedule:
    """Inline every injective intermediate stage; everything else runs at the root, serially.

        s = naive_schedule([out])          # correct on any target that runs plain loops
    """
    outputs = [outputs] if isinstance(outputs, te.Tensor) else list(outputs)
    s = te.create_schedule([t.op for t in outputs])
    for stage in list(s.stages):
        if stage.is_output or not isinstance(stage.op, te.ComputeOp) or stage.feeds_extern:
            continue
        if tags.is_injective(stage.op.tag) and not isinstance(stage.op.body, te.Reduce):
            stage.compute_inline()
    return s
