"""tune/features.py: numbers that describe a candidate, for the cost models.

`loop_features(func)` walks a lowered kernel (tir.PrimFunc): its flops (the stores'
trip counts, two per multiply-add of a reduction), the extent of parallel loops, the
vector width, unrolling, and the bytes each parallel iteration touches (its
footprint, from the buffers it reads and writes and the trip counts under it).
`knob_features(space, config)` turns knob values into numbers (log2 of numeric
values, the candidate's index otherwise) without knowing what any knob means.
"""
from __future__ import annotations

import math

from ..tir import nodes as tir

__all__ = ["loop_features", "knob_features", "LOOP_FEATURES"]

LOOP_FEATURES = ("flops", "parallel_extent", "vector_lanes", "unrolled", "loops", "innermost_extent",
                 "footprint_bytes", "intrinsic_calls")


def _extent(loop: tir.For) -> int:
    return loop.extent.value if isinstance(loop.extent, tir.IntImm) else 1


class _Walk:
    def __init__(self) -> None:
        self.flops = 0.0
        self.parallel = 1
        self.lanes = 1
        self.unrolled = 0
        self.loops = 0
        self.innermost = []
        self.calls = 0.0
        self.bytes_under_parallel = 0.0

    def stmt(self, node, trips: float, inside_parallel: bool, per_iteration: float) -> None:
        if isinstance(node, tir.For):
            extent = _extent(node)
            self.loops += 1
            kind = node.kind
            if kind in (tir.ForKind.PARALLEL, tir.ForKind.THREAD_BINDING):
                self.parallel *= extent
                self.stmt(node.body, trips * extent, True, 1.0)
                return
            if kind == tir.ForKind.VECTORIZED:
                self.lanes = max(self.lanes, extent)
            if kind == tir.ForKind.UNROLLED:
                self.unrolled += extent
            if not isinstance(node.body, tir.For):
                self.innermost.append(extent)
            self.stmt(node.body, trips * extent, inside_parallel, per_iteration * extent)
        elif isinstance(node, tir.Store):
            reads = _count_loads(node.value)
            arithmetic = max(1, _count_arith(node.value))
            self.flops += trips * arithmetic
            if inside_parallel:
                self.bytes_under_parallel += per_iteration * (reads + 1) * _bytes(node.buffer.dtype)
        elif isinstance(node, tir.Evaluate):
            self.calls += trips
            self.flops += trips * _intrinsic_flops(node.value)
        elif isinstance(node, tir.SeqStmt):
            for child in node.stmts:
                self.stmt(child, trips, inside_parallel, per_iteration)
        elif isinstance(node, tir.IfThenElse):
            self.stmt(node.then_case, trips, inside_parallel, per_iteration)
            if node.else_case is not None:
                self.stmt(node.else_case, trips, inside_parallel, per_iteration)
        elif isinstance(node, (tir.Allocate, tir.LetStmt)):
            self.stmt(node.body, trips, inside_parallel, per_iteration)


def _bytes(dtype: str) -> int:
    digits = "".join(c for c in str(dtype) if c.isdigit())
    return max(1, int(digits) // 8) if digits else 4


def _children(expr):
    for name in getattr(type(expr), "__dataclass_fields__", {}):
        value = getattr(expr, name)
        if isinstance(value, tir.PrimExpr):
            yield value
        elif isinstance(value, tuple):
            yield from (v for v in value if isinstance(v, tir.PrimExpr))


def _count(expr, kinds) -> int:
    total = 1 if isinstance(expr, kinds) else 0
    return total + sum(_count(child, kinds) for child in _children(expr))


def _count_loads(expr) -> int:
    return _count(expr, tir.Load)


def _count_arith(expr) -> int:
    return _count(expr, (tir.Add, tir.Sub, tir.Mul, tir.Div, tir.Min, tir.Max))


def _intrinsic_flops(expr) -> float:
    """A tensor intrinsic call: its extents are unknown here; count its buffer arguments' sizes as work."""
    return float(sum(1 for _ in _children(expr)))


def loop_features(func) -> dict[str, float]:
    walk = _Walk()
    walk.stmt(func.body, 1.0, False, 1.0)
    return {"flops": walk.flops, "parallel_extent": float(walk.parallel), "vector_lanes": float(walk.lanes),
            "unrolled": float(walk.unrolled), "loops": float(walk.loops),
            "innermost_extent": float(max(walk.innermost, default=1)),
            "footprint_bytes": walk.bytes_under_parallel, "intrinsic_calls": walk.calls}


def knob_features(space, config: dict) -> list[float]:
    """One number per knob: log2 of a positive numeric value, else the value's candidate index."""
    values = []
    for knob in space.knobs:
        value = config.get(knob.name, knob.default)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            values.append(float(knob.candidates.index(value)) if value in knob.candidates else -1.0)
        else:
            values.append(math.log2(value) if value > 0 else float(value))
    return values
