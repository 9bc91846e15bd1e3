"""schedule_fused on fused groups: conv2d + bias_add + relu + residual add, dense + bias + relu,
checked against numpy and for the loop structure a CPU schedule should have."""
from types import SimpleNamespace

import numpy as np
import pytest

from tensorkiln import te, tir
from tensorkiln.graph import get_op
from tensorkiln.graph.ops.nn import BiasAddAttrs, Conv2DAttrs
from tensorkiln.graph.types import TensorType
from tensorkiln.ops import schedule_for
from tensorkiln.ops.schedule import find_anchor, schedule_fused, vector_lanes

from .harness import LLVM, llvm_available, run_schedule


def _conv_group(shape, out_channels, kernel=3):
    """te DAG of relu(conv2d(x, w) + bias) + residual, built through the registry computes."""
    batch, channels, height, width = shape
    attrs = Conv2DAttrs(padding=(kernel // 2,) * 4)
    x = te.placeholder(shape, "float32", name="x")
    w = te.placeholder((out_channels, channels, kernel, kernel), "float32", name="w")
    b = te.placeholder((out_channels,), "float32", name="b")
    r = te.placeholder((batch, out_channels, height, width), "float32", name="r")
    out_type = TensorType((batch, out_channels, height, width), "float32")
    conv = get_op("nn.conv2d").compute([x, w], attrs, out_type)
    biased = get_op("nn.bias_add").compute([conv, b], BiasAddAttrs(), out_type)
    relu = get_op("nn.relu").compute([biased], None, out_type)
    out = get_op("add").compute([relu, r], None, out_type)
    return [x, w, b, r], out, conv


def _conv_group_reference(x, w, b, r):
    conv = get_op("nn.conv2d").reference(x, w, Conv2DAttrs(padding=(w.shape[2] // 2,) * 4))
    return np.maximum(conv + b[None, :, None, None], 0) + r


def _random(rng, *shapes):
    return [rng.uniform(-1, 1, size=s).astype("float32") for s in shapes]


def _loops(func):
    found = []
    tir.visit.post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, tir.For) else None)
    return found


def test_anchor_of_a_conv_group_is_the_conv():
    _, out, conv = _conv_group((1, 4, 6, 6), 8)
    assert find_anchor([out]).op is conv.op


def test_fused_conv_group_inlines_epilogue_and_accumulates_per_tile():
    inputs, out, conv = _conv_group((1, 4, 6, 8), 8)
    s = schedule_fused([out], LLVM)
    stages = {stage.name: stage for stage in s.stages}
    assert stages["T_bias_add"].attach_type == "inline"
    assert stages["T_relu"].attach_type == "inline"
    assert stages["T_conv2d"].attach_type == "scope" and stages["T_conv2d"].attach_stage is s[out]
    func = te.lower(s, [*inputs, out])
    kinds = {loop.kind for loop in _loops(func)}
    assert tir.ForKind.PARALLEL in kinds
    assert "T_bias_add" not in str(func) and "T_relu" not in str(func)  # never materialized


def test_fused_conv_group_matches_numpy_interpreted():
    rng = np.random.default_rng(0)
    inputs, out, _ = _conv_group((1, 4, 5, 6), 8)
    arrays = _random(rng, (1, 4, 5, 6), (8, 4, 3, 3), (8,), (1, 8, 5, 6))
    (got,) = run_schedule(schedule_fused([out], LLVM), inputs, [out], arrays, "interpret")
    np.testing.assert_allclose(got, _conv_group_reference(*arrays), rtol=1e-4, atol=1e-5)


def test_fused_conv_group_matches_numpy_compiled():
    rng = np.random.default_rng(1)
    inputs, out, _ = _conv_group((1, 16, 14, 14), 32)
    arrays = _random(rng, (1, 16, 14, 14), (32, 16, 3, 3), (32,), (1, 32, 14, 14))
    (got,) = run_schedule(schedule_for([out], LLVM), inputs, [out], arrays, "llvm")
    np.testing.assert_allclose(got, _conv_group_reference(*arrays), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", ["interpret", "llvm"])
def test_fused_dense_bias_relu_matches_numpy(backend):
    m, n, k = (4, 16, 8) if backend == "interpret" else (64, 96, 128)
    x = te.placeholder((m, k), "float32", name="x")
    w = te.placeholder((n, k), "float32", name="w")
    b = te.placeholder((n,), "float32", name="b")
    out_type = TensorType((m, n), "float32")
    dense = get_op("nn.dense").compute([x, w], None, out_type)
    out = get_op("nn.relu").compute([get_op("nn.bias_add").compute([dense, b], BiasAddAttrs(axis=-1), out_type)],
                                    None, out_type)
    arrays = _random(np.random.default_rng(2), (m, k), (n, k), (n,))
    (got,) = run_schedule(schedule_fused([out], LLVM), [x, w, b], [out], arrays, backend)
    np.testing.assert_allclose(got, np.maximum(arrays[0] @ arrays[1].T + arrays[2], 0), rtol=1e-4, atol=1e-4)


def _fake_target(vector_width_bits: int, max_threads: int):
    """Schedules read capabilities only, so any object with them is a target."""
    return SimpleNamespace(capabilities=SimpleNamespace(vector_width_bits=vector_width_bits, max_threads=max_threads))


def test_vector_lanes_come_from_capabilities():
    assert vector_lanes(_fake_target(256, 0), "float32") == 8
    assert vector_lanes(_fake_target(512, 0), "int8") == 16   # capped
    assert vector_lanes(_fake_target(0, 0), "float32") == 1


def test_scalar_single_thread_target_gets_no_vector_or_parallel_loops():
    inputs, out, _ = _conv_group((1, 4, 6, 8), 8)
    func = te.lower(schedule_fused([out], _fake_target(0, 1)), [*inputs, out])
    kinds = {loop.kind for loop in _loops(func)}
    assert tir.ForKind.PARALLEL not in kinds and tir.ForKind.VECTORIZED not in kinds
    assert "ramp" not in str(func)


def test_wide_vector_target_vectorizes_the_conv_tile():
    inputs, out, _ = _conv_group((1, 4, 6, 8), 8)
    func = te.lower(schedule_fused([out], _fake_target(256, 0)), [*inputs, out])
    assert "ramp" in str(func)
