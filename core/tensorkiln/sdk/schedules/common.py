"""sdk/schedules/common.py: helpers every schedule library shares (CPU or GPU style).

Target facts come only from `target.capabilities` (vector width, threads), never from
the target's name. Tiles are chosen to divide their axes where possible: a loop with
a guarded tail is not vectorized by tir's vectorize_loops.
"""
from __future__ import annotations

from typing import Iterable, Sequence

from ... import te
from ...ir.dtypes import dtype_of
from ...tir.arith import as_int
from ...ops import tags

__all__ = ["resolve_target", "vector_lanes", "can_parallel", "as_outputs", "stages_of", "inline_injective",
           "divisor_at_most", "extent_of", "fuse_all", "fuse_for_attach", "vectorize_inner", "schedule_injective_stage",
           "schedule_reduce_stage", "reduces_outer_only", "power_of_two_lanes", "PARALLEL_MIN_WORK", "MAX_LANES"]

MAX_LANES = 16
PARALLEL_MIN_WORK = 1 << 15
"""Output elements (times reduction length) below which a parallel loop costs more than it saves.
Measured at 2 threads on the 2-core host, blocks of runs alternating, against 1 << 14: the tcn 0.91-0.93x
(its 64 x 256 relus: 1.5 us alone, 4 us as a parallel region), the GPT block 0.97x, the others even
(0.98-1.005x: shufflenet, squeezenet, densenet121, the transformer, the UNet, the depthwise CNN)."""


def resolve_target(target):
    """A Target from a Target or a target string ("llvm"); objects with `.capabilities` pass through."""
    if isinstance(target, str):
        from ..plugin_manager import registry
        return registry().target(target)
    return target


def vector_lanes(target, dtype: str) -> int:
    """Lanes of `dtype` in one vector register: vector_width_bits // bits, capped at MAX_LANES (0 -> 1)."""
    bits = getattr(resolve_target(target).capabilities, "vector_width_bits", 0) or 0
    if dtype_of(dtype).is_bool:
        # Bool outputs stay scalar: stored bools are bytes, and a vector of i1 cannot be
        # stored as one on every backend; the cost is small (bool results are rare and cheap).
        return 1
    element_bits = dtype_of(dtype).bits
    return max(1, min(MAX_LANES, bits // element_bits))


def can_parallel(target) -> bool:
    """Whether parallel loops help: max_threads is 0 (all cores) or more than 1."""
    threads = getattr(resolve_target(target).capabilities, "max_threads", 1)
    return threads != 1


def as_outputs(outputs) -> list[te.Tensor]:
    if isinstance(outputs, te.Tensor):
        return [outputs]
    return list(outputs)


def stages_of(s: te.Schedule) -> list:
    """Every stage, producers first."""
    return list(s.stages)


def inline_injective(s: te.Schedule, keep: Iterable = ()) -> None:
    """compute_inline every injective stage that is neither an output nor in `keep`."""
    kept = {id(t.op) if isinstance(t, te.Tensor) else id(t) for t in keep}
    for stage in stages_of(s):
        if stage.is_output or id(stage.origin_op) in kept or id(stage.op) in kept or stage.is_extern \
                or stage.feeds_extern:   # an extern body reads whole buffers
            continue
        if tags.is_injective(stage.op.tag) and not isinstance(stage.op.body, te.Reduce):
            stage.compute_inline()


def extent_of(iv) -> int | None:
    return None if iv.dom is None else as_int(iv.dom.extent)


def divisor_at_most(extent: int, limit: int) -> int:
    """The largest divisor of `extent` that is <= limit (1 when extent is prime and larger)."""
    for d in range(min(limit, extent), 0, -1):
        if extent % d == 0:
            return d
    return 1


def fuse_all(stage, axes: Sequence):
    """Fuse `axes` (outer to inner) into one loop; a single axis is returned as is."""
    axes = list(axes)
    if not axes:
        return None
    return axes[0] if len(axes) == 1 else stage.fuse(*axes)


def fuse_for_attach(stage, axes: Sequence):
    """Fuse the innermost of `axes` (adjacent loops, outer to inner) into the loop a producer is
    computed at; returns it (None without axes). Outer axes stay separate loops.

    Bound inference recovers a fused axis from the fused loop as fused // n (the outermost),
    fused % n (the innermost) or (fused // n) % m (any other), and relaxes the last form to
    the whole axis: a producer computed at a loop fusing three wide axes would compute all
    of the middle one in every iteration. So the fused run holds at most two axes wider than 1
    and ends with a wide one; the loops after it must be the unit axes among `axes`.
    """
    axes = list(axes)
    wide = [i for i, axis in enumerate(axes) if extent_of(axis) != 1]
    if not wide:
        return fuse_all(stage, axes)
    # unit axes after the last wide one stay out too: fused, they turn fused % n into (fused // 1) % n
    return fuse_all(stage, axes[wide[-2] if len(wide) >= 2 else wide[0]:wide[-1] + 1])


def vectorize_inner(stage, axis, extent: int, lanes: int):
    """Split `axis` by a lanes-sized divisor and vectorize the inner part; returns the outer loop."""
    factor = divisor_at_most(extent, lanes)
    if factor < 2 or lanes < 2:
        return axis
    if factor == extent:
        stage.vectorize(axis)
        return None
    outer, inner = stage.split(axis, factor=factor)
    stage.vectorize(inner)
    return outer


def _product(values) -> int:
    total = 1
    for v in values:
        total *= v
    return total


PARALLEL_ITERATIONS = 32
"""Iterations a fused parallel loop of an injective stage needs (chunks for the threads); loops inside
them stay nested."""


def _leading_parallel_loops(extents: list[int]) -> int:
    """How many leading loops to fuse into the parallel one: the fewest whose iterations reach
    PARALLEL_ITERATIONS. The loops inside stay nested, so an element's indices are not recovered from
    the fused index by a division and a modulo per axis (a conv's NHWC pad: (1, 58, 58, 64) runs 58
    rows of 58 x 4 vectors, not 13456 vectors each with three divisions and a bounds test)."""
    total = 1
    for count, extent in enumerate(extents, start=1):
        total *= extent
        if total >= PARALLEL_ITERATIONS:
            return count
    return len(extents)


def schedule_injective_stage(s: te.Schedule, tensor: te.Tensor, target) -> None:
    """Injective stage: vectorize the innermost axis by a lanes divisor, fuse the rest, parallel if large."""
    stage = s[tensor]
    axes = list(stage.op.axis)
    if not axes:
        return
    shape = [extent_of(a) for a in axes]
    lanes = vector_lanes(target, tensor.dtype)
    total = _product(shape)
    outer_axes = axes[:-1]
    inner_outer = vectorize_inner(stage, axes[-1], shape[-1], lanes)
    if inner_outer is None and not outer_axes:
        return
    if can_parallel(target) and total >= PARALLEL_MIN_WORK:
        loops = outer_axes + ([inner_outer] if inner_outer is not None else [])
        if inner_outer is axes[-1] and outer_axes and shape[-1] >= MAX_LANES:
            # not vectorized (a transpose, a width without a lanes divisor): the innermost axis
            # stays its own loop, so elements are not each recovered from the fused index
            # with a division and a modulo per axis
            loops = outer_axes
        extents = [*shape[:-1], shape[-1] // divisor_at_most(shape[-1], lanes)][:len(loops)]
        fused = fuse_all(stage, loops[:_leading_parallel_loops(extents)])
        if fused is not None:
            stage.parallel(fused)
    elif len(outer_axes) > 1:
        fuse_all(stage, outer_axes)


def schedule_reduce_stage(s: te.Schedule, tensor: te.Tensor, target) -> None:
    """A reduction at the root: data axes fused and parallel (when large), reduction loops inside.

    When the innermost data axis is contiguous in the input and the reduction runs over
    outer axes, it moves inside the reduction loops and is vectorized.
    """
    stage = s[tensor]
    data_axes, reduce_axes = list(stage.op.axis), list(stage.op.reduce_axis)
    work = _product(extent_of(a) for a in data_axes) * _product(extent_of(r) for r in reduce_axes)
    outer = data_axes
    last = extent_of(data_axes[-1]) if data_axes else 0
    lanes = power_of_two_lanes(last, vector_lanes(target, tensor.dtype)) if last else 1
    if data_axes and lanes >= 2 and reduces_outer_only(stage):
        outer_last, inner_last = stage.split(data_axes[-1], factor=lanes)
        stage.reorder(*data_axes[:-1], outer_last, *reduce_axes, inner_last)
        stage.vectorize(inner_last)
        outer = data_axes[:-1] + [outer_last]
    fused = fuse_all(stage, outer)
    if fused is not None and can_parallel(target) and work >= PARALLEL_MIN_WORK:
        stage.parallel(fused)


def power_of_two_lanes(extent: int, lanes: int) -> int:
    """The widest power-of-two vector, at most `lanes`, that divides `extent` (1000 channels: 8)."""
    while lanes > 1 and extent % lanes:
        lanes //= 2
    return max(lanes, 1)


def reduces_outer_only(stage) -> bool:
    """True when the innermost output axis indexes the innermost input axis (vectorizable): the
    reduction runs over outer axes only, as a global pool of NHWC data over H and W."""
    body = stage.op.body
    last = stage.op.axis[-1].var
    found = []

    def visit(x):
        if isinstance(x, te.TensorRead) and x.indices:
            found.append(x.indices[-1] is last)
    from ...tir.visit import post_order_visit
    post_order_visit(body.source if isinstance(body, te.Reduce) else body, visit)
    return bool(found) and all(found)
