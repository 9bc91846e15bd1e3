"""te.trace: records, JSON storage and replay on a fresh compute."""
import json

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import ScheduleError


def fused_adds():
    """Two computes both named T_add in one group, as the fuser produces them."""
    A = te.placeholder((16, 16), name="A")
    B = te.compute((16, 16), lambda i, j: A[i, j] + 1.0, name="T_add")
    C = te.compute((16, 16), lambda i, j: B[i, j] + 2.0, name="T_add")
    return A, B, C


def test_same_named_stages_are_unique_and_the_trace_names_each_once():
    A, B, C = fused_adds()
    s = te.create_schedule(C.op)
    assert [st.name for st in s.stages] == ["T_add", "T_add.1"]
    assert s[B].name == "T_add" and s[C].name == "T_add.1" and s["T_add.1"] is s[C]
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].split(C.op.axis[1], factor=4)
    assert s.trace == (te.trace.ComputeAt("T_add", "T_add.1", "i"), te.trace.Split("T_add.1", "j", 4))
    A2, B2, C2 = fused_adds()
    s2 = te.replay(s.trace, te.create_schedule(C2.op))
    assert s2[B2].attach_stage is s2[C2]
    tir.assert_structural_equal(te.lower(s, [A, C]), te.lower(s2, [A2, C2]))


def test_cache_stage_names_stay_unique():
    A, B, C = fused_adds()
    s = te.create_schedule(C.op)
    s.cache_read(A, "local", [s[B]])
    BL = s.cache_write(C, "local")
    assert [st.name for st in s.stages] == ["A.local", "T_add", "T_add.1.local", "T_add.1"]
    assert s[BL].name == "T_add.1.local"
    assert s.trace[-1] == te.trace.CacheWrite("T_add.1", "local")


def test_trace_round_trips_through_json_and_replays():
    A, B, C = fused_adds()
    s = te.create_schedule(C.op)
    s.cache_read(A, "shared", [s[B]])
    xo, yo, xi, yi = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[C].vectorize(yi)
    s[C].pragma(xo, "unroll_explicit", 1)
    text = te.trace.to_json(s.trace)
    assert json.loads(text)[0] == {"primitive": "CacheRead", "tensor": "A", "scope": "shared", "readers": ["T_add"]}
    records = te.trace.from_json(text)
    assert records == s.trace
    A2, B2, C2 = fused_adds()
    s2 = te.replay(json.loads(text), te.create_schedule(C2.op))   # dicts replay too
    tir.assert_structural_equal(te.lower(s, [A, C]), te.lower(s2, [A2, C2]))


def test_replay_error_names_the_record():
    A, B, C = fused_adds()
    bad = (te.trace.Split("T_add.1", "i", 4), te.trace.Split("T_add.1", "k", 2))
    with pytest.raises(ScheduleError, match=r"replay: record 1 Split\(stage='T_add.1', axis='k'.*no axis named 'k'"):
        te.replay(bad, te.create_schedule(C.op))
    with pytest.raises(ScheduleError, match=r"trace record Splitt: unknown primitive|unknown primitive 'Splitt'"):
        te.trace.from_json('[{"primitive": "Splitt", "stage": "T_add"}]')


def _matmul():
    A = te.placeholder((8, 8), name="A")
    B = te.placeholder((8, 8), name="B")
    k = te.reduce_axis((0, 8), name="k")
    C = te.compute((8, 8), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return te.create_schedule(C.op), (A, B, C)


def _tensorized(intrin):
    s, (A, B, C) = _matmul()
    io, ii = s[C].split(C.op.axis[0], factor=4)
    s[C].tensorize(ii, intrin)
    return s, (A, B, C)


def _gemm_intrinsic():
    M, N, K = te.var("M"), te.var("N"), te.var("K")
    a = te.placeholder((M, K), name="a")
    b = te.placeholder((K, N), name="b")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="c")
    return te.decl_tensor_intrin(c, "gemm_accelerator")


def test_tensorize_record_stores_the_intrinsic_by_name_and_replays_from_json():
    intrin = _gemm_intrinsic()
    s, (A, B, C) = _tensorized(intrin)
    text = te.trace.to_json(s.trace)
    assert json.loads(text)[-1] == {"primitive": "Tensorize", "stage": "C", "axis": "i.inner",
                                    "intrin_name": "gemm_accelerator"}
    fresh, (A2, B2, C2) = _matmul()
    with pytest.raises(ScheduleError, match=r"record 1 .*holds only the intrinsic's name 'gemm_accelerator'; "
                                            r"pass intrinsics="):
        te.replay(te.trace.from_json(text), fresh)
    fresh, (A2, B2, C2) = _matmul()
    te.replay(te.trace.from_json(text), fresh, intrinsics={"gemm_accelerator": intrin})
    func = te.lower(fresh, [A2, B2, C2])
    a, b = np.eye(8, dtype="float32") * 2, np.arange(64, dtype="float32").reshape(8, 8)
    c = np.zeros((8, 8), "float32")
    tir.interpret(func, a, b, c)
    np.testing.assert_allclose(c, a @ b)


def test_tensorize_replay_picks_the_intrinsic_from_a_targets_list():
    s, _ = _tensorized(_gemm_intrinsic())
    fresh, _ = _matmul()
    te.replay(te.trace.from_json(te.trace.to_json(s.trace)), fresh, intrinsics=tk.intrinsics("llvm"))
    inner = fresh["C"].leaf_iter_vars[1]
    assert inner.name == "i.inner"
    assert fresh["C"].iter_attrs[inner].tensorize.name == "gemm_accelerator"
