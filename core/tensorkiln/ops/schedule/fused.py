"""ops/schedule/fused.py: the default schedule of a fused group, and the per-family entry points.

A fused group (what graph fusion produces) is a small te DAG: injective producers, at
most one anchor (conv2d, dense, pool, a reduction, softmax, ...) and an elementwise
epilogue ending in the group's outputs. `schedule_fused`:

1. inlines every injective intermediate stage (bias add, relu, casts, padding the
   anchor schedule does not keep);
2. picks the anchor: the stage whose tag comes first in `tags.ANCHOR_TAGS`;
3. applies the anchor's schedule with the output as its tile carrier, so the anchor's
   accumulator is computed at the output tile and intermediates never reach memory;
4. schedules every remaining root stage (other outputs, leftover reductions).
"""
from __future__ import annotations

from typing import Sequence

from ... import te
from .. import tags
from .anchors import ANCHOR_SCHEDULES
from .common import as_outputs, inline_injective, resolve_target, schedule_injective_stage, schedule_reduce_stage

__all__ = ["schedule_fused", "find_anchor", "schedule_injective", "schedule_reduce", "schedule_softmax",
           "schedule_pool", "schedule_conv2d_nchw", "schedule_dense", "schedule_norm"]


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


def _output_of(anchor: te.Tensor, outputs: list[te.Tensor]) -> te.Tensor:
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


def schedule_fused(outputs, target) -> te.Schedule:
    """Schedule a fused group: inline injective stages, schedule the anchor, attach the epilogue.

        conv = ops.nn.conv2d_nchw(data, weight, padding=(1, 1, 1, 1))
        out = relu(conv + bias + residual)                       # elementwise epilogue
        s = schedule_fused([out], tk.target("llvm"))             # conv accumulates per output tile
    """
    outputs = as_outputs(outputs)
    target = resolve_target(target)
    s = te.create_schedule([t.op for t in outputs])
    anchor = find_anchor(outputs)
    inline_injective(s, keep=[anchor] + _kept_producers(anchor) if anchor is not None else [])
    if anchor is not None:
        output = _output_of(anchor, outputs)
        ANCHOR_SCHEDULES[anchor.op.tag](s, anchor, output, target)
        done = {id(output.op), id(anchor.op)}
    else:
        done = set()
    _schedule_rest(s, outputs, done, target)
    return s


def _kept_producers(anchor: te.Tensor) -> list[te.Tensor]:
    """Producers the anchor schedule keeps as stages (padded inputs, packed weights)."""
    keep_tags = {"injective.pad", "dense_pack"}
    if anchor.op.tag not in (tags.CONV2D_NCHW, tags.DEPTHWISE_CONV2D_NCHW, tags.GROUP_CONV2D_NCHW, tags.CONV2D_NHWC,
                             tags.DENSE, tags.BATCH_MATMUL, tags.POOL):
        return []
    return [t for t in anchor.op.input_tensors if t.op.tag in keep_tags]


def _schedule_rest(s: te.Schedule, outputs: list[te.Tensor], done: set[int], target) -> None:
    """Outputs and root reductions the anchor schedule did not place."""
    for stage in list(s.stages):
        op = stage.origin_op
        if id(op) in done or id(stage.op) in done or stage.attach_type != "root" or stage.relations \
                or stage.iter_attrs:
            continue
        tensor = stage.op.output(0)
        if isinstance(stage.op.body, te.Reduce):
            schedule_reduce_stage(s, tensor, target)
        elif stage.is_output:
            schedule_injective_stage(s, tensor, target)


def schedule_injective(outs, target) -> te.Schedule:
    """Injective outputs: innermost axis vectorized by a lanes divisor, the rest fused and parallel."""
    return schedule_fused(outs, target)


def schedule_reduce(outs, target) -> te.Schedule:
    """Reductions: data axes fused and parallel, reduction inside (vectorized over a contiguous data axis)."""
    return schedule_fused(outs, target)


def schedule_softmax(outs, target) -> te.Schedule:
    """softmax / log_softmax: rows parallel, max and exp-sum computed per row, the row vectorized."""
    return schedule_fused(outs, target)


def schedule_pool(outs, target) -> te.Schedule:
    """Pooling: (batch, channel) parallel, padded plane per channel, output width vectorized."""
    return schedule_fused(outs, target)


def schedule_conv2d_nchw(outs, target) -> te.Schedule:
    """NCHW conv: output-channel x width-vector tiles, local accumulator, small kernel loops unrolled."""
    return schedule_fused(outs, target)


def schedule_dense(outs, target) -> te.Schedule:
    """dense / batch_matmul: row block x column-vector tiles over a packed weight, local accumulator."""
    return schedule_fused(outs, target)


def schedule_norm(outs, target) -> te.Schedule:
    """layer_norm / lrn: rows parallel, statistics computed per row."""
    return schedule_fused(outs, target)
