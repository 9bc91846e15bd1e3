"""te/trace.py: one frozen record per schedule primitive, replayable on a fresh compute.

`s[C].split(C.op.axis[0], factor=32)` appends `Split(stage="C", axis="i", factor=32)` to
`s.trace`. Stages and axes are named, never referenced, so a trace can be stored,
compared, mutated and replayed:

    s2 = te.create_schedule(fresh_C.op)
    te.replay(s.trace, s2)          # same loop nest as s
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..ir.errors import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule

__all__ = ["Record", "Split", "Fuse", "Reorder", "Tile", "Unroll", "Vectorize", "Parallel",
           "ComputeAt", "ComputeInline", "ComputeRoot", "Bind", "Pragma", "StorageAlign",
           "Tensorize", "CacheRead", "CacheWrite", "SetScope", "replay"]


class Record:
    """Base of trace records; `apply(schedule)` replays the primitive on `schedule`."""

    def apply(self, schedule: "Schedule"):
        raise NotImplementedError


@dataclass(frozen=True)
class Split(Record):
    stage: str
    axis: str
    factor: int | None = None
    nparts: int | None = None

    def apply(self, s):
        return s[self.stage].split(self.axis, factor=self.factor, nparts=self.nparts)


@dataclass(frozen=True)
class Fuse(Record):
    stage: str
    axes: tuple[str, ...]

    def apply(self, s):
        return s[self.stage].fuse(*self.axes)


@dataclass(frozen=True)
class Reorder(Record):
    stage: str
    axes: tuple[str, ...]

    def apply(self, s):
        return s[self.stage].reorder(*self.axes)


@dataclass(frozen=True)
class Tile(Record):
    stage: str
    x: str
    y: str
    x_factor: int
    y_factor: int

    def apply(self, s):
        return s[self.stage].tile(self.x, self.y, self.x_factor, self.y_factor)


@dataclass(frozen=True)
class Unroll(Record):
    stage: str
    axis: str

    def apply(self, s):
        return s[self.stage].unroll(self.axis)


@dataclass(frozen=True)
class Vectorize(Record):
    stage: str
    axis: str

    def apply(self, s):
        return s[self.stage].vectorize(self.axis)


@dataclass(frozen=True)
class Parallel(Record):
    stage: str
    axis: str

    def apply(self, s):
        return s[self.stage].parallel(self.axis)


@dataclass(frozen=True)
class ComputeAt(Record):
    stage: str
    target: str
    axis: str

    def apply(self, s):
        return s[self.stage].compute_at(s[self.target], self.axis)


@dataclass(frozen=True)
class ComputeInline(Record):
    stage: str

    def apply(self, s):
        return s[self.stage].compute_inline()


@dataclass(frozen=True)
class ComputeRoot(Record):
    stage: str

    def apply(self, s):
        return s[self.stage].compute_root()


@dataclass(frozen=True)
class Bind(Record):
    stage: str
    axis: str
    thread_tag: str

    def apply(self, s):
        from .tensor import thread_axis
        return s[self.stage].bind(self.axis, thread_axis(self.thread_tag))


@dataclass(frozen=True)
class Pragma(Record):
    stage: str
    axis: str
    key: str
    value: object = None

    def apply(self, s):
        return s[self.stage].pragma(self.axis, self.key, self.value)


@dataclass(frozen=True)
class StorageAlign(Record):
    stage: str
    axis: str
    factor: int
    offset: int

    def apply(self, s):
        return s[self.stage].storage_align(self.axis, self.factor, self.offset)


@dataclass(frozen=True)
class Tensorize(Record):
    """`intrin` is kept for replay in-process; a stored trace is resolved by `intrin_name`."""

    stage: str
    axis: str
    intrin_name: str
    intrin: object = field(default=None, compare=False, repr=False)

    def apply(self, s):
        if self.intrin is None:
            raise ScheduleError(f"replay Tensorize on stage {self.stage}: intrinsic {self.intrin_name!r} "
                                "is not attached to the record; look it up and rebuild the record")
        return s[self.stage].tensorize(self.axis, self.intrin)


@dataclass(frozen=True)
class CacheRead(Record):
    tensor: str
    scope: str
    readers: tuple[str, ...]

    def apply(self, s):
        return s.cache_read(s.tensor_by_name(self.tensor), self.scope, [s[r] for r in self.readers])


@dataclass(frozen=True)
class CacheWrite(Record):
    tensor: str
    scope: str

    def apply(self, s):
        return s.cache_write(s.tensor_by_name(self.tensor), self.scope)


@dataclass(frozen=True)
class SetScope(Record):
    stage: str
    scope: str

    def apply(self, s):
        return s[self.stage].set_scope(self.scope)


def replay(trace, schedule: "Schedule") -> "Schedule":
    """Apply every record of `trace` to `schedule` (built on a fresh, same-named compute)."""
    for record in trace:
        record.apply(schedule)
    return schedule
