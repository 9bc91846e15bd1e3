"""sdk/schedules/generated.py: generated search spaces, in the manner of Ansor's sketches.

A template space (AutoTVM) is what a plugin's strategy declares: its own knobs, around
its own schedule. A *generated* space needs no strategy: it is derived from the group's
compute alone, so it exists for any group on any CPU-like target, including ops no
strategy knows, and it can find loop nests no template can express.

It lives in the schedule library (not in tensorkiln.tune, which searches it) because the
compiler applies a generated tuning record without importing the tuner. The sketch follows Ansor's CPU rules:

- **inline**: every injective stage that is not an output is inlined, or (knob `inline`
  = "keep_producers") the anchor's direct injective producers (padding, packing) stay
  stages of their own, computed at the root;
- **multi-level tiling** of the anchor (the stage that reduces: conv, dense, matmul, a
  pool, a reduction): each data axis in four levels `S0 S1 S2 S3`, each reduction axis in
  two `R0 R1`, ordered `S0 S1 R0 S2 R1 S3` (knobs `tile_<axis>`: the sizes of S1, S2, S3;
  `tile_<reduce axis>`: the size of R1);
- **consumer fusion**: when the group's output is an elementwise epilogue of the anchor's
  shape, the output is tiled to the same `S0 S1` and the anchor is computed inside each
  of its tiles (knob `fuse_epilogue`), so the accumulator stays in cache;
- **cache write**: when the anchor is itself the group's output (no epilogue), it may
  accumulate into a local cache computed inside each `S0 S1` tile of the output, which then
  copies the tile out (knob `cache_write`, Ansor's AddCacheWrite rule; te's
  `cache_write(anchor, "local")`), so the accumulator of a tile stays in registers and cache;
- **annotation**: the `S0` loops fused and parallel (`parallel`), the innermost data loop
  vectorized (`vectorize`), the other `S3` loops unrolled (`unroll`).

Each knob's candidates are strings ("4,2,8": sizes of S1, S2, S3), so a config stores in
the tuning database as plain JSON, and every candidate is a replayable te trace. An
illegal candidate raises ScheduleError when applied; the measurer records it as a
negative sample with that reason.

    task = tune.Task.from_op("gemm", (512, 512, 512), "cpu_llvm", space="generated")
    tune.tune(task, trials=64)
"""
from __future__ import annotations

from typing import Any, Sequence

from ... import te
from ...ir.errors import ScheduleError
from ...ops import tags
from ..strategy import Knob, OpImplementation, TuningSpace, Workload
from .common import (
    as_outputs, can_parallel, extent_of, schedule_injective_stage, schedule_reduce_stage, vector_lanes,
)
from .fused import find_anchor, output_of

__all__ = ["GENERATED_NAME", "GENERATED", "generated_space", "schedule_generated", "tile_candidates"]

GENERATED_NAME = "tune.generated_sketch"
"""The implementation name of generated candidates: in tuning records, and the `implementation`
attribute of a configs callback that makes the compiler use the sketch (compiler/strategy.py)."""


MAX_CANDIDATES_PER_AXIS = 96
MAX_INNERMOST = 64


def _divisors(extent: int) -> list[int]:
    return [d for d in range(1, extent + 1) if extent % d == 0]


def tile_candidates(extent: int, levels: int) -> list[str]:
    """Sizes of the inner `levels` tile levels of an axis of `extent`: "a,b,c" with a*b*c dividing
    the extent (the outermost level takes the rest), innermost at most MAX_INNERMOST; at most
    MAX_CANDIDATES_PER_AXIS of them, spread over the whole range."""
    found: list[tuple[int, ...]] = [()]
    for level in range(levels):
        grown = []
        for sizes in found:
            used = 1
            for size in sizes:
                used *= size
            for d in _divisors(extent // used):
                if level == levels - 1 and d > MAX_INNERMOST:
                    continue
                grown.append((*sizes, d))
        found = grown
    found.sort(key=lambda sizes: (_product(sizes), sizes))
    if len(found) > MAX_CANDIDATES_PER_AXIS:
        step = len(found) / MAX_CANDIDATES_PER_AXIS
        found = [found[int(i * step)] for i in range(MAX_CANDIDATES_PER_AXIS)]
    return [",".join(map(str, sizes)) for sizes in found]


def _product(values) -> int:
    total = 1
    for value in values:
        total *= value
    return total


def _sizes(text: str) -> list[int]:
    return [int(part) for part in text.split(",")]


def _anchor(outputs: Sequence[te.Tensor]) -> te.Tensor | None:
    """The stage the sketch tiles: the anchor by tag, else the reduction nearest the output."""
    anchor = find_anchor(outputs)
    if anchor is not None:
        return anchor
    stack, seen = [t.op for t in outputs], set()
    while stack:
        op = stack.pop(0)
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(id(op))
        if isinstance(op.body, te.Reduce):
            return op.output(0)
        stack.extend(t.op for t in op.input_tensors)
    return None


def _default_tiles(extent: int, innermost: int) -> str:
    """The analytic default: an innermost tile up to `innermost`, a second level of up to 4."""
    inner = max(d for d in _divisors(extent) if d <= max(1, innermost))
    middle = max(d for d in _divisors(extent // inner) if d <= 4)
    return f"1,{middle},{inner}"


def _fusable(anchor: te.Tensor, output: te.Tensor) -> bool:
    """Whether the output can be tiled like the anchor: an elementwise epilogue of the same shape."""
    if output.op is anchor.op or isinstance(output.op.body, te.Reduce):
        return False
    return [extent_of(a) for a in output.op.axis] == [extent_of(a) for a in anchor.op.axis]


def generated_space(workload: Workload, target) -> TuningSpace:
    """The knobs of the group's sketch, from its te outputs (`workload.outputs`)."""
    outputs = as_outputs(workload.outputs)
    if not outputs:
        raise ScheduleError("a generated space needs the group's te outputs")
    anchor = _anchor(outputs)
    knobs = [Knob("parallel", (True, False), default=can_parallel(target)),
             Knob("vectorize", (True, False), default=True)]
    if anchor is None:   # elementwise / injective only: the innermost loop's split is the choice
        out = outputs[0]
        if out.op.axis:
            last = extent_of(out.op.axis[-1])
            knobs.append(Knob("tile_inner", tuple(str(d) for d in _divisors(last) if d <= MAX_INNERMOST),
                              default=str(max(d for d in _divisors(last) if d <= vector_lanes(target, out.dtype)))))
        return TuningSpace(knobs)
    lanes = vector_lanes(target, anchor.dtype)
    axes = list(anchor.op.axis)
    for index, axis in enumerate(axes):
        extent = extent_of(axis)
        innermost = lanes if index == len(axes) - 1 else 1
        default = _default_tiles(extent, innermost)
        candidates = tile_candidates(extent, 3)
        knobs.append(Knob(f"tile_{axis.var.name}", candidates if default in candidates else [*candidates, default],
                          default=default))
    for axis in anchor.op.reduce_axis:
        extent = extent_of(axis)
        candidates = tuple(str(d) for d in _divisors(extent) if d <= MAX_INNERMOST)
        knobs.append(Knob(f"tile_{axis.var.name}", candidates,
                          default=str(max(int(c) for c in candidates if int(c) <= 8))))
    knobs.append(Knob("unroll", (False, True), default=False))
    if any(tags.is_injective(t.op.tag) and not isinstance(t.op.body, te.Reduce) for t in anchor.op.input_tensors
           if isinstance(t.op, te.ComputeOp)):
        knobs.append(Knob("inline", ("all", "keep_producers"), default="all"))
    output = output_of(anchor, outputs)
    if _fusable(anchor, output):
        knobs.append(Knob("fuse_epilogue", (True, False), default=True))
    elif output.op is anchor.op and anchor.op.reduce_axis:
        knobs.append(Knob("cache_write", (False, True), default=False))
    return TuningSpace(knobs)


def schedule_generated(outputs, target, config: dict[str, Any]) -> te.Schedule:
    """The group's schedule for one point of its generated space (see the module docstring)."""
    outputs = as_outputs(outputs)
    s = te.create_schedule([t.op for t in outputs])
    anchor = _anchor(outputs)
    if anchor is None:
        _schedule_elementwise(s, outputs, target, config)
        return s
    keep = [anchor]
    if config.get("inline") == "keep_producers":
        keep += [t for t in anchor.op.input_tensors if isinstance(t.op, te.ComputeOp)]
    kept = {id(t.op) for t in keep}
    for stage in list(s.stages):
        if stage.is_output or id(stage.op) in kept or stage.is_extern or stage.feeds_extern:
            continue
        if tags.is_injective(stage.op.tag) and not isinstance(stage.op.body, te.Reduce):
            stage.compute_inline()
    output = output_of(anchor, outputs)
    if config.get("cache_write") and output.op is anchor.op:
        # the anchor's stage becomes the copy out of its local cache, tiled like an epilogue
        _tile_fused(s, s.cache_write(anchor, "local"), anchor, target, config)
    elif config.get("fuse_epilogue") and output.op is not anchor.op:
        _tile_fused(s, anchor, output, target, config)
    else:
        _tile_root(s, anchor, target, config)
        if output.op is not anchor.op:
            schedule_injective_stage(s, output, target)
    for tensor in keep[1:]:
        schedule_injective_stage(s, tensor, target)
    for out in outputs:   # other outputs of a multi-output group
        stage = s[out]
        if out.op is output.op or stage.relations or stage.iter_attrs or stage.is_extern:
            continue
        if isinstance(out.op.body, te.Reduce):
            schedule_reduce_stage(s, out, target)
        else:
            schedule_injective_stage(s, out, target)
    return s


def _schedule_elementwise(s: te.Schedule, outputs, target, config) -> None:
    for stage in list(s.stages):
        if not stage.is_output and tags.is_injective(stage.op.tag) and not stage.is_extern \
                and not stage.feeds_extern:
            stage.compute_inline()
    for out in outputs:
        stage = s[out]
        axes = list(stage.op.axis)
        if not axes or stage.is_extern:
            continue
        inner = int(config.get("tile_inner", "1")) if out is outputs[0] else 1
        loops = axes[:-1]
        if inner > 1 and inner < extent_of(axes[-1]):
            outer, inner_axis = stage.split(axes[-1], factor=inner)
            loops.append(outer)
            if config.get("vectorize"):
                stage.vectorize(inner_axis)
        elif inner > 1 and config.get("vectorize"):
            stage.vectorize(axes[-1])
        else:
            loops.append(axes[-1])
        if loops and config.get("parallel"):
            stage.parallel(loops[0] if len(loops) == 1 else stage.fuse(*loops))


def _split_levels(stage, axis, sizes: list[int]) -> list:
    """Split `axis` into len(sizes) + 1 loops whose inner extents are `sizes` (outermost first)."""
    levels = []
    rest = axis
    for index in range(len(sizes)):
        outer, rest = stage.split(rest, factor=_product(sizes[index:]))
        levels.append(outer)
    levels.append(rest)
    return levels


def _annotate(stage, outer: list, innermost: list, config) -> None:
    """Parallel over the fused outer loops, vectorize the last innermost loop, unroll the others."""
    if config.get("parallel") and outer:
        stage.parallel(outer[0] if len(outer) == 1 else stage.fuse(*outer))
    if config.get("vectorize") and innermost and extent_of(innermost[-1]) not in (None, 1):
        stage.vectorize(innermost[-1])
    if config.get("unroll"):
        for loop in innermost[:-1]:
            if extent_of(loop) not in (None, 1):
                stage.unroll(loop)


def _tile_root(s: te.Schedule, anchor: te.Tensor, target, config) -> None:
    """`S0 S1 R0 S2 R1 S3` on the anchor at the root."""
    stage = s[anchor]
    levels = [_split_levels(stage, axis, _sizes(config[f"tile_{axis.var.name}"])) for axis in anchor.op.axis]
    reduce_levels = [_split_levels(stage, axis, [int(config[f"tile_{axis.var.name}"])])
                     for axis in anchor.op.reduce_axis]
    order = ([lv[0] for lv in levels] + [lv[1] for lv in levels] + [r[0] for r in reduce_levels]
             + [lv[2] for lv in levels] + [r[1] for r in reduce_levels] + [lv[3] for lv in levels])
    stage.reorder(*order)
    _annotate(stage, [lv[0] for lv in levels], [lv[3] for lv in levels], config)


def _tile_fused(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, target, config) -> None:
    """The output tiled `S0 S1 | S2*S3`; the anchor computed in each S1 tile as `R0 S2 R1 S3`."""
    out_stage = s[output]
    names = [axis.var.name for axis in anchor.op.axis]
    sizes = [_sizes(config[f"tile_{name}"]) for name in names]
    out_levels = []
    for axis, (s1, s2, s3) in zip(output.op.axis, sizes):
        outer, rest = out_stage.split(axis, factor=s1 * s2 * s3)
        out_levels.append([outer, *out_stage.split(rest, factor=s2 * s3)])     # S0, S1, S2*S3
    out_stage.reorder(*([lv[0] for lv in out_levels] + [lv[1] for lv in out_levels] + [lv[2] for lv in out_levels]))
    stage = s[anchor]
    stage.compute_at(out_stage, out_levels[-1][1])
    inner = [stage.split(axis, factor=size[2]) for axis, size in zip(anchor.op.axis, sizes)]
    reduce_levels = [stage.split(axis, factor=int(config[f"tile_{axis.var.name}"])) for axis in anchor.op.reduce_axis]
    stage.reorder(*([r[0] for r in reduce_levels] + [a[0] for a in inner] + [r[1] for r in reduce_levels]
                    + [a[1] for a in inner]))
    _annotate(stage, [], [a[1] for a in inner], config)
    _annotate(out_stage, [lv[0] for lv in out_levels], [lv[2] for lv in out_levels],
              {**config, "unroll": False})


def _space(workload: Workload, target) -> TuningSpace:
    return generated_space(workload, target)


GENERATED = OpImplementation(GENERATED_NAME, keys=("tune.generated",), schedule=schedule_generated, space=_space,
                             priority=-(1 << 30), plugin="tensorkiln")
"""The generated sketch as an implementation: never chosen by the strategies (no keys), only for
a task tuned with space="generated" and for a group whose fastest tuning record is generated
(its key matches no group)."""
