"""sdk/schedules/gpu_reduce.py: cross-thread reductions for the GPU library (sdk/schedules/gpu.py).

One work-group per row of a fused reduction group: reductions (sum / mean / max / min / prod,
global pools, argmax's two stages, softmax's max and sum, layer_norm's mean and variance)
split their reduction axes over the group's threads, each thread reducing its stride into a
register, and the threads then combine their registers (a te reduction axis bound to
threadIdx.x: a tree in shared memory with barriers, warp shuffles on targets that have
them). Every thread keeps the row's statistics privately ("local" scope), so the group's
output (softmax's row, a mean's division) is written by the same threads right after.

The rule (`cross_thread_threads`): with L the reduction length (elements combined into one
output) and R the rows (outputs of the reduction), W the target's declared warp size
(capabilities.warp_size; MIN_GROUP where a target declares none) and B the threads per
block (the `threads_per_block` knob, capped by capabilities.max_threads_per_block):

    T = min(B, the largest power of two <= L)           threads per row
    cross-thread when  L >= 2 * W  and  R < L  and  T >= W

so a short reduction (fewer than two elements per thread of one warp) and a reduction with
more outputs than elements per output (one thread per output already has more threads than
serial steps) keep the one-thread-per-output schedule of gpu.py.
"""
from __future__ import annotations

from ... import te
from .common import extent_of, fuse_all, resolve_target

__all__ = ["cross_thread_rows", "cross_thread_threads", "MIN_GROUP"]

MIN_GROUP = 16
"""Smallest worthwhile group of threads for one reduction on a target that declares no warp size."""


def _product(values) -> int:
    total = 1
    for v in values:
        total *= int(v)
    return total


def _reduce_length(stage) -> int:
    return _product(extent_of(r) or 0 for r in stage.op.reduce_axis)


def cross_thread_threads(target, rows: int, length: int, block: int) -> int:
    """Threads per row for a cross-thread reduction of `rows` outputs of `length` elements each, or 0
    when one thread per output is the better schedule (the rule in the module docstring)."""
    capabilities = resolve_target(target).capabilities
    warp = getattr(capabilities, "warp_size", 0) or MIN_GROUP
    block = max(1, min(block, capabilities.max_threads_per_block))
    if length < 2 * warp or rows >= length:
        return 0
    threads = min(block, 1 << (length.bit_length() - 1))
    return threads if threads >= warp else 0


def _row_rank(reductions: list, output: te.Tensor) -> int | None:
    """How many leading axes of `output` index the rows every reduction produces, or None.

    A reduction's shape must be output.shape[:r] (softmax, layer_norm), or that followed by
    ones (keepdims), or output.shape itself (a reduction with an elementwise epilogue). Bound
    inference still computes each row's region from the actual reads, so this choice only
    decides the loop structure, never the values."""
    shape = tuple(int(d) for d in output.shape)
    for rank in range(len(shape), 0, -1):
        ok = True
        for stage in reductions:
            red = tuple(int(d) for d in stage.op.output(0).shape)
            if red[:rank] != shape[:rank] or any(d != 1 for d in red[rank:]):
                ok = False
                break
        if ok:
            return rank
    return None


def cross_thread_rows(s: te.Schedule, output: te.Tensor, intermediates: list, target, block: int) -> bool:
    """Schedule `output`'s group with one work-group per row and cross-thread reductions, when the
    rule says so; False leaves the schedule untouched."""
    stage = s[output]
    is_reduction = isinstance(stage.op.body, te.Reduce)
    reductions = [st for st in intermediates if isinstance(st.op.body, te.Reduce)]
    if len(reductions) != len(intermediates) or stage.relations or stage.iter_attrs:
        return False
    if any(st.relations or st.iter_attrs or st.attach_type != "root" for st in reductions):
        return False
    if is_reduction:
        rows = _product(output.shape)
        rank = len(stage.op.axis)
        if reductions and (rank == 0 or _row_rank(reductions, output) != rank):
            return False
        lengths = [_reduce_length(stage)] + [_reduce_length(st) for st in reductions]
    else:
        if not reductions or output.ndim == 0:
            return False
        rank = _row_rank(reductions, output)
        if rank is None:
            return False
        rows = _product(output.shape[:rank])
        lengths = [_reduce_length(st) for st in reductions]
    length = min(lengths)
    threads = cross_thread_threads(target, rows, length, block)
    if threads == 0:
        return False
    axes = list(stage.op.axis)
    row = fuse_all(stage, axes[:rank])
    if is_reduction:
        if row is not None:
            stage.bind(row, te.thread_axis("blockIdx.x"))
        _bind_reduction(stage, threads)
    else:
        column = fuse_all(stage, axes[rank:])
        if column is None:   # one element per row: thread 0 writes it, after the row's reductions
            row, column = stage.split(row, factor=1)
            stage.bind(row, te.thread_axis("blockIdx.x"))
            stage.bind(column, te.thread_axis("threadIdx.x"))
        else:
            stage.bind(row, te.thread_axis("blockIdx.x"))
            _, lane = stage.split(column, factor=threads)
            stage.bind(lane, te.thread_axis("threadIdx.x"))
    for reduction in reductions:
        reduction.compute_at(stage, row)
        reduction.set_scope("local")
        _bind_reduction(reduction, threads)
    return True


def _bind_reduction(stage, threads: int) -> None:
    """Fuse the stage's reduction axes, split them by `threads` and bind the inner part to threadIdx.x:
    thread t reduces elements t, t + threads, ... (consecutive threads read consecutive elements)."""
    fused = fuse_all(stage, list(stage.op.reduce_axis))
    _, lane = stage.split(fused, factor=threads)
    stage.bind(lane, te.thread_axis("threadIdx.x"))
