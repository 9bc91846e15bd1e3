"""cpu_llvm_pack_dense_weights and nn.dense_pack: GEMMs with a constant weight read it packed at compile time.

The pass is checked where it applies (2-D matmul and dense the whole-GEMM micro-kernel runs, with a
constant weight), where it must not (weights that are inputs, batched matmuls, one-row dense), that a
shared weight is packed once, and the compiled GEMM against numpy in float64: ragged N (the last sliver
zero-padded), M below the register tile, fused epilogues, both ISAs, one and two threads, random shapes,
and an ONNX MatMul + Add against onnxruntime.
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph import Call, Constant
from tensorkiln.passes import GRAPH_PIPELINE, PassContext, PassManager
from tensorkiln.sdk.plugin_manager import registry
from tensorkiln_cpu_llvm.strategies import gemm_blocking

RNG = np.random.default_rng(23)
TARGETS = ["cpu_llvm", "cpu_llvm -mcpu=haswell"]
PER_CALL = PassContext(disabled={"cpu_llvm_pack_dense_weights"})


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _matmul_model(m, k, w, bias=None, weight_is_input=False):
    x = graph.var("x", shape=(m, k))
    weight = graph.var("w", shape=w.shape) if weight_is_input else graph.const(w)
    out = graph.nn.matmul(x, weight)
    if bias is not None:
        out = graph.nn.relu(graph.add(out, graph.const(bias)))
    inputs = [x, weight] if weight_is_input else [x]
    return graph.Module.from_expr(graph.Function(inputs, out))


def _gemm_calls(model, target) -> list[Call]:
    """The GEMM calls of `model` after the core's and the target's graph passes (before fusion lifts the
    constants into group parameters)."""
    target = registry().target(target)
    passes = (*GRAPH_PIPELINE, *registry().call("tensorkiln_passes", target))
    mod = PassManager(PassContext(opt_level=3), target).run(model, passes)
    return [node for node in graph.post_order(mod.main.body)
            if isinstance(node, Call) and getattr(node.op, "name", "") in ("nn.matmul", "nn.dense", "nn.dense_pack")]


def _strategies(lib) -> list[str]:
    return [s["strategy"] for s in lib.summary()["strategies"].values()]


@pytest.mark.parametrize("target, nr", [("cpu_llvm -mcpu=haswell", 24), ("cpu_llvm -mcpu=skylake-avx512", 32)])
def test_a_constant_matmul_weight_is_packed_in_the_default_tiles_slivers(target, nr):
    w = _random(96, 200)
    (gemm,) = _gemm_calls(_matmul_model(64, 96, w), target)
    assert gemm.op.name == "nn.dense_pack" and gemm.attrs.units == 200
    packed = gemm.args[1]
    assert isinstance(packed, Constant) and packed.value.shape == (-(-200 // nr), 96, nr)
    # packed[j // nr, k, j % nr] = B[k, j], zeros past N
    j = np.arange(200)
    np.testing.assert_array_equal(packed.value[j // nr, :, j % nr], w.T)
    assert not packed.value[-1, :, 200 % nr:].any()
    assert packed.value.ctypes.data % 64 == 0


def test_weights_that_are_inputs_batches_and_one_row_dense_keep_their_ops():
    w = _random(64, 48)
    assert [c.op.name for c in _gemm_calls(_matmul_model(32, 64, w, weight_is_input=True), "cpu_llvm")] == \
        ["nn.matmul"]
    a = graph.var("a", shape=(4, 16, 64))
    batched = graph.Module.from_expr(graph.nn.matmul(a, graph.const(_random(4, 64, 48))))
    assert [c.op.name for c in _gemm_calls(batched, "cpu_llvm")] == ["nn.matmul"]
    row = graph.var("x", shape=(1, 64))
    one_row = graph.Module.from_expr(graph.nn.dense(row, graph.const(_random(48, 64))))
    assert [c.op.name for c in _gemm_calls(one_row, "cpu_llvm")] == ["nn.dense"]
    assert [c.op.name for c in _gemm_calls(_matmul_model(32, 64, w), "cpu_llvm")] == ["nn.dense_pack"]


def test_a_shared_weight_is_packed_once():
    w = _random(64, 80)
    x, y = graph.var("x", shape=(16, 64)), graph.var("y", shape=(24, 64))
    shared = graph.const(w)
    model = graph.Module.from_expr(graph.Function([x, y], graph.tuple_(graph.nn.matmul(x, shared),
                                                                        graph.nn.matmul(y, shared))))
    calls = _gemm_calls(model, "cpu_llvm")
    assert [c.op.name for c in calls] == ["nn.dense_pack", "nn.dense_pack"]
    assert calls[0].args[1] is calls[1].args[1]
    lib = tk.compile(model, "cpu_llvm")
    xv, yv = _random(16, 64), _random(24, 64)
    out = lib.run({"x": xv, "y": yv})
    np.testing.assert_allclose(out[0], xv.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out[1], yv.astype(np.float64) @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("m, k, n", [
    (64, 256, 1024),     # a GPT block's MLP: whole slivers on both ISAs
    (64, 1024, 4096),    # B of 16 MB, rows 16 KB apart: copied into panels per call without packing
    (49, 512, 100),      # ragged N: the last sliver padded with zeros
    (3, 40, 70),         # fewer rows than the register tile
    (200, 300, 77),      # several row blocks, ragged N
    (16, 7, 40),         # K shorter than an unrolled step
])
def test_packed_gemms_match_numpy_with_a_fused_epilogue(target, threads, m, k, n):
    x, w, b = _random(m, k), _random(k, n), _random(n)
    lib = tk.compile(_matmul_model(m, k, w, b), f"{target} -num_threads={threads}")
    assert _strategies(lib) == ["cpu_llvm.dense_pack_ukernel"]
    tk.runtime.set_num_threads(threads)
    try:
        out = lib.run({"x": x})[0]
    finally:
        tk.runtime.set_num_threads(0)
    expected = np.maximum(x.astype(np.float64) @ w + b, 0)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))
    # the same model without the pass: B read per call (the reference the pass must not change)
    per_call = tk.compile(_matmul_model(m, k, w, b), target, context=PER_CALL)
    assert "cpu_llvm.dense_pack_ukernel" not in _strategies(per_call)
    np.testing.assert_allclose(out, per_call.run({"x": x})[0], rtol=1e-5, atol=1e-5 * np.sqrt(k))


@pytest.mark.parametrize("target", TARGETS)
def test_a_dense_weight_is_packed_from_its_n_k_layout(target):
    x, w = _random(40, 72), _random(56, 72)
    xv = graph.var("x", shape=x.shape)
    model = graph.Module.from_expr(graph.nn.dense(xv, graph.const(w)))
    # packing runs before transpose_dense_weights: the dense itself is packed, from W[N, K]
    (gemm,) = _gemm_calls(model, target)
    nr = gemm.args[1].value.shape[2]
    assert gemm.op.name == "nn.dense_pack"
    np.testing.assert_array_equal(gemm.args[1].value, graph.pack_dense_weight(w, nr))
    lib = tk.compile(model, target)
    assert _strategies(lib) == ["cpu_llvm.dense_pack_ukernel"]
    np.testing.assert_allclose(lib.run({"x": x})[0], x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)
    # without packing, the transposing pass still turns it into a matmul of W.T
    per_call = tk.compile(model, target, context=PER_CALL)
    assert _strategies(per_call) == ["cpu_llvm.matmul_ukernel"]
    np.testing.assert_allclose(per_call.run({"x": x})[0], x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


def test_the_packed_plan_keeps_the_weights_sliver_width():
    target = tk.target("cpu_llvm -mcpu=haswell")
    knobs = {knob.name: knob for knob in gemm_blocking.gemm_space(64, 1000, 256, target, nr=24).knobs}
    assert {int(t.split("x")[1]) for t in knobs["tile"].candidates} == {24}
    assert "pack_b" not in knobs
    plan = gemm_blocking.gemm_plan(64, 1000, 256, target, {}, "packed", nr=24)
    assert plan.tile.nr == 24 and plan.b_layout == "packed" and plan.packed_slivers == 0
    with pytest.raises(ValueError, match="does not read B packed in slivers of 24"):
        gemm_blocking.gemm_plan(64, 1000, 256, target, {"tile": "6x16"}, "packed", nr=24)


def test_a_weight_packed_for_no_tile_of_the_target_falls_back_with_the_reason():
    """nn.dense_pack written by hand with a block no register tile reads runs the generic dense schedule."""
    x, w = _random(8, 32), _random(20, 32)
    xv = graph.var("x", shape=x.shape)
    call = graph.nn.dense_pack(xv, graph.const(graph.pack_dense_weight(w, 5)), units=20)
    lib = tk.compile(graph.Module.from_expr(call), "cpu_llvm")
    (strategy,) = lib.summary()["strategies"].values()
    assert strategy["strategy"] != "cpu_llvm.dense_pack_ukernel"
    assert any("slivers of 5" in reason for name, reason in strategy["rejected"]
               if name == "cpu_llvm.dense_pack_ukernel")
    np.testing.assert_allclose(lib.run({"x": x})[0], x.astype(np.float64) @ w.T, rtol=1e-4, atol=1e-4)


@settings(max_examples=12, deadline=None)
@given(m=st.integers(1, 80), k=st.integers(1, 160), n=st.integers(8, 130), isa=st.sampled_from(TARGETS),
       epilogue=st.booleans())
def test_random_packed_gemms_match_numpy(m, k, n, isa, epilogue):
    x, w, b = _random(m, k), _random(k, n), _random(n)
    lib = tk.compile(_matmul_model(m, k, w, b if epilogue else None), isa)
    expected = x.astype(np.float64) @ w
    if epilogue:
        expected = np.maximum(expected + b, 0)
    np.testing.assert_allclose(lib.run({"x": x})[0], expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_an_onnx_matmul_with_an_initializer_matches_onnxruntime():
    onnx = pytest.importorskip("onnx")
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper, numpy_helper
    w, b = _random(256, 1000), _random(1000)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"]), helper.make_node("Add", ["y", "b"], ["z"]),
             helper.make_node("Relu", ["z"], ["out"])]
    model = helper.make_model(helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 256])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [64, 1000])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")]),
        opset_imports=[helper.make_opsetid("", 17)])
    x = _random(64, 256)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    expected = session.run(None, {"x": x})[0]
    for target in TARGETS:
        lib = tk.compile(onnx.load_from_string(model.SerializeToString()), target)
        assert _strategies(lib) == ["cpu_llvm.dense_pack_ukernel"]
        np.testing.assert_allclose(lib.run({"x": x})[0], expected, rtol=1e-4, atol=1e-3)
