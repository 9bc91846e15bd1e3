"""sdk/schedules/fused.py: schedule a fused group around its anchor, with a table of anchor schedules.

A fused group (what graph fusion produces) is a small te DAG: injective producers, at
most one anchor (conv2d, dense, pool, a reduction, softmax, ...) and an elementwise
epilogue ending in the group's outputs. `schedule_fused`:

1. inlines every injective intermediate stage (bias add, relu, casts, padding the
   anchor schedule does not keep);
2. picks the anchor: the stage whose tag comes first in `tags.ANCHOR_TAGS`;
3. applies the target's schedule for the anchor's tag, `apply(s, anchor, output, target,
   config)`, with the output as its tile carrier, so the anchor's accumulator is
   computed at the output tile and intermediates never reach memory;
4. schedules every remaining root stage with the table's "reduce" / "injective"
   entries (other outputs, leftover reductions).

A target plugin supplies the table (its hardware knowledge); this module only walks the group.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, Sequence

from ... import te
from ...ops import tags
from .common import as_outputs, inline_injective, resolve_target

__all__ = ["schedule_fused", "find_anchor", "output_of", "REDUCE_KEY", "INJECTIVE_KEY"]

REDUCE_KEY = "reduce"
"""Table entry `apply(s, tensor, target, config)` for a reduction stage left at the root."""
INJECTIVE_KEY = "injective"
"""Table entry `apply(s, tensor, target, config)` for an output stage left at the root."""


def find_anchor(outputs: Sequence[te.Tensor]) -> te.Tensor | None:
    """The stage that anchors the group: first by `tags.ANCHOR_TAGS` order, then the one nearest the output."""
    found: list[te.Tensor] = []
    seen: set[int] = set()
    stack = [t.op for t in outputs]
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(id(op))
        found.append(op.output(0))
        stack.extend(t.op for t in op.input_tensors)
    best, rank = None, len(tags.ANCHOR_TAGS)
    for tensor in found:  # found is output-first, so ties keep the stage nearest the output
        tag = tensor.op.tag
        if tag in tags.ANCHOR_TAGS and tags.ANCHOR_TAGS.index(tag) < rank:
            best, rank = tensor, tags.ANCHOR_TAGS.index(tag)
    return best


def output_of(anchor: te.Tensor, outputs: list[te.Tensor]) -> te.Tensor:
    """The output the anchor feeds (itself when it is an output)."""
    for out in outputs:
        if out.op is anchor.op:
            return out
    for out in outputs:
        if _reads(out, anchor):
            return out
    return anchor


def _reads(tensor: te.Tensor, target: te.Tensor) -> bool:
    stack, seen = [tensor.op], set()
    while stack:
        op = stack.pop()
        if op is target.op:
            return True
        if id(op) in seen:
            continue
        seen.add(id(op))
        stack.extend(t.op for t in op.input_tensors)
    return False


def schedule_fused(outputs, target, table: Mapping[str, Callable], config: Mapping[str, Any] | None = None,
                   keep_tags: Iterable[str] = ("injective.pad",)) -> te.Schedule:
    """Schedule a fused group: inline injective stages, schedule the anchor, attach the epilogue.

    `table` maps anchor tags to `apply(s, anchor, output, target, config)` and has the
    REDUCE_KEY and INJECTIVE_KEY entries for root stages; `keep_tags` names producer tags the
    anchor schedules keep as stages (padded inputs, packed weights).

        s = schedule_fused([out], target, CPU_ANCHORS, config)   # conv accumulates per output tile
    """
    outputs = as_outputs(outputs)
    target = resolve_target(target)
    config = dict(config or {})
    s = te.create_schedule([t.op for t in outputs])
    anchor = find_anchor(outputs)
    if anchor is not None and anchor.op.tag not in table:
        anchor = None  # the table does not know it: its stage is scheduled as a plain reduction
    keep = [anchor] + _kept_producers(anchor, set(keep_tags)) if anchor is not None else []
    inline_injective(s, keep=keep)
    done: set[int] = set()
    if anchor is not None:
        output = output_of(anchor, outputs)
        table[anchor.op.tag](s, anchor, output, target, config)
        done = {id(output.op), id(anchor.op)}
    _schedule_rest(s, outputs, done, target, table, config)
    return s


def _kept_producers(anchor: te.Tensor, keep_tags: set[str]) -> list[te.Tensor]:
    """Producers the anchor schedule keeps as stages (padded inputs, packed weights)."""
    return [t for t in anchor.op.input_tensors if t.op.tag in keep_tags]


def _schedule_rest(s: te.Schedule, outputs: list[te.Tensor], done: set[int], target, table, config) -> None:
    """Outputs and root reductions the anchor schedule did not place."""
    for stage in list(s.stages):
        op = stage.origin_op
        if id(op) in done or id(stage.op) in done or stage.attach_type != "root" or stage.relations \
                or stage.iter_attrs or stage.is_extern:   # an extern stage runs its own loops
            continue
        tensor = stage.op.output(0)
        if isinstance(stage.op.body, te.Reduce):
            table[REDUCE_KEY](s, tensor, target, config)
        elif stage.is_output:
            table[INJECTIVE_KEY](s, tensor, target, config)
