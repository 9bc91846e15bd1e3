"""runtime/plan.py: the execution plan of a compiled model: values, kernel steps, storages.

Plain data (JSON round-trip, no pickle), so a model package holds it as text and
the executor runs it without the compiler. `tensorkiln.compiler.plan.build_plan`
makes one from the fused graph; memory planning then maps values to storages.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace

import numpy as np

from ..ir.dtypes import dtype_of

__all__ = ["ValueInfo", "IndexCheck", "KernelStep", "AliasStep", "PlacedConcat", "StorageInfo", "ExecutionPlan"]


@dataclass(frozen=True)
class ValueInfo:
    """One tensor the executor handles. kind: input, constant, intermediate or output.

    `alias_of` >= 0: the value is the same contiguous bytes as value `alias_of` read with another
    shape (an `AliasStep` made it, no kernel): it shares that value's storage (or its input or
    constant buffer) and keeps it live as long as the alias is read.

    `placed_in` >= 0: the value's bytes are bytes [placed_offset, placed_offset + nbytes) of value
    `placed_in`, the output of an elided concatenation (a `PlacedConcat`, no kernel): the step
    producing the value writes them there, and a read of `placed_in` reads every part at once.
    Like an alias, it has no storage of its own (`storage` is its root's: `ExecutionPlan.root`,
    at `ExecutionPlan.root_offset`).
    """

    id: int
    shape: tuple[int, ...]
    dtype: str
    kind: str
    name: str
    storage: int = -1
    alias_of: int = -1
    placed_in: int = -1
    placed_offset: int = 0

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * dtype_of(self.dtype).bytes


@dataclass(frozen=True)
class IndexCheck:
    """Input `input` (a position in the step's inputs) holds the indices of a gather (`op`, from
    ONNX node `node`): the executor checks each lies in [-n, n) before the kernel runs, with n
    `extents[0]`, or `extents[j]` for index[..., j] when `per_last_axis` (gather_nd)."""

    input: int
    extents: tuple[int, ...]
    op: str
    node: str = ""
    per_last_axis: bool = False


@dataclass(frozen=True)
class KernelStep:
    """Run kernel `kernel` of target `target` on input values, writing output values.

    `index_checks`: inputs the kernel uses as gather indices, checked before each launch
    (generated code clamps them, so an index out of range would read a wrong element).
    """

    kernel: str
    target: str
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    ops: tuple[str, ...]
    fallback_reason: str = ""
    index_checks: tuple[IndexCheck, ...] = ()


@dataclass(frozen=True)
class AliasStep:
    """A group that only reshapes (reshape, squeeze, expand_dims, a no-op transpose or layout_transform,
    a copy): its output `output` is input `input`'s bytes with another shape, so it runs no kernel and
    has no call (elided). Kept for reports (`CompiledModel.summary()["alias_steps"]`)."""

    kernel: str
    target: str
    input: int
    output: int
    ops: tuple[str, ...]
    fallback_reason: str = ""


@dataclass(frozen=True)
class PlacedConcat:
    """A concatenation elided by placement (compiler/placed_concats.py): each of `inputs` is placed in
    `output`'s bytes (`ValueInfo.placed_in`), so its producer writes it there and nothing runs for the
    concatenation. Kept for reports (`CompiledModel.summary()["placed_concats"]`)."""

    kernel: str
    target: str
    inputs: tuple[int, ...]
    output: int
    ops: tuple[str, ...]
    fallback_reason: str = ""


@dataclass(frozen=True)
class StorageInfo:
    """A planned buffer: `offset` into the arena of `target`'s memory."""

    id: int
    nbytes: int
    offset: int
    target: str


@dataclass(frozen=True)
class ExecutionPlan:
    """Values, the steps that compute them, the model's inputs and outputs, and storages.

    `concurrent_levels` groups step indices that may run at the same time. `aliases`: the
    groups elided as views (not steps: nothing runs for them; see `ValueInfo.alias_of`).
    `placed_concats`: the concatenations elided by placing their inputs in their output's bytes
    (not steps either; see `ValueInfo.placed_in`).
    """

    values: tuple[ValueInfo, ...]
    steps: tuple[KernelStep, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]
    storages: tuple[StorageInfo, ...] = ()
    concurrent_levels: tuple[tuple[int, ...], ...] = field(default=())
    aliases: tuple[AliasStep, ...] = ()
    placed_concats: tuple[PlacedConcat, ...] = ()

    def value(self, value_id: int) -> ValueInfo:
        return self.values[value_id]

    def root(self, value_id: int) -> int:
        """The value whose storage holds `value_id`'s bytes: itself, or the end of its chain of aliases
        and placements (the outermost elided concatenation it is part of)."""
        while True:
            value = self.values[value_id]
            if value.alias_of >= 0:
                value_id = value.alias_of
            elif value.placed_in >= 0:
                value_id = value.placed_in
            else:
                return value_id

    def root_offset(self, value_id: int) -> int:
        """Where `value_id`'s bytes start in its root's: the sum of the placements' offsets along the
        chain (an alias adds nothing)."""
        offset = 0
        while True:
            value = self.values[value_id]
            if value.alias_of >= 0:
                value_id = value.alias_of
            elif value.placed_in >= 0:
                offset += value.placed_offset
                value_id = value.placed_in
            else:
                return offset

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "ExecutionPlan":
        return cls(
            values=tuple(ValueInfo(**{**v, "shape": tuple(v["shape"])}) for v in data["values"]),
            steps=tuple(KernelStep(**{**s, "inputs": tuple(s["inputs"]), "outputs": tuple(s["outputs"]),
                                      "ops": tuple(s["ops"]),
                                      "index_checks": tuple(IndexCheck(**{**c, "extents": tuple(c["extents"])})
                                                            for c in s.get("index_checks", ()))})
                        for s in data["steps"]),
            inputs=tuple(data["inputs"]), outputs=tuple(data["outputs"]),
            storages=tuple(StorageInfo(**s) for s in data["storages"]),
            concurrent_levels=tuple(tuple(level) for level in data.get("concurrent_levels", ())),
            aliases=tuple(AliasStep(**{**a, "ops": tuple(a["ops"])}) for a in data.get("aliases", ())),
            placed_concats=tuple(PlacedConcat(**{**p, "inputs": tuple(p["inputs"]), "ops": tuple(p["ops"])})
                                 for p in data.get("placed_concats", ())),
        )

    def with_storages(self, values: tuple[ValueInfo, ...], storages: tuple[StorageInfo, ...]) -> "ExecutionPlan":
        return replace(self, values=values, storages=storages)
