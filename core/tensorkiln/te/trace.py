"""te/trace.py: one frozen record per schedule primitive, replayable on a fresh compute.

`s[C].split(C.op.axis[0], factor=32)` appends `Split(stage="C", axis="i", factor=32)` to
`s.trace`. Stages and axes are named, never referenced, so a trace can be stored,
compared, mutated and replayed:

    s2 = te.create_schedule(fresh_C.op)
    te.replay(s.trace, s2)          # same loop nest as s

Stage names are unique within a schedule (te/schedule.py: a second `T_add` is
`T_add.1`), so every record names exactly one stage. A trace stores as JSON:

    text = te.trace.to_json(s.trace)
    # a Tensorize record holds its intrinsic's name; replay picks the intrinsic from these
    te.replay(te.trace.from_json(text), s2, intrinsics=tk.intrinsics("llvm"))
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterable, Mapping

from ..ir.errors import ScheduleError

if TYPE_CHECKING:
    from .schedule import Schedule

__all__ = ["Record", "Split", "Fuse", "Reorder", "Tile", "Unroll", "Vectorize", "Parallel",
           "ComputeAt", "ComputeInline", "ComputeRoot", "Bind", "Pragma", "Prefetch", "StorageAlign",
           "Tensorize", "CacheRead", "CacheWrite", "SetScope", "RFactor", "Pipeline", "LoopTripcount", "Partition", "Stream",
           "Dataflow", "BindParallelLoops", "replay", "to_json", "from_json"]


class Record:
    """Base of trace records; `apply(schedule)` replays the primitive on `schedule`."""

    def apply(self, schedule: "Schedule"):
        raise NotImplementedError

    def to_dict(self) -> dict:
        """`{"primitive": "Split", "stage": "C", "axis": "i", "factor": 32, "nparts": None}`."""
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.compare}
        return {"primitive": type(self).__name__, **values}


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
    factor: int | None = None

    def apply(self, s):
        return s[self.stage].unroll(self.axis, self.factor)

    def to_dict(self) -> dict:
        data = super().to_dict()
        if self.factor is None:   # a full unroll stores as it did before factors existed
            del data["factor"]
        return data


@dataclass(frozen=True)
class Pipeline(Record):
    stage: str
    axis: str
    ii: int = 1

    def apply(self, s):
        return s[self.stage].pipeline(self.axis, self.ii)


@dataclass(frozen=True)
class LoopTripcount(Record):
    stage: str
    axis: str
    min: int
    max: int
    avg: int

    def apply(self, s):
        return s[self.stage].loop_tripcount(self.axis, self.min, self.max, self.avg)


@dataclass(frozen=True)
class Partition(Record):
    stage: str
    kind: str = "complete"
    factor: int | None = None

    def apply(self, s):
        return s[self.stage].partition(self.kind, self.factor)


@dataclass(frozen=True)
class Stream(Record):
    stage: str
    depth: int

    def apply(self, s):
        return s[self.stage].stream(self.depth)


@dataclass(frozen=True)
class Dataflow(Record):
    def apply(self, s):
        return s.dataflow()


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
class Prefetch(Record):
    stage: str
    tensor: str
    axis: str
    offset: int = 1

    def apply(self, s):
        return s[self.stage].prefetch(s.tensor_by_name(self.tensor), self.axis, self.offset)


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
    """`intrin` is kept for replay in-process; it is not part of equality or JSON, and a
    record without it is resolved by `intrin_name` (see `replay`)."""

    stage: str
    axis: str
    intrin_name: str
    intrin: object = field(default=None, compare=False, repr=False)

    def apply(self, s, intrin=None):
        intrin = self.intrin if self.intrin is not None else intrin
        if intrin is None:
            raise ScheduleError(f"replay Tensorize on stage {self.stage}: the record holds only the intrinsic's "
                                f"name {self.intrin_name!r}; pass intrinsics= to te.replay: "
                                "{name: intrin}, or a target's list from tensorkiln.intrinsics(target)")
        return s[self.stage].tensorize(self.axis, intrin)


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


@dataclass(frozen=True)
class RFactor(Record):
    tensor: str
    axis: str
    factor_axis: int = 0

    def apply(self, s):
        return s.rfactor(s.tensor_by_name(self.tensor), self.axis, self.factor_axis)


@dataclass(frozen=True)
class BindParallelLoops(Record):
    stage: str
    threads: int

    def apply(self, s):
        return s[self.stage].bind_parallel_loops(self.threads)


_RECORD_TYPES: dict[str, type] = {cls.__name__: cls for cls in (
    Split, Fuse, Reorder, Tile, Unroll, Vectorize, Parallel, ComputeAt, ComputeInline, ComputeRoot, Bind,
    Pragma, Prefetch, StorageAlign, Tensorize, CacheRead, CacheWrite, SetScope, RFactor, Pipeline, LoopTripcount, Partition, Stream,
    Dataflow, BindParallelLoops)}


def record_from_dict(data: Mapping) -> Record:
    """The record `Record.to_dict` gave `data`; lists become tuples again."""
    data = dict(data)
    kind = data.pop("primitive", None)
    cls = _RECORD_TYPES.get(kind)
    if cls is None:
        raise ScheduleError(f"trace record {data!r}: unknown primitive {kind!r}; known: {', '.join(_RECORD_TYPES)}")
    names = {f.name for f in dataclasses.fields(cls) if f.compare}
    unknown = sorted(set(data) - names)
    if unknown:
        raise ScheduleError(f"trace record {kind}: unknown fields {unknown}; {kind} has {sorted(names)}")
    try:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})
    except TypeError as error:
        raise ScheduleError(f"trace record {kind} {data!r}: {error}") from None


def to_json(trace) -> str:
    """The trace as a JSON list of `Record.to_dict()` objects (no Python objects inside)."""
    try:
        return json.dumps([record.to_dict() for record in trace])
    except TypeError as error:
        raise ScheduleError(f"trace cannot be stored as JSON: {error} (a pragma value must be a "
                            "number, string, bool, None or a list of those)") from None


def from_json(text: str) -> tuple[Record, ...]:
    """The records `to_json` wrote."""
    return tuple(record_from_dict(item) for item in json.loads(text))


def replay(trace, schedule: "Schedule", *,
           intrinsics: Mapping[str, object] | Iterable[object] | None = None) -> "Schedule":
    """Apply every record of `trace` to `schedule` (built on a fresh, same-named compute).

    Records may be Record objects or their `to_dict()` form. A Tensorize record that
    holds only its intrinsic's name finds it in `intrinsics`: a {name: TensorIntrin}
    mapping, or intrinsics to pick from by name (`tensorkiln.intrinsics(target)` lists
    a target's). A record that fails raises ScheduleError naming its position and
    the record.
    """
    by_name = dict(intrinsics) if isinstance(intrinsics, Mapping) else {i.name: i for i in intrinsics or ()}
    for position, record in enumerate(trace):
        if isinstance(record, Mapping):
            record = record_from_dict(record)
        try:
            if isinstance(record, Tensorize) and record.intrin is None:
                record.apply(schedule, by_name.get(record.intrin_name))
            else:
                record.apply(schedule)
        except ScheduleError as error:
            raise ScheduleError(f"replay: record {position} {record}: {error}") from error
    return schedule
