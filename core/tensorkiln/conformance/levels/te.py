"""conformance/levels/te.py: every schedule primitive the target claims, built with tk.build vs numpy.

Each primitive is applied to a small compute (elementwise, producer/consumer, row
reduction); the kernel is built for the target and compared with numpy. On a
target with thread axes the outer loops are bound to blockIdx.x / threadIdx.x,
as a GPU schedule would do. `tensorize` is exercised by the intrinsics level.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from ..catalogue import Check, KitOptions, stage
from ..compare import assert_close

__all__ = ["checks", "SCHEDULES"]

_N, _M = 12, 20


def _gpu(target: Any) -> bool:
    axes = target.capabilities.thread_axes
    return "blockIdx.x" in axes and "threadIdx.x" in axes


def _bind(s, stage_tensor, block=None, thread=None) -> None:
    from ... import te
    if block is not None:
        s[stage_tensor].bind(block, te.thread_axis("blockIdx.x"))
    if thread is not None:
        s[stage_tensor].bind(thread, te.thread_axis("threadIdx.x"))


def _elementwise():
    from ... import te
    a = te.placeholder((_N, _M), "float32", name="A")
    b = te.compute((_N, _M), lambda i, j: a[i, j] * 2.0 + 1.0, name="B")
    return a, b, lambda x: x * 2.0 + 1.0


def _two_stage():
    from ... import te
    a = te.placeholder((_N, _M), "float32", name="A")
    p = te.compute((_N, _M), lambda i, j: a[i, j] * 3.0, name="P")
    b = te.compute((_N, _M), lambda i, j: p[i, j] + 1.0, name="B")
    return a, p, b, lambda x: x * 3.0 + 1.0


def _row_sum():
    from ... import te
    a = te.placeholder((_N, _M), "float32", name="A")
    k = te.reduce_axis((0, _M), name="k")
    b = te.compute((_N,), lambda i: te.sum(a[i, k], axis=k), name="B")
    return a, b, lambda x: x.sum(axis=1)


# Each schedule: (target, gpu) -> (schedule, [tensors], numpy function of the input)

def _split(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    i, j = b.op.axis
    jo, ji = s[b].split(j, factor=6)  # 20 = 3 * 6 + 2: the tail must be guarded
    if gpu:
        _bind(s, b, i, jo)
    return s, [a, b], ref


def _fuse(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    fused = s[b].fuse(*b.op.axis)
    if gpu:
        outer, inner = s[b].split(fused, factor=32)
        _bind(s, b, outer, inner)
    return s, [a, b], ref


def _reorder(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    i, j = b.op.axis
    s[b].reorder(j, i)
    if gpu:
        _bind(s, b, j, i)
    return s, [a, b], ref


def _tile(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    i, j = b.op.axis
    io, jo, ii, ji = s[b].tile(i, j, 4, 8)
    if gpu:
        _bind(s, b, io, ii)
    return s, [a, b], ref


def _annotated(kind: str):
    def schedule(target, gpu):
        from ... import te
        a, b, ref = _elementwise()
        s = te.create_schedule(b.op)
        i, j = b.op.axis
        jo, ji = s[b].split(j, factor=4)
        getattr(s[b], kind)(ji if kind != "parallel" else i)
        if gpu:
            _bind(s, b, i, jo)
        return s, [a, b], ref
    return schedule


def _pragma(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    i, j = b.op.axis
    s[b].pragma(j, "conformance_note", 1)  # an emitter must ignore pragma keys it does not know
    if gpu:
        _bind(s, b, i, None)
    return s, [a, b], ref


def _bind_primitive(target, gpu):
    from ... import te
    a, b, ref = _elementwise()
    s = te.create_schedule(b.op)
    fused = s[b].fuse(*b.op.axis)
    outer, inner = s[b].split(fused, factor=min(64, target.capabilities.max_threads_per_block or 64))
    _bind(s, b, outer, inner)
    return s, [a, b], ref


def _compute_at(target, gpu):
    from ... import te
    a, p, b, ref = _two_stage()
    s = te.create_schedule(b.op)
    i, j = b.op.axis
    if gpu:
        _bind(s, b, i, j)
        s[p].compute_at(s[b], j)
    else:
        s[p].compute_at(s[b], i)
    return s, [a, b], ref


def _compute_inline(target, gpu):
    from ... import te
    a, p, b, ref = _two_stage()
    s = te.create_schedule(b.op)
    s[p].compute_inline()
    if gpu:
        _bind(s, b, *b.op.axis)
    return s, [a, b], ref


def _compute_root(target, gpu):
    from ... import te
    a, p, b, ref = _two_stage()
    s = te.create_schedule(b.op)
    s[p].compute_root()  # two root stages: on a GPU both run in one work-item (no grid barrier)
    return s, [a, b], ref


def _prefetch(target, gpu):
    from ... import te
    a, b, ref = _row_sum()
    s = te.create_schedule(b.op)
    (i,) = b.op.axis
    outer, inner = s[b].split(i, factor=4)
    s[b].prefetch(a, outer, 1)   # the next 4 rows: past the last block the region is empty
    s[b].prefetch(a, inner, -1)  # the row before (none before the first row of the tensor)
    if gpu:
        _bind(s, b, outer, inner)
    return s, [a, b], ref


def _storage_align(target, gpu):
    from ... import te
    a, p, b, ref = _two_stage()
    s = te.create_schedule(b.op)
    s[p].storage_align(p.op.axis[0], 8, 1)
    return s, [a, b], ref


def _cache_read(target, gpu):
    from ... import te
    a, b, ref = _row_sum()
    s = te.create_schedule(b.op)
    aa = s.cache_read(a, "local", [b])
    (i,) = b.op.axis
    if gpu:
        outer, inner = s[b].split(i, factor=4)
        _bind(s, b, outer, inner)
        s[aa].compute_at(s[b], inner)
    else:
        s[aa].compute_at(s[b], i)
    return s, [a, b], ref


def _cache_read_shared(target, gpu):
    """The seed's GPU pattern: a block's rows of A fetched into shared memory once."""
    from ... import te
    a, b, ref = _row_sum()
    s = te.create_schedule(b.op)
    aa = s.cache_read(a, "shared", [b])
    (i,) = b.op.axis
    outer, inner = s[b].split(i, factor=4)
    _bind(s, b, outer, inner)
    s[aa].compute_at(s[b], outer)
    return s, [a, b], ref


def _cache_write(target, gpu):
    from ... import te
    a, b, ref = _row_sum()
    s = te.create_schedule(b.op)
    bl = s.cache_write(b, "local")
    (i,) = b.op.axis
    outer, inner = s[b].split(i, factor=4)
    if gpu:
        _bind(s, b, outer, inner)
    s[bl].compute_at(s[b], inner)
    return s, [a, b], ref


SCHEDULES: dict[str, Callable] = {
    "split": _split, "fuse": _fuse, "reorder": _reorder, "tile": _tile, "unroll": _annotated("unroll"),
    "vectorize": _annotated("vectorize"), "parallel": _annotated("parallel"), "compute_at": _compute_at,
    "compute_inline": _compute_inline, "compute_root": _compute_root, "bind": _bind_primitive,
    "pragma": _pragma, "storage_align": _storage_align, "cache_read": _cache_read, "cache_write": _cache_write,
    "prefetch": _prefetch,
}
"""Schedule primitive -> a small schedule using it: (target, is_gpu) -> (schedule, tensors, numpy reference)."""


def _check(primitive: str, make: Callable, seed: int):
    def run(target: Any) -> None:
        import tensorkiln as tk

        with stage("compile"):
            s, tensors, ref = make(target, _gpu(target))
            module = tk.build(s, tensors, target=target, name=f"te_{primitive}")
        a = np.random.default_rng(seed).standard_normal(tuple(tensors[0].shape)).astype("float32")
        expected = ref(a).astype("float32")
        out = np.zeros(expected.shape, "float32")
        with stage("run"):
            module(a, out)
        assert_close(out, expected, 1e-5, 1e-5, what=f"{primitive} schedule")
    return run


def checks(target: Any, options: KitOptions) -> list[Check]:
    claimed = target.capabilities.schedule_primitives
    found = []
    for primitive in sorted(set(SCHEDULES) | {"tensorize"}):
        check_id, text = f"te/{primitive}", f"a schedule using {primitive} builds and matches numpy"
        if primitive == "tensorize":
            reason = "tensorize is checked per intrinsic by the intrinsics level"
            found.append(Check(check_id, "te", True, text, skip_reason=reason))
        elif primitive not in claimed:
            found.append(Check(check_id, "te", True, text, skip_reason=f"the target does not claim {primitive!r}"))
        else:
            found.append(Check(check_id, "te", True, text, _check(primitive, SCHEDULES[primitive], options.seed)))
    if "shared" in target.capabilities.memory_scopes and "cache_read" in claimed and _gpu(target):
        found.append(Check("te/cache_read/shared", "te", True, "cache_read into 'shared' at the block loop",
                           _check("cache_read_shared", _cache_read_shared, options.seed)))
    return found
