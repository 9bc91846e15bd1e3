"""If, Loop and Scan: imported from ONNX, compiled for cpu_llvm, run by the executor, and checked
against onnxruntime and the numpy reference interpreter (which runs bodies with the interpreter)."""
from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import RuntimeLaunchError, ShapeError

from .onnx_models import branch, early_ending_loop, const_node, if_in_loop, if_model, model, tensor

RNG = np.random.default_rng(0)


def _check(m, feeds_list, lib=None):
    """Compile `m` once; for each feeds: compiled == onnxruntime == reference interpreter."""
    session = ort.InferenceSession(m.SerializeToString())
    mod = from_onnx(m)
    lib = lib or tk.compile(mod, "cpu_llvm")
    for feeds in feeds_list:
        want = session.run(None, feeds)
        reference = graph.evaluate(mod, feeds)
        reference = reference if isinstance(reference, list) else [reference]
        got = lib.run(feeds)
        assert len(got) == len(want)
        for w, r, g in zip(want, reference, got):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
            np.testing.assert_allclose(r, w, rtol=1e-5, atol=1e-5)
    return lib


def test_if_chooses_the_branch_at_run_time_with_outer_scope_values():
    m = if_model()
    positive = np.abs(RNG.standard_normal((3, 4))).astype(np.float32)
    lib = _check(m, [{"x": positive}, {"x": -positive}])
    assert [step.ops for step in lib.plan.steps if "if" in step.ops] == [("if",)]
    # both branches are compiled: each is a model of its own held by the step
    (program,) = lib.host_programs.values()
    assert len(program.bodies) == 2


def test_if_with_a_constant_condition_is_folded_at_import():
    then = branch("then", [h.make_node("Neg", ["x"], ["t"])], "t", (2,))
    other = branch("else", [h.make_node("Abs", ["x"], ["e"])], "e", (2,))
    for flag in (True, False):
        m = model([const_node("c", np.array(flag)), h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
                  [tensor("x", (2,))], [tensor("y", (2,))])
        mod = from_onnx(m)
        assert not [n for n in graph.post_order(mod.main.body) if isinstance(n, graph.Call) and n.op.name == "if"]
        _check(m, [{"x": np.array([-1.5, 2.0], np.float32)}])


def test_if_whose_condition_folds_in_the_graph_passes_compiles_only_the_branch_taken():
    x = graph.var("x", (4,))
    p = graph.Var("p", x.checked_type)
    then_fn = graph.Function((p,), graph.call("exp", p))
    else_fn = graph.Function((graph.Var("q", x.checked_type),), graph.const(np.ones(4, np.float32)))
    # the condition is computed from constants: the pass pipeline folds it, then the if is inlined
    cond = graph.call("greater", graph.const(np.float32(2)), graph.const(np.float32(1)))
    expr = graph.call("if", cond, x, then_branch=then_fn, else_branch=else_fn)
    lib = tk.compile(graph.Module.from_expr(expr), "cpu_llvm")
    assert lib.host_programs == {}
    value = np.linspace(-1, 1, 4).astype(np.float32)
    np.testing.assert_allclose(lib(value), np.exp(value), rtol=1e-6)


def test_if_branches_of_different_shapes_are_refused_with_a_clear_error():
    then = branch("then", [h.make_node("Identity", ["x"], ["t"])], "t", (2,))
    other = branch("else", [h.make_node("Concat", ["x", "x"], ["e"], axis=0)], "e", (4,))
    nodes = [h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    m = model(nodes, [tensor("c", (), T.BOOL), tensor("x", (2,))], [h.make_tensor_value_info("y", T.FLOAT, ["n"])])
    with pytest.raises(ShapeError, match="branches return different types"):
        from_onnx(m)


def test_nested_if_inside_loop_with_outer_scope_capture():
    m = if_in_loop(5)
    feeds = [{"x": RNG.standard_normal((2, 3)).astype(np.float32), "y0": RNG.standard_normal((2, 3)).astype(np.float32)}
             for _ in range(2)]
    lib = _check(m, feeds)
    (program,) = lib.host_programs.values()
    (body,) = program.bodies
    assert [p.attrs.__class__.__name__ for p in body.host_programs.values()] == ["IfAttrs"]


def test_loop_with_a_run_time_condition_and_no_trip_count():
    """while (sum(y) < limit) y = y * 2 + 1: the condition is computed in the body; no scan outputs."""
    body = h.make_graph([
        const_node("two", np.float32(2)), const_node("one", np.float32(1)),
        h.make_node("Mul", ["y_in", "two"], ["y2"]), h.make_node("Add", ["y2", "one"], ["y_out"]),
        h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0), h.make_node("Less", ["s", "limit"], ["cond_out"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (3,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (3,))])
    nodes = [const_node("c", np.array(True)), h.make_node("Loop", ["", "c", "y0"], ["y"], body=body)]
    m = model(nodes, [tensor("y0", (3,)), tensor("limit", ())], [tensor("y", (3,))])
    _check(m, [{"y0": np.array([0.5, 1, 2], np.float32), "limit": np.array(limit, np.float32)} for limit in (1, 50, 1e4)])


def test_loop_whose_condition_ends_it_early_cannot_have_static_scan_outputs():
    m = early_ending_loop()
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    y0 = np.ones(2, np.float32)
    got = lib.run({"y0": y0, "stop": np.array(10, np.float32)})   # runs all 4 iterations: static shapes hold
    np.testing.assert_array_equal(got[1], np.ones((4, 2), np.float32))
    with pytest.raises(RuntimeLaunchError, match="ran 2 iterations"):
        lib.run({"y0": y0, "stop": np.array(1, np.float32)})


def test_scan_with_reverse_directions_axes_and_a_captured_value():
    """Scan-16: a running sum of x (scanned along axis 1, reversed) times an outer w; outputs on axis 1."""
    body = h.make_graph([
        h.make_node("Mul", ["x_t", "w"], ["xw"]), h.make_node("Add", ["s_in", "xw"], ["s_out"]),
        h.make_node("Identity", ["s_out"], ["y_t"]),
    ], "body", [tensor("s_in", (3,)), tensor("x_t", (3,))], [tensor("s_out", (3,)), tensor("y_t", (3,))])
    nodes = [h.make_node("Sigmoid", ["v"], ["w"]),
             h.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                         scan_input_axes=[1], scan_input_directions=[1], scan_output_axes=[-1],
                         scan_output_directions=[1])]
    m = model(nodes, [tensor("s0", (3,)), tensor("x", (3, 6)), tensor("v", (3,))],
              [tensor("s", (3,)), tensor("y", (3, 6))])
    _check(m, [{"s0": RNG.standard_normal(3).astype(np.float32), "x": RNG.standard_normal((3, 6)).astype(np.float32),
                "v": RNG.standard_normal(3).astype(np.float32)}])


def test_loop_body_type_change_is_refused():
    body = h.make_graph([h.make_node("Concat", ["y_in", "y_in"], ["y_out"], axis=0),
                         h.make_node("Identity", ["cond"], ["cond_out"])],
                        "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (2,))],
                        [tensor("cond_out", (), T.BOOL), h.make_tensor_value_info("y_out", T.FLOAT, ["n"])])
    nodes = [const_node("M", np.int64(3)), h.make_node("Loop", ["M", "", "y0"], ["y"], body=body)]
    m = model(nodes, [tensor("y0", (2,))], [h.make_tensor_value_info("y", T.FLOAT, ["n"])])
    with pytest.raises(ShapeError, match="changes the types of its carried values"):
        from_onnx(m)


def test_control_flow_models_cannot_be_exported_yet(tmp_path):
    lib = tk.compile(from_onnx(if_model()), "cpu_llvm")
    with pytest.raises(tk.ir.errors.ArtifactError, match="control flow"):
        lib.export(tmp_path / "model.tkpkg")


def test_bodies_print_nested_in_the_text_form():
    text = str(from_onnx(if_in_loop(3)))
    assert "loop(3i64, True, %y0, %x, body=fn (%i: int64()" in text
    assert "then_branch=fn (%y_in: float32(2, 3)" in text and "else_branch=fn (" in text


def test_control_flow_runs_from_several_threads_and_without_optimizations():
    from concurrent.futures import ThreadPoolExecutor
    m = if_in_loop(4)
    session = ort.InferenceSession(m.SerializeToString())
    lib = tk.compile(from_onnx(m), "cpu_llvm", opt_level=0)
    feeds = [{"x": RNG.standard_normal((2, 3)).astype(np.float32), "y0": RNG.standard_normal((2, 3)).astype(np.float32)}
             for _ in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lib.run, feeds))
    for got, feed in zip(results, feeds):
        for g, w in zip(got, session.run(None, feed)):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_control_flow_on_a_device_target_with_its_own_memory():
    from tensorkiln.sdk.plugin_manager import registry
    if "opencl" not in registry().names() or not registry().targets["opencl"].is_available:
        pytest.skip("the opencl plugin or an OpenCL device is not available")
    m = if_in_loop(3)
    feeds = {"x": RNG.standard_normal((2, 3)).astype(np.float32), "y0": RNG.standard_normal((2, 3)).astype(np.float32)}
    got = tk.compile(from_onnx(m), "opencl").run(feeds)
    for g, w in zip(got, ort.InferenceSession(m.SerializeToString()).run(None, feeds)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_loop_with_a_trip_count_from_a_graph_input_through_the_standard_backend_protocol():
    """onnx's protocol (prepare(model), run(list)): the trip count of a Loop with scan outputs is a
    graph input, so tk.compile specialises on its value at run time (one compile per value)."""
    from tensorkiln.onnx_backend import backend_for
    body = h.make_graph([
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["x", "fi"], ["xi"]),
        h.make_node("Add", ["y_in", "xi"], ["y_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
        h.make_node("Identity", ["y_out"], ["scan"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (2,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (2,)), tensor("scan", (2,))])
    nodes = [h.make_node("Loop", ["M", "", "y0"], ["y", "s"], body=body)]
    m = model(nodes, [tensor("M", (), T.INT64), tensor("x", (2,)), tensor("y0", (2,))],
              [tensor("y", (2,)), h.make_tensor_value_info("s", T.FLOAT, ["n", 2])])
    rep = backend_for("cpu_llvm").prepare(m)
    session = ort.InferenceSession(m.SerializeToString())
    x, y0 = np.array([1, -2], np.float32), np.array([0.5, 0.25], np.float32)
    for trips in (3, 5):
        feeds = [np.array(trips, np.int64), x, y0]
        got = rep.run(feeds)
        want = session.run(None, dict(zip(["M", "x", "y0"], feeds)))
        assert got[1].shape == (trips, 2)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_loop_with_a_run_time_trip_count_and_only_carried_values_compiles_once():
    body = h.make_graph([h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Add", ["y_in", "fi"], ["y_out"]),
                         h.make_node("Identity", ["cond"], ["cond_out"])],
                        "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (3,))],
                        [tensor("cond_out", (), T.BOOL), tensor("y_out", (3,))])
    m = model([h.make_node("Loop", ["M", "", "y0"], ["y"], body=body)], [tensor("M", (), T.INT64), tensor("y0", (3,))],
              [tensor("y", (3,))])
    lib = _check(m, [{"M": np.array(trips, np.int64), "y0": np.zeros(3, np.float32)} for trips in (0, 1, 7)])
    assert [step.ops for step in lib.plan.steps] == [("loop",)]
