"""Padded reads as a lane range and a shared condition (lane_masks.split_predicate, exprs._range_load), vs numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln_cpu_llvm.lane_masks import constant_lanes, split_predicate

RNG = np.random.default_rng(5)


def _ramp(base: int, lanes: int) -> tir.Ramp:
    return tir.Ramp(tir.const(base), tir.const(1), lanes)


def _column_inside(left: int, width: int, lanes: int) -> tir.PrimExpr:
    column = _ramp(-left, lanes)
    return tir.And(tir.GE(column, tir.Broadcast(tir.const(0), lanes)),
                   tir.LT(column, tir.Broadcast(tir.const(width), lanes)))


def test_split_predicate_finds_the_shared_condition_and_the_lanes_on():
    row = tir.Var("r")
    shared = tir.And(tir.GE(row, tir.const(1)), tir.LT(row, tir.const(29)))
    predicate = tir.And(tir.Broadcast(shared, 30), _column_inside(1, 28, 30))
    found = split_predicate(predicate, 30)
    assert found is not None
    conditions, first, stop = found
    assert (first, stop) == (1, 29) and conditions == [shared]
    # no shared condition: the lanes alone
    assert split_predicate(_column_inside(2, 3, 8), 8) == ([], 2, 5)
    # no lane on
    assert split_predicate(_column_inside(9, 3, 8), 8) == ([], 0, 0)


def test_split_predicate_refuses_other_forms():
    i = tir.Var("i")
    lane_of_a_variable = tir.LT(tir.Ramp(i, tir.const(1), 8), tir.Broadcast(tir.const(5), 8))
    assert split_predicate(lane_of_a_variable, 8) is None
    # lanes 0-1 and 6-7 on: not one range
    outside = tir.Or(tir.LT(_ramp(0, 8), tir.Broadcast(tir.const(2), 8)),
                     tir.GE(_ramp(0, 8), tir.Broadcast(tir.const(6), 8)))
    assert constant_lanes(outside, 8) == (True, True, False, False, False, False, True, True)
    assert split_predicate(outside, 8) is None


@pytest.mark.parametrize("target", ["llvm", "llvm -mcpu=haswell"])
@pytest.mark.parametrize("height,width,top,left,columns", [
    (28, 28, 1, 1, 30),    # shufflenet's 28-wide rows: lanes 1..28 of 30
    (14, 14, 1, 1, 16),
    (7, 7, 2, 1, 12),      # two zero rows above
    (5, 8, 0, 0, 8),       # every lane on in the rows inside: a plain load
    (4, 1, 1, 3, 8),       # one lane on
    (3, 6, 1, 0, 9),       # from lane 0, zeros after
])
def test_padded_rows_load_a_lane_range_and_match_numpy(target, height, width, top, left, columns):
    """P[r, q] = A[r - top, q - left] inside, else 0, each padded row one vector: no masked load is emitted
    (the range is a plain load; a row outside reads a zeroed stack slot), and P is A padded."""
    rows = height + 2 * top + 1
    a = te.placeholder((height, width), name="A")

    def padded(r, q):
        inside = tir.And(tir.And(r >= top, r < top + height), tir.And(q >= left, q < left + width))
        return te.if_then_else(inside, a[r - top, q - left], te.const(0.0, "float32"))
    out = te.compute((rows, columns), padded, name="P")
    s = te.create_schedule(out.op)
    s[out].vectorize(out.op.axis[1])
    module = tk.build(s, [a, out], target=target)
    assert "llvm.masked.load" not in module.artifact.sources["llvm-unoptimized"]
    data = RNG.uniform(-1, 1, (height, width)).astype("float32")
    result = np.full((rows, columns), 7.0, "float32")
    module(data, result)
    expected = np.zeros((rows, columns), "float32")
    expected[top:top + height, left:left + width] = data[:, :columns - left]
    np.testing.assert_array_equal(result, expected)
