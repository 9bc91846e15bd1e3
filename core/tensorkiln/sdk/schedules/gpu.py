"""sdk/schedules/gpu.py: a schedule library for targets with a thread model (GPU style).

A plugin opts in through its strategies hook: `gpu_strategies(target)` returns one
OpImplementation per group kind with the knobs below (threads per block, the matmul
tile, the conv channel block), their defaults derived from the target's capabilities
(`thread_axes`, `max_threads_per_block`, `max_shared_memory_bytes`). One fused group
becomes one kernel, and a kernel has no barrier across work-groups, so every stage a
thread reads is either inlined or computed by that thread (compute_at its thread loop):

    injective        all axes fused, split by the block size, bound to blockIdx.x/threadIdx.x;
                     the innermost axis vectorized by a lanes divisor when it divides
    reductions       long reductions with few outputs: one work-group per row, the reduction
    softmax, norm    axes split over its threads and combined across them (gpu_reduce.py, which
    global pools     states the rule); otherwise one thread per output element (or per row for
                     softmax / layer_norm / lrn when there are enough rows), the reductions a
                     row needs run serially inside that thread, into private accumulators
    conv2d family    one thread per (output-channel block x pixel): a block of channels
                     accumulates in private memory, each input value read once per block
    dense / matmul   (TILE x TILE) work-groups, one output per work-item; the block's rows
                     of the left operand and columns of the right one (whole K) are fetched
                     cooperatively into shared memory when they fit; otherwise one thread
                     per output with a private accumulator
    pool             one thread per output element, window serial

Where a stage is computed per thread, the output's axes are bound without fusing them
(`_bind_grid`: threadIdx.x/y split off the innermost axes, blockIdx.x/y/z the rest) and the
stage lives in "local" scope: bound inference then gives it exactly one thread's region
(a fused-then-split loop, or "global" scope, relaxes the region to most of the tensor).

A group whose outputs read one another (or share a non-inlined intermediate), or that holds an
extern stage (te.extern: serial loop IR, like topk's heap) beside other stages, runs serially
on one work-item: correct, and rare after fusion. An extern stage alone runs the PARALLEL loop
its body starts with on the threads, one iteration each (topk: one thread per row).
"""
from __future__ import annotations

from typing import Sequence

from ... import te
from ...ops import tags
from .common import as_outputs, divisor_at_most, extent_of, fuse_all, resolve_target, vector_lanes
from .fused import find_anchor
from .gpu_reduce import cross_thread_rows

__all__ = ["schedule_gpu", "has_threads", "threads_per_block", "gpu_strategies", "gpu_op_limits", "MATMUL_TILE",
           "SERIAL_TOPK_MAX_ELEMENTS"]

DEFAULT_BLOCK = 256
MATMUL_TILE = 8
CONV_CHANNEL_BLOCK = 4
ROWS_PER_THREAD_MIN = 64
RECOMPUTE_ROW_MAX = 64
"""Row mode (one thread per row of softmax / norm) unless there are fewer than ROWS_PER_THREAD_MIN rows
of at most RECOMPUTE_ROW_MAX elements: then one thread per element, each recomputing its row's statistics."""

_CONV_TAGS = (tags.CONV2D_NCHW, tags.DEPTHWISE_CONV2D_NCHW, tags.GROUP_CONV2D_NCHW, tags.CONV2D_TRANSPOSE_NCHW)
_MATMUL_TAGS = (tags.DENSE, tags.BATCH_MATMUL)
_ROW_TAGS = (tags.SOFTMAX, tags.LOG_SOFTMAX, tags.NORM)
_CROSS_THREAD_TAGS = (*_ROW_TAGS, tags.COMM_REDUCE, tags.GLOBAL_POOL)
"""Anchors whose reductions may run across the threads of a work-group (gpu_reduce.py decides)."""


def has_threads(target) -> bool:
    """Whether `target` runs GPU-style kernels: bindable thread axes and a work-group limit."""
    capabilities = resolve_target(target).capabilities
    return bool(getattr(capabilities, "thread_axes", ())) and getattr(capabilities, "max_threads_per_block", 0) > 0


class _Tuned:
    """A target plus knob values: what the functions below read through `target`."""

    def __init__(self, target, config: dict) -> None:
        self.target = target
        self.capabilities = target.capabilities
        self.block = config.get("threads_per_block", DEFAULT_BLOCK)
        self.matmul_tile = config.get("matmul_tile", MATMUL_TILE)
        self.conv_channel_block = config.get("conv_channel_block", CONV_CHANNEL_BLOCK)

    def __str__(self) -> str:
        return str(self.target)


def threads_per_block(target) -> int:
    """Work-items per group for one-dimensional kernels: min(max_threads_per_block, the block knob (256))."""
    limit = resolve_target(target).capabilities.max_threads_per_block
    return max(1, min(limit, getattr(target, "block", DEFAULT_BLOCK)))


def _can_bind(target, tag: str) -> bool:
    return tag in resolve_target(target).capabilities.thread_axes


def schedule_gpu(outputs, target, config: dict | None = None) -> te.Schedule:
    """Schedule a fused group for a target with threads (see the module docstring).

        s = schedule_gpu([relu_out], tk.target("opencl"))   # one work-item per output element
    """
    outputs = as_outputs(outputs)
    target = _Tuned(resolve_target(target), dict(config or {}))
    s = te.create_schedule([t.op for t in outputs])
    if any(stage.is_extern for stage in s.stages):
        if len(s.stages) == 1:   # the extern stage alone: its parallel loop's iterations are independent
            s.stages[0].bind_parallel_loops(threads_per_block(target))
        # otherwise every thread would run the other stages' serial code, racing on their buffers
        return s  # one work-item runs the whole group in order
    _inline_non_reductions(s)
    needs = {id(out.op): _stages_needed(s, out) for out in outputs}
    if not _threads_can_split(s, outputs, needs):
        return s  # one work-item runs the whole group in order
    anchor = find_anchor(outputs)
    for out in outputs:
        intermediates = needs[id(out.op)]
        if anchor is not None and (out.op is anchor.op or any(st.op is anchor.op for st in intermediates)):
            _schedule_anchored(s, anchor, out, intermediates, target)
        else:
            _schedule_elementwise(s, out, intermediates, target)
    return s


def _inline_non_reductions(s: te.Schedule) -> None:
    """Inline every intermediate that is not a reduction (injective stages, padding, packed weights):
    a thread computes what it reads, so nothing but reductions needs a buffer."""
    for stage in s.stages:
        if not stage.is_output and not isinstance(stage.op.body, te.Reduce):
            stage.compute_inline()


# ---- which stages each output needs ---------------------------------------------------------


def _stages_needed(s: te.Schedule, output: te.Tensor) -> list:
    """Non-inlined stages `output` reads (through inlined ones), producers first; outputs included."""
    found, seen = [], set()
    stack = [t.op for t in output.op.input_tensors]
    while stack:
        op = stack.pop()
        stage = s.stage_map.get(op)
        if stage is None or id(stage) in seen:
            continue
        seen.add(id(stage))
        if stage.attach_type != "inline":
            found.append(stage)
        stack.extend(t.op for t in stage.op.input_tensors)
    order = {id(stage): index for index, stage in enumerate(s.stages)}
    return sorted(found, key=lambda st: order[id(st)])


def _threads_can_split(s: te.Schedule, outputs: list, needs: dict) -> bool:
    """True when no output reads another output and no intermediate serves two outputs."""
    owner: dict[int, int] = {}
    for out in outputs:
        for stage in needs[id(out.op)]:
            if stage.is_output or owner.setdefault(id(stage), id(out.op)) != id(out.op):
                return False
    return True


# ---- thread binding ------------------------------------------------------------------------


def _bind_flat(stage, axes: Sequence, total: int, target):
    """Fuse `axes` (`total` iterations together), split by the block size and bind; returns the
    thread loop (None: no axes). Split and fused axes have no extent before lowering, hence `total`."""
    fused = fuse_all(stage, axes)
    if fused is None:
        return None
    block = min(threads_per_block(target), max(1, total))
    outer, inner = stage.split(fused, factor=block)
    stage.bind(outer, te.thread_axis("blockIdx.x"))
    stage.bind(inner, te.thread_axis("threadIdx.x"))
    return inner


def _bind_grid(stage, axes: Sequence, extents: Sequence[int], target, inner: Sequence = ()):
    """Bind `axes` (outer to inner, with their `extents`) without fusing them into one loop.

    threadIdx.x takes the innermost axis (split), threadIdx.y the next one when the first
    leaves room in the block; their outer parts go to blockIdx.x / blockIdx.y and the other
    axes to blockIdx.z (fused when several). Stages computed at the returned thread loop get
    exact regions: bound inference sees only splits (a fused-then-split loop would make it
    relax the region to most of the tensor). `inner` axes stay serial, innermost.
    """
    axes, extents = list(axes), [max(1, int(e)) for e in extents]
    if not axes:
        return None
    threads = threads_per_block(target)
    x_threads = min(threads, extents[-1])
    x_outer, x_inner = stage.split(axes[-1], factor=x_threads)
    blocks, thread_loops = [x_outer], [x_inner]
    rest = axes[:-1]
    if rest and _can_bind(target, "threadIdx.y") and threads // x_threads > 1 and extents[-2] > 1:
        y_outer, y_inner = stage.split(rest[-1], factor=min(threads // x_threads, extents[-2]))
        blocks.insert(0, y_outer)
        thread_loops.insert(0, y_inner)
        rest = rest[:-1]
    elif rest and _can_bind(target, "blockIdx.y"):
        blocks.insert(0, rest[-1])
        rest = rest[:-1]
    stage.reorder(*rest, *blocks, *thread_loops, *inner)
    outer = fuse_all(stage, rest)
    if outer is not None:
        if len(blocks) == 2 and _can_bind(target, "blockIdx.z"):
            stage.bind(outer, te.thread_axis("blockIdx.z"))
        else:
            blocks.insert(0, outer)   # serial, outside the bound loops, when no block axis is left
    for axis, tag in zip(reversed(blocks), ("blockIdx.x", "blockIdx.y")):
        stage.bind(axis, te.thread_axis(tag))
    for axis, tag in zip(reversed(thread_loops), ("threadIdx.x", "threadIdx.y")):
        stage.bind(axis, te.thread_axis(tag))
    return thread_loops[-1]


def _attach(s: te.Schedule, intermediates: list, stage, axis) -> None:
    """compute_at every intermediate at `axis` of `stage`, in private ("local") memory.

    The scope matters: bound inference relaxes every thread index for a "global" stage (any
    thread could read it), so only a "local" stage gets the region of one thread."""
    if axis is None:
        return
    for intermediate in intermediates:
        intermediate.compute_at(stage, axis)
        if intermediate.scope == "global":
            intermediate.set_scope("local")


def _schedule_elementwise(s: te.Schedule, output: te.Tensor, intermediates: list, target) -> None:
    """One work-item per output element (per vector of `lanes` elements when the row divides)."""
    stage = s[output]
    axes = list(stage.op.axis)
    if not axes:
        return
    lanes = vector_lanes(target, output.dtype)
    last = extent_of(axes[-1]) or 1
    vector = None
    total = _size(output.shape)
    if not intermediates and lanes > 1 and last % lanes == 0:
        outer_last, vector = stage.split(axes[-1], factor=lanes)
        axes = axes[:-1] + [outer_last]
        total //= lanes
    if intermediates:  # computed per thread: bind without fusing so their regions stay exact
        thread = _bind_grid(stage, axes, [int(d) for d in output.shape], target)
    else:
        thread = _bind_flat(stage, axes, total, target)
    if vector is not None:
        stage.vectorize(vector)
    _attach(s, intermediates, stage, thread)


def _schedule_anchored(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, intermediates: list, target) -> None:
    tag = anchor.op.tag
    if tag in _CROSS_THREAD_TAGS and cross_thread_rows(s, output, intermediates, target, threads_per_block(target)):
        return
    if tag in _CONV_TAGS and _conv(s, anchor, output, intermediates, target):
        return
    if tag in _MATMUL_TAGS and _matmul(s, anchor, output, intermediates, target):
        return
    if tag in _ROW_TAGS and _rows(s, output, intermediates, target):
        return
    _per_output(s, anchor, output, intermediates, target)


def _accumulator(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, intermediates: list) -> list:
    """When the reduction is the output, accumulate in a private ("local") cache instead."""
    stage = s[anchor]
    if anchor.op is output.op and isinstance(anchor.op.body, te.Reduce) and len(anchor.op.axis) > 0 \
            and not stage.relations and not stage.iter_attrs:
        cache = s.cache_write(anchor, "local")
        return [*intermediates, s[cache]]
    return intermediates


def _per_output(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, intermediates: list, target) -> None:
    """One work-item per output element; what it reads is computed inside it, serially."""
    intermediates = _accumulator(s, anchor, output, intermediates)
    stage = s[output]
    thread = _bind_grid(stage, list(stage.op.axis), [int(d) for d in output.shape], target)
    _attach(s, intermediates, stage, thread)


def _size(shape) -> int:
    total = 1
    for extent in shape:
        total *= int(extent)
    return total


def _rows(s: te.Schedule, output: te.Tensor, intermediates: list, target) -> bool:
    """softmax / norm over trailing axes: one work-item per row when there are enough rows."""
    reduced = [st for st in intermediates if isinstance(st.op.body, te.Reduce)]
    if not reduced or len(reduced) != len(intermediates):
        return False
    ranks = {len(st.op.axis) for st in reduced}
    if len(ranks) != 1:
        return False
    (rank,) = ranks
    if rank >= output.ndim or not _reads_prefix(reduced, output, rank):
        return False
    stage = s[output]
    outer = list(stage.op.axis)[:rank]
    rows = 1
    for axis in outer:
        rows *= extent_of(axis) or 1
    row_length = 1
    for axis in list(stage.op.axis)[rank:]:
        row_length *= extent_of(axis) or 1
    if rows < ROWS_PER_THREAD_MIN and row_length <= RECOMPUTE_ROW_MAX:
        return False  # few short rows: one thread per element, recomputing its row statistics
    thread = _bind_grid(stage, outer, [int(d) for d in output.shape[:rank]], target,
                        inner=list(stage.op.axis)[rank:])
    _attach(s, intermediates, stage, thread)
    return True


def _reads_prefix(reduced: list, output: te.Tensor, rank: int) -> bool:
    """Whether the reductions' shapes are the output's leading `rank` dimensions (row statistics)."""
    leading = tuple(int(d) for d in output.shape[:rank])
    return all(tuple(int(d) for d in st.op.output(0).shape) == leading for st in reduced)


# ---- conv2d --------------------------------------------------------------------------------


def _conv(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, intermediates: list, target) -> bool:
    """NCHW conv: a work-item accumulates a block of output channels at one pixel, privately."""
    if output.ndim != 4 or tuple(output.shape) != tuple(anchor.shape):
        return False
    intermediates = _accumulator(s, anchor, output, intermediates)
    accumulator = next((st for st in intermediates if st.op.tag == anchor.op.tag), None)
    if accumulator is None:
        return False
    stage = s[output]
    batch, channel, row, column = stage.op.axis
    block = divisor_at_most(int(output.shape[1]), getattr(target, "conv_channel_block", CONV_CHANNEL_BLOCK))
    channel_outer, channel_inner = stage.split(channel, factor=block)
    batches, channels, height, width = (int(d) for d in output.shape)
    thread = _bind_grid(stage, [batch, channel_outer, row, column], [batches, channels // block, height, width],
                        target, inner=[channel_inner])
    if block > 1:
        stage.unroll(channel_inner)
    _attach(s, intermediates, stage, thread)
    data_axes, reduce_axes = list(accumulator.op.axis), list(accumulator.op.reduce_axis)
    if len(data_axes) == 4 and reduce_axes:
        b, o, y, x = data_axes
        accumulator.reorder(b, y, x, *reduce_axes, o)
        if block > 1:
            accumulator.unroll(o)
    return True


# ---- dense / matmul ------------------------------------------------------------------------


def _matmul(s: te.Schedule, anchor: te.Tensor, output: te.Tensor, intermediates: list, target) -> bool:
    """(TILE x TILE) work-groups; whole-K operand tiles in shared memory when they fit."""
    if output.ndim < 2 or tuple(output.shape) != tuple(anchor.shape) or not _can_bind(target, "threadIdx.y"):
        return False
    tile = getattr(target, "matmul_tile", MATMUL_TILE)
    if tile * tile > resolve_target(target).capabilities.max_threads_per_block:
        return False
    intermediates = _accumulator(s, anchor, output, intermediates)
    accumulator = next((st for st in intermediates if st.op.tag == anchor.op.tag), None)
    if accumulator is None:
        return False
    stage = s[output]
    axes = list(stage.op.axis)
    rows, columns = axes[-2], axes[-1]
    row_outer, row_inner = stage.split(rows, factor=tile)
    column_outer, column_inner = stage.split(columns, factor=tile)
    stage.reorder(*axes[:-2], row_outer, column_outer, row_inner, column_inner)
    if axes[:-2]:
        stage.bind(fuse_all(stage, axes[:-2]), te.thread_axis("blockIdx.z"))
    stage.bind(row_outer, te.thread_axis("blockIdx.y"))
    stage.bind(column_outer, te.thread_axis("blockIdx.x"))
    stage.bind(row_inner, te.thread_axis("threadIdx.y"))
    stage.bind(column_inner, te.thread_axis("threadIdx.x"))
    _attach(s, intermediates, stage, column_inner)
    _shared_operands(s, accumulator, stage, column_outer, tile, target)
    return True


def _shared_operands(s: te.Schedule, accumulator, stage, block_axis, tile: int, target) -> None:
    """Fetch the placeholder operands of the accumulator into shared memory, all threads helping."""
    capabilities = resolve_target(target).capabilities
    if "shared" not in capabilities.memory_scopes:
        return
    (k,) = accumulator.op.reduce_axis
    depth = extent_of(k) or 0
    operands = [t for t in accumulator.op.input_tensors if isinstance(t.op, te.PlaceholderOp) and t.ndim >= 2]
    if not operands or depth == 0:
        return
    budget = capabilities.max_shared_memory_bytes
    needed = sum(tile * depth * _bytes(t.dtype) for t in operands)
    if needed > budget:
        return
    for tensor in operands:
        cache = s.cache_read(tensor, "shared", [accumulator.op.output(0)])
        copy = s[cache]
        copy.compute_at(stage, block_axis)
        fused = fuse_all(copy, list(copy.op.axis))
        outer, thread_x = copy.split(fused, factor=tile)
        _, thread_y = copy.split(outer, factor=tile)
        copy.bind(thread_y, te.thread_axis("threadIdx.y"))
        copy.bind(thread_x, te.thread_axis("threadIdx.x"))


def _bytes(dtype: str) -> int:
    from ...ir.dtypes import dtype_of
    return max(1, dtype_of(dtype).bits // 8)


# ---- the library as strategies -------------------------------------------------------------------


def _power_of_two_candidates(limit: int, default: int) -> tuple[int, ...]:
    values = {v for v in (32, 64, 128, 256, 512, 1024) if v <= limit} | {default}
    return tuple(sorted(values))


def _space(workload, target):
    from ..strategy import Knob, TuningSpace
    capabilities = resolve_target(target).capabilities
    block = min(DEFAULT_BLOCK, capabilities.max_threads_per_block)
    knobs = [Knob("threads_per_block", _power_of_two_candidates(capabilities.max_threads_per_block, block), block)]
    anchor = workload.anchor
    tag = anchor.op.tag if anchor is not None else None
    if tag in _MATMUL_TAGS or (workload.call is not None and workload.call.op.name in ("nn.dense", "nn.matmul")):
        tiles = tuple(t for t in (4, 8, 16) if t * t <= capabilities.max_threads_per_block) or (1,)
        knobs.append(Knob("matmul_tile", tiles, MATMUL_TILE if MATMUL_TILE in tiles else tiles[-1]))
    if tag in _CONV_TAGS:
        knobs.append(Knob("conv_channel_block", (1, 2, 4, 8), CONV_CHANNEL_BLOCK))
    return TuningSpace(tuple(knobs))


def _schedule(outputs, target, config):
    return schedule_gpu(outputs, target, config)


def gpu_strategies(target, prefix: str = "gpu", priority: int = 0) -> list:
    """The library as OpImplementations for `target` (one per anchor kind, plus "injective"), named
    `{prefix}.{key}`; a plugin returns them from its `tensorkiln_strategies` hook:

        @hookimpl
        def tensorkiln_strategies(target):
            return gpu_strategies(target, prefix="opencl") if target.name == "opencl" else []
    """
    from ..strategy import INJECTIVE, OpImplementation
    if not has_threads(target):
        return []
    keys = (*tags.ANCHOR_TAGS, INJECTIVE)
    return [OpImplementation(f"{prefix}.{key}", (key,), _schedule, space=_space, priority=priority) for key in keys]


SERIAL_TOPK_MAX_ELEMENTS = 4096
"""topk is a serial heap per row (core ops/sort.py, an extern stage) and this library gives each row a
thread of its own (bind_parallel_loops); past this many elements in a row the CPU is faster."""


def gpu_op_limits(thread_word: str = "thread") -> dict:
    """Ops this library runs poorly at some shapes, as `tensorkiln_supported_ops` predicates (op -> call ->
    True or a reason); `thread_word` names a thread in the reason ("thread", "work_item"). A GPU plugin
    using `gpu_strategies` merges them into its own."""
    def topk_runs_well(call):
        shape = call.args[0].checked_type.shape
        row = int(shape[call.attrs.axis % len(shape)]) if shape else 1
        if row > SERIAL_TOPK_MAX_ELEMENTS:
            return f"serial_on_one_{thread_word}:{row}_elements_per_row>{SERIAL_TOPK_MAX_ELEMENTS}"
        return True
    return {"topk": topk_runs_well}
