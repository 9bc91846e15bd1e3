"""ops/strategy.py: which schedule a fused group gets on a target.

`schedule_for` is what the registry's `schedule` slot holds for every op and what the
compiler calls for each fused group (`compiler/lower_groups.py`). It picks, in order:

1. a plugin rule: the `tensorkiln_schedule_rules(target)` hook returns dicts
   {anchor tag or op name: rule(outputs, target) -> te.Schedule}; the first rule whose
   key is the group's anchor tag (conv2d_nchw, dense, ...; "injective" for a group
   without anchor) or one of the group's op names wins;
2. the default by capabilities: GPU-style schedules (`schedule.gpu.schedule_gpu`) for a
   target with thread axes and a work-group limit, otherwise the CPU-style
   `schedule_fused` (parallel loops, vectors). Never by target name.

Tuned records, where the tuner supplies them, take precedence over both in the compiler.
"""
from __future__ import annotations

from typing import Callable, Sequence

from .. import te
from .schedule.common import as_outputs, resolve_target
from .schedule.fused import find_anchor, schedule_fused
from .schedule.gpu import has_threads, schedule_gpu

__all__ = ["schedule_for", "default_schedule", "plugin_rule", "group_keys"]

INJECTIVE_KEY = "injective"
"""Rule key that matches a group without an anchor (only elementwise / broadcast / injective stages)."""


def schedule_for(outputs, target, ops: Sequence[str] = ()) -> te.Schedule:
    """The te.Schedule for `outputs` (te tensors of one fused group) on `target`.

    `ops` names the graph ops of the group (the compiler passes them) so a plugin rule can
    be keyed by op name; without them only anchor-tag keys match.

        s = schedule_for([out], tk.target("opencl"))   # blockIdx.x / threadIdx.x bound
    """
    outputs = as_outputs(outputs)
    target = resolve_target(target)
    rule = plugin_rule(outputs, target, ops)
    if rule is not None:
        return rule(outputs, target)
    return default_schedule(outputs, target)


def default_schedule(outputs, target) -> te.Schedule:
    """The core's default schedule: GPU style when the target has threads, CPU style otherwise."""
    if has_threads(target):
        return schedule_gpu(outputs, target)
    return schedule_fused(outputs, target)


def group_keys(outputs: Sequence[te.Tensor], ops: Sequence[str] = ()) -> list[str]:
    """Rule keys of a group, most specific first: the anchor's tag (or "injective"), then op names,
    those with the highest fusion pattern (the anchor op: nn.conv2d before add and nn.relu) first."""
    from ..graph.registry import get_op

    anchor = find_anchor(list(outputs))
    keys = [anchor.op.tag if anchor is not None else INJECTIVE_KEY]
    names = list(dict.fromkeys(ops))
    names.sort(key=lambda name: -int(get_op(name).pattern))  # stable: ties keep execution order
    keys.extend(name for name in names if name not in keys)
    return keys


def plugin_rule(outputs: Sequence[te.Tensor], target, ops: Sequence[str] = ()) -> Callable | None:
    """The plugin rule for this group on `target` (see the module docstring), or None."""
    from ..sdk.plugin_manager import registry
    from ..sdk.target import Target

    if not isinstance(target, Target):
        return None  # a bare capabilities object (tests): no plugin can have rules for it
    tables = [table for table in registry().call("tensorkiln_schedule_rules", target) if table]
    if not tables:
        return None
    for key in group_keys(outputs, ops):
        for table in tables:
            if key in table:
                return table[key]
    return None
