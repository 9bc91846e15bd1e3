"""Fused groups (conv2d + bias_add + relu + residual add, dense + bias + relu) scheduled three ways:

- `schedule_fused` (tensorkiln.sdk.schedules.fused), the walker a plugin gives its table of
  anchor schedules: it inlines the epilogue and calls the table's entry for the anchor's tag;
- `schedule_for(..., LLVM)`, which reaches cpu_llvm's strategies, checked against numpy
  (cpu_llvm's loop structure is tested in plugins/cpu_llvm/tests/test_cpu_llvm_schedules.py);
- the core's naive default, what a target that declares no strategies gets.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from tensorkiln import te, tir
from tensorkiln.compiler.strategy import NAIVE, schedule_for, select_by_tag
from tensorkiln.graph import get_op
from tensorkiln.graph.ops.nn import BiasAddAttrs, Conv2DAttrs
from tensorkiln.graph.types import TensorType
from tensorkiln.ops import naive_schedule, tags
from tensorkiln.sdk.schedules import INJECTIVE_KEY, REDUCE_KEY, find_anchor, schedule_fused, vector_lanes

from .harness import LLVM, run_schedule


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


def _fake_target(vector_width_bits: int, max_threads: int):
    """A capabilities-only object: no plugin serves it, so it declares no strategies."""
    return SimpleNamespace(capabilities=SimpleNamespace(vector_width_bits=vector_width_bits, max_threads=max_threads))


# ---- the walker ---------------------------------------------------------------------------------


def test_anchor_of_a_conv_group_is_the_conv():
    _, out, conv = _conv_group((1, 4, 6, 6), 8)
    assert find_anchor([out]).op is conv.op


def _recording_table(*tags_known):
    calls = []

    def anchor_entry(s, anchor, output, target, config):
        calls.append(("anchor", anchor.op.name, output.op.name, dict(config)))

    def root_entry(kind):
        return lambda s, tensor, target, config: calls.append((kind, tensor.op.name))
    table = {REDUCE_KEY: root_entry(REDUCE_KEY), INJECTIVE_KEY: root_entry(INJECTIVE_KEY)}
    table.update({tag: anchor_entry for tag in tags_known})
    return table, calls


def test_schedule_fused_inlines_the_epilogue_and_hands_the_anchor_to_the_table():
    rng = np.random.default_rng(3)
    inputs, out, conv = _conv_group((1, 4, 5, 6), 8)
    table, calls = _recording_table(tags.CONV2D_NCHW)
    s = schedule_fused([out], "llvm", table, {"channel_block": 2})
    stages = {stage.name: stage for stage in s.stages}
    assert stages["T_bias_add"].attach_type == "inline" and stages["T_relu"].attach_type == "inline"
    assert stages["T_pad_data"].attach_type == "root"     # keep_tags: the padded input stays a stage
    assert calls == [("anchor", conv.op.name, out.op.name, {"channel_block": 2})]
    # the table's entry placed nothing here, and the schedule is still correct
    arrays = _random(rng, (1, 4, 5, 6), (8, 4, 3, 3), (8,), (1, 8, 5, 6))
    (got,) = run_schedule(s, inputs, [out], arrays, "interpret")
    np.testing.assert_allclose(got, _conv_group_reference(*arrays), rtol=1e-4, atol=1e-5)


def test_schedule_fused_schedules_an_unknown_anchor_as_a_root_reduction():
    _, out, conv = _conv_group((1, 4, 5, 6), 8)
    table, calls = _recording_table()  # no conv entry
    schedule_fused([out], "llvm", table)
    assert calls == [(REDUCE_KEY, conv.op.name), (INJECTIVE_KEY, out.op.name)]


def test_vector_lanes_come_from_capabilities():
    assert vector_lanes(_fake_target(256, 0), "float32") == 8
    assert vector_lanes(_fake_target(512, 0), "int8") == 16   # capped
    assert vector_lanes(_fake_target(0, 0), "float32") == 1


# ---- through cpu_llvm's strategies --------------------------------------------------------------


def test_llvm_schedules_a_conv_group_with_cpu_llvms_conv_strategy():
    _, out, _ = _conv_group((1, 4, 6, 8), 8)
    choice = select_by_tag([out], LLVM)
    assert (choice.name, choice.key) == ("cpu_llvm.conv2d_nchw", tags.CONV2D_NCHW)
    # the register tile's defaults follow the host's vector registers (12 x 2 with 32, 8 x 1 with 16)
    assert choice.config in ({"channel_block": 12, "width_vectors": 2}, {"channel_block": 8, "width_vectors": 1})


def test_fused_conv_group_matches_numpy_interpreted():
    rng = np.random.default_rng(0)
    inputs, out, _ = _conv_group((1, 4, 5, 6), 8)
    arrays = _random(rng, (1, 4, 5, 6), (8, 4, 3, 3), (8,), (1, 8, 5, 6))
    (got,) = run_schedule(schedule_for([out], LLVM), inputs, [out], arrays, "interpret")
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
    assert select_by_tag([out], LLVM).name == "cpu_llvm.dense"
    arrays = _random(np.random.default_rng(2), (m, k), (n, k), (n,))
    (got,) = run_schedule(schedule_for([out], LLVM), [x, w, b], [out], arrays, backend)
    np.testing.assert_allclose(got, np.maximum(arrays[0] @ arrays[1].T + arrays[2], 0), rtol=1e-4, atol=1e-4)


# ---- the naive default --------------------------------------------------------------------------


@pytest.mark.parametrize("vector_width_bits, max_threads", [(0, 1), (512, 0)])
def test_a_target_without_strategies_gets_the_naive_default(vector_width_bits, max_threads):
    """Capabilities alone make no schedule fast: only a plugin's strategies do. The naive default
    inlines the epilogue and runs every loop serially and scalar, and is correct."""
    rng = np.random.default_rng(4)
    target = _fake_target(vector_width_bits, max_threads)
    inputs, out, _ = _conv_group((1, 4, 6, 8), 8)
    assert select_by_tag([out], target).name == NAIVE
    s = schedule_for([out], target)
    stages = {stage.name: stage for stage in s.stages}
    assert stages["T_bias_add"].attach_type == "inline" and stages["T_relu"].attach_type == "inline"
    assert stages["T_conv2d"].attach_type == "root"
    func = te.lower(s, [*inputs, out])
    assert {loop.kind for loop in _loops(func)} == {tir.ForKind.SERIAL}
    assert "ramp" not in str(func)
    assert str(func) == str(te.lower(naive_schedule([out]), [*inputs, out]))
    arrays = _random(rng, (1, 4, 6, 8), (8, 4, 3, 3), (8,), (1, 8, 6, 8))
    (got,) = run_schedule(s, inputs, [out], arrays, "interpret")
    np.testing.assert_allclose(got, _conv_group_reference(*arrays), rtol=1e-4, atol=1e-5)
