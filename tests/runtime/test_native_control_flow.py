"""If, Loop and Scan inside the whole-plan native entry (runtime/native_control.py, cpu_llvm's
plan_entry_control.py): one native call per run, the Python executor's bits, onnxruntime's values,
nesting, and the steps left to Python with their reason."""
from __future__ import annotations

import ctypes
from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto as T
from onnx import helper as h

import tensorkiln as tk
from tensorkiln.frontend import from_onnx
from tensorkiln.ir.errors import RuntimeLaunchError
from tensorkiln.runtime.native_entry import NATIVE_EXECUTOR
from tensorkiln.sdk.plan_entry import PlanEntryIf, PlanEntryLoop, PlanEntryScan

from ..controlflow.onnx_models import branch, early_ending_loop, const_node, if_in_loop, if_model, model, scanning_loop, tensor

RNG = np.random.default_rng(11)


def _random(m, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    feeds = {}
    for value in m.graph.input:
        shape = [d.dim_value for d in value.type.tensor_type.shape.dim]
        feeds[value.name] = rng.standard_normal(shape).astype(np.float32)
    return feeds


def _check(m, feeds_list, kinds=None):
    """Compile `m`; it runs as one native call, and for each feeds gives the Python executor's bits and
    onnxruntime's values."""
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    if kinds is not None:
        records = [type(s.control) for s in lib.executor.native_entry.spec.steps if s.control is not None]
        assert records == kinds
    session = ort.InferenceSession(m.SerializeToString())
    for feeds in feeds_list:
        got = lib.run(feeds)
        python = lib.executor.run_with(feeds, native=False)
        want = session.run(None, feeds)
        assert len(got) == len(want)
        for g, p, w in zip(got, python, want):
            assert g.dtype == p.dtype and g.shape == p.shape
            np.testing.assert_array_equal(g, p)
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    return lib


def test_if_with_a_run_time_condition_and_outer_scope_values_runs_in_the_entry():
    m = if_model(after="Tanh")
    positive = np.abs(RNG.standard_normal((3, 4))).astype(np.float32)
    _check(m, [{"x": positive}, {"x": -positive}], [PlanEntryIf])


def test_if_branches_without_kernels_return_an_input_or_a_constant():
    then = branch("then", [h.make_node("Identity", ["x"], ["t"])], "t", (4,))
    other = branch("else", [const_node("k", np.arange(4, dtype=np.float32))], "k", (4,))
    m = model([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other), h.make_node("Neg", ["y"], ["z"])],
              [tensor("c", (), T.BOOL), tensor("x", (4,))], [tensor("z", (4,))])
    x = RNG.standard_normal(4).astype(np.float32)
    _check(m, [{"c": np.array(True), "x": x}, {"c": np.array(False), "x": x}], [PlanEntryIf])


def _counting_loop(trip: int):
    """y += x * i for i < trip (a static trip count), each y a scan output, cond passed through."""
    return scanning_loop(trip, [h.make_node("Add", ["y_in", "xi"], ["y_out"])], "Sigmoid")


def test_loop_with_a_static_trip_count_carried_values_and_scan_outputs():
    m = _counting_loop(6)
    _check(m, [_random(m, seed) for seed in range(2)], [PlanEntryLoop])


def test_loop_whose_carried_values_swap_places_each_iteration():
    """a, b = b, a + 1: a body result that is another carried input (the double buffers keep it apart)."""
    body = h.make_graph([
        const_node("one", np.float32(1)), h.make_node("Identity", ["b_in"], ["a_out"]),
        h.make_node("Add", ["a_in", "one"], ["b_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("a_in", (3,)), tensor("b_in", (3,))],
        [tensor("cond_out", (), T.BOOL), tensor("a_out", (3,)), tensor("b_out", (3,))])
    m = model([h.make_node("Loop", ["M", "", "a0", "b0"], ["a", "b"], body=body)],
              [tensor("M", (), T.INT64), tensor("a0", (3,)), tensor("b0", (3,))],
              [tensor("a", (3,)), tensor("b", (3,))])
    a0, b0 = np.array([1, 2, 3], np.float32), np.array([-1, -2, -3], np.float32)
    _check(m, [{"M": np.array(trips, np.int64), "a0": a0, "b0": b0} for trips in (0, 1, 4, 7)], [PlanEntryLoop])


def test_while_loop_ended_by_a_condition_computed_in_the_body():
    body = h.make_graph([
        const_node("two", np.float32(2)), const_node("one", np.float32(1)),
        h.make_node("Mul", ["y_in", "two"], ["y2"]), h.make_node("Add", ["y2", "one"], ["y_out"]),
        h.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0), h.make_node("Less", ["s", "limit"], ["cond_out"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (3,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (3,))])
    m = model([h.make_node("Loop", ["", "go", "y0"], ["y"], body=body)],
              [tensor("go", (), T.BOOL), tensor("y0", (3,)), tensor("limit", ())], [tensor("y", (3,))])
    y0 = np.array([0.5, 1, 2], np.float32)
    _check(m, [{"go": np.array(go), "y0": y0, "limit": np.array(limit, np.float32)}
               for go, limit in ((True, 1), (True, 50), (True, 1e4), (False, 1e4))], [PlanEntryLoop])


def test_a_loop_that_ends_before_its_static_scan_length_fails_as_in_python():
    m = early_ending_loop()
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    y0 = np.ones(2, np.float32)
    np.testing.assert_array_equal(lib.run({"y0": y0, "stop": np.array(10, np.float32)})[1], np.ones((4, 2), np.float32))
    for native in (True, False):
        with pytest.raises(RuntimeLaunchError, match="ran 2 iterations, but its scan outputs were compiled for 4"):
            lib.executor.run_with({"y0": y0, "stop": np.array(1, np.float32)}, native=native)


def _scan_model(axis: int, directions=(0, 1)):
    """A running sum of x along `axis` times an outer w, as a scan output forward and another reversed."""
    body = h.make_graph([
        h.make_node("Mul", ["x_t", "w"], ["xw"]), h.make_node("Add", ["s_in", "xw"], ["s_out"]),
        h.make_node("Identity", ["s_out"], ["y_t"]), h.make_node("Tanh", ["x_t"], ["z_t"]),
    ], "body", [tensor("s_in", (3,)), tensor("x_t", (3,))],
        [tensor("s_out", (3,)), tensor("y_t", (3,)), tensor("z_t", (3,))])
    shape = (6, 3) if axis == 0 else (3, 6)
    nodes = [h.make_node("Sigmoid", ["v"], ["w"]),
             h.make_node("Scan", ["s0", "x"], ["s", "y", "z"], body=body, num_scan_inputs=1,
                         scan_input_axes=[axis], scan_input_directions=[directions[0]],
                         scan_output_axes=[axis, axis], scan_output_directions=list(directions))]
    return model(nodes, [tensor("s0", (3,)), tensor("x", shape), tensor("v", (3,))],
                 [tensor("s", (3,)), tensor("y", shape), tensor("z", shape)])


@pytest.mark.parametrize("axis", [0, 1])
@pytest.mark.parametrize("directions", [(0, 1), (1, 0)])
def test_scan_along_each_axis_forward_and_reversed(axis, directions):
    """Axis 0 slices are read in place; axis 1 slices are gathered into a buffer and scattered back."""
    m = _scan_model(axis, directions)
    lib = _check(m, [_random(m, 3)], [PlanEntryScan])
    (step,) = [s for s in lib.executor.native_entry.spec.steps if s.control is not None]
    assert step.control.input_outer == ((1,) if axis == 0 else (3,))
    assert step.control.output_outer == ((1, 1) if axis == 0 else (3, 3))


def test_scan_over_a_3d_input_along_its_middle_axis_with_a_captured_value():
    body = h.make_graph([h.make_node("Mul", ["x_t", "w"], ["p"]), h.make_node("Add", ["s_in", "p"], ["s_out"]),
                         h.make_node("Neg", ["p"], ["y_t"])],
                        "body", [tensor("s_in", (2, 4)), tensor("x_t", (2, 4))],   # w: the outer graph's
                        [tensor("s_out", (2, 4)), tensor("y_t", (2, 4))])
    m = model([h.make_node("Scan", ["s0", "x"], ["s", "y"], body=body, num_scan_inputs=1,
                           scan_input_axes=[1], scan_output_axes=[2])],
              [tensor("s0", (2, 4)), tensor("x", (2, 5, 4)), tensor("w", (2, 4))],
              [tensor("s", (2, 4)), tensor("y", (2, 4, 5))])
    _check(m, [_random(m, 6)], [PlanEntryScan])


def _gathering_scan():
    """Scan over rows of indices accumulating table[idx]: the body's gather indices are its inputs."""
    body = h.make_graph([h.make_node("Gather", ["table", "idx_t"], ["row"], axis=0),
                         h.make_node("Add", ["acc_in", "row"], ["acc_out"])],
                        "body", [tensor("acc_in", (4,)), tensor("idx_t", (), T.INT64)], [tensor("acc_out", (4,))])
    return model([h.make_node("Scan", ["acc0", "idx"], ["acc"], body=body, num_scan_inputs=1)],
                 [tensor("acc0", (4,)), tensor("idx", (5,), T.INT64), tensor("table", (3, 4))], [tensor("acc", (4,))])


def _gathering_scan_feeds(lib) -> dict:
    """Feeds with a negative (valid) index, checked against numpy before they are returned."""
    table = RNG.standard_normal((3, 4)).astype(np.float32)
    feeds = {"acc0": np.zeros(4, np.float32), "idx": np.array([0, 2, 2, -1, 1], np.int64), "table": table}
    np.testing.assert_allclose(lib.run(feeds)[0], table[[0, 2, 2, -1, 1]].sum(0), rtol=1e-6)
    return feeds


def test_a_body_gathering_at_indices_it_is_given_checks_them_in_the_entry():
    """Scan over rows of indices: the body's gather indices are its inputs; the entry checks them before the
    kernel (generated code clamps them) and fails with the Python executor's words, naming the iteration."""
    lib = tk.compile(from_onnx(_gathering_scan()), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    feeds = _gathering_scan_feeds(lib)
    np.testing.assert_array_equal(lib.run(feeds)[0], lib.executor.run_with(feeds, native=False)[0])
    bad = {**feeds, "idx": np.array([0, 1, -4, 0, 0], np.int64)}
    with pytest.raises(RuntimeLaunchError) as python:
        lib.executor.run_with(bad, native=False)
    with pytest.raises(RuntimeLaunchError, match=r"control_scan_0\) of the native plan entry: iteration 2 of its body: "
                                                 r"take: index -4 at position \[\] is out of range") as native:
        lib.run(bad)
    assert str(native.value).endswith(str(python.value))


def test_a_body_whose_index_checks_its_entry_cannot_do_stays_in_python(monkeypatch):
    """A plugin whose entry checks no indices: the body needs Python's checks, so the scan runs in Python."""
    from tensorkiln_cpu_llvm.runtime import JITModule
    monkeypatch.setattr(JITModule, "plan_entry_index_checks", False)
    lib = tk.compile(from_onnx(_gathering_scan()), "cpu_llvm")
    kind = lib.summary()["executor"]
    assert kind.startswith("python executor: every step is a control-flow step run in Python (control_scan_0: its "
                           "body is not one native call"), kind
    feeds = _gathering_scan_feeds(lib)
    with pytest.raises(RuntimeLaunchError, match="index 3"):
        lib.run({**feeds, "idx": np.array([0, 3, 0, 0, 0], np.int64)})



def test_if_inside_a_loop_runs_as_one_native_call():
    m = if_in_loop(5)
    lib = _check(m, [_random(m, seed) for seed in range(2)], [PlanEntryLoop])
    (program,) = lib.host_programs.values()
    body_entry = program.bodies[0].executor.native_entry
    assert [type(s.control) for s in body_entry.spec.steps if s.control is not None] == [PlanEntryIf]


def test_loop_inside_an_if_and_scan_inside_the_loop():
    scan_body = h.make_graph([h.make_node("Add", ["s_in", "r_t"], ["s_out"])], "scan_body",
                             [tensor("s_in", (3,)), tensor("r_t", (3,))], [tensor("s_out", (3,))])
    loop_body = h.make_graph([
        h.make_node("Scan", ["y_in", "rows"], ["summed"], body=scan_body, num_scan_inputs=1),
        h.make_node("Sin", ["summed"], ["y_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
    ], "loop_body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (3,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (3,))])
    then = branch("then", [const_node("M", np.int64(3)),
                            h.make_node("Loop", ["M", "", "y0"], ["t"], body=loop_body)], "t", (3,))
    other = branch("else", [h.make_node("Neg", ["y0"], ["e"])], "e", (3,))
    m = model([h.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)],
              [tensor("c", (), T.BOOL), tensor("y0", (3,)), tensor("rows", (4, 3))], [tensor("y", (3,))])
    feeds = _random(m, 5)
    _check(m, [{**feeds, "c": np.array(flag)} for flag in (True, False)], [PlanEntryIf])


def test_a_failing_body_kernel_is_named_through_the_step_and_iteration():
    lib = tk.compile(from_onnx(_counting_loop(3)), "cpu_llvm")
    executor = lib.executor
    entry = executor.native_entry
    (index, step), = [(i, s) for i, s in enumerate(entry.spec.steps) if s.control is not None]
    (program,) = lib.host_programs.values()
    body = program.bodies[0]
    body_spec = body.executor.native_entry.spec
    kernel_step = next(i for i, s in enumerate(body_spec.steps) if s.args)
    broken_steps = list(body_spec.steps)
    broken_steps[kernel_step] = replace(broken_steps[kernel_step], args=broken_steps[kernel_step].args[:-1])
    broken = body.loaded_module("cpu_llvm").build_plan_entry(replace(body_spec, steps=tuple(broken_steps)))
    control = replace(step.control, body=replace(step.control.body, address=ctypes.cast(
        broken.function, ctypes.c_void_p).value))
    steps = list(entry.spec.steps)
    steps[index] = replace(step, control=control)
    parent = body.loaded_module("cpu_llvm").build_plan_entry(replace(entry.spec, steps=tuple(steps)))
    parent.bodies = {index: (broken,)}
    feeds = [np.zeros((2, 3), np.float32), np.zeros((2, 3), np.float32)]
    inputs = (ctypes.c_void_p * 2)(*(a.ctypes.data for a in feeds))
    arena = np.zeros(entry.spec.arena_bytes, np.uint8)
    kernel = body_spec.steps[kernel_step].kernel
    with pytest.raises(RuntimeLaunchError, match=rf"step {index} \({step.kernel}\) of the native plan entry: "
                                                 rf"iteration 0 of its body: step {kernel_step} \(kernel {kernel}\) "
                                                 "of the native plan entry: .*argument count"):
        parent(inputs, executor._native_constants, arena.ctypes.data)


def test_native_control_flow_from_several_threads():
    from concurrent.futures import ThreadPoolExecutor
    m = if_in_loop(4)
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    feeds = [_random(m, seed) for seed in range(8)]
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lib.run, feeds))
    for got, feed in zip(results, feeds):
        for g, p in zip(got, lib.executor.run_with(feed, native=False)):
            np.testing.assert_array_equal(g, p)


def _sigmoid_if_tanh():
    """sigmoid(If(flag) then tanh(exp(x)) else exp(x) * 3): kernels before and after the If."""
    from tensorkiln import graph
    x = graph.var("x", (4,))
    flag = graph.var("flag", (), dtype="bool")
    p, q = graph.Var("p", x.checked_type), graph.Var("q", x.checked_type)
    expr = graph.call("if", flag, graph.call("exp", x), then_branch=graph.Function((p,), graph.call("tanh", p)),
                      else_branch=graph.Function((q,), q * graph.const(np.float32(3))))
    return graph.Module.from_expr(graph.call("sigmoid", expr))


def test_a_module_whose_entry_runs_no_control_flow_keeps_the_python_steps(monkeypatch):
    from tensorkiln_cpu_llvm.runtime import JITModule
    monkeypatch.setattr(JITModule, "plan_entry_control_flow", False)   # what a plugin without it declares
    lib = tk.compile(_sigmoid_if_tanh(), "cpu_llvm")
    assert lib.summary()["executor"] == (
        "native entry (2 native calls per run, with control-flow steps in Python between them: control_if_0: "
        "target cpu_llvm's entry runs no control flow)")
    assert [(s.native, s.end - s.begin) for s in lib.executor._segments] == [(True, 1), (False, 1), (True, 1)]
    value = np.linspace(-1, 1, 4).astype(np.float32)
    for flag in (True, False):
        want = 1 / (1 + np.exp(-(np.tanh(np.exp(value)) if flag else np.exp(value) * 3)))
        np.testing.assert_allclose(lib(flag=np.array(flag), x=value), want, rtol=1e-6)


def test_an_entry_with_control_flow_is_never_linked_into_a_library():
    from tensorkiln.ir.errors import CompileError
    from tensorkiln_cpu_llvm.plan_entry import entry_object
    lib = tk.compile(_sigmoid_if_tanh(), "cpu_llvm")
    module = lib.loaded_module("cpu_llvm")
    with pytest.raises(CompileError, match="control-flow steps cannot be linked into a library"):
        entry_object(module.artifact, lib.executor.native_entry.spec, module.target)


def test_a_loop_whose_scan_length_is_a_run_time_value_runs_native_per_specialisation():
    """The trip count of a loop with scan outputs is a graph input: its output shapes depend on its value, so
    tk.compile specialises on it (runtime/specialize.py) and each specialisation has static shapes and
    runs its loop in the native entry."""
    body = h.make_graph([
        h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node("Mul", ["x", "fi"], ["xi"]),
        h.make_node("Add", ["y_in", "xi"], ["y_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
        h.make_node("Identity", ["y_out"], ["scan"]),
    ], "body", [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (2,))],
        [tensor("cond_out", (), T.BOOL), tensor("y_out", (2,)), tensor("scan", (2,))])
    m = model([h.make_node("Loop", ["M", "", "y0"], ["y", "s"], body=body)],
              [tensor("M", (), T.INT64), tensor("x", (2,)), tensor("y0", (2,))],
              [tensor("y", (2,)), h.make_tensor_value_info("s", T.FLOAT, ["n", 2])])
    lib = tk.compile(m, "cpu_llvm")
    session = ort.InferenceSession(m.SerializeToString())
    for trips in (3, 5):
        feeds = {"M": np.array(trips, np.int64), "x": np.array([1, -2], np.float32),
                 "y0": np.array([.5, .25], np.float32)}
        specialisation = lib.specialize(feeds)
        assert specialisation.summary()["executor"] == NATIVE_EXECUTOR
        got = lib.run(feeds)
        assert got[1].shape == (trips, 2)
        python = specialisation.executor.run_with({"x": feeds["x"], "y0": feeds["y0"]}, native=False)   # M is baked in
        for g, p, w in zip(got, python, session.run(None, feeds)):
            np.testing.assert_array_equal(g, p)
            np.testing.assert_allclose(g, w, rtol=1e-6)


def test_two_loops_of_one_concurrent_level_overlap_on_their_own_buffers():
    """Two independent loops (one concurrent level): run at once by the entry's team, each on its own
    body arena and carried buffers, they give the Python executor's bits."""
    def body(name, op):
        return h.make_graph([
            h.make_node("Cast", ["i"], ["fi"], to=T.FLOAT), h.make_node(op, ["y_in", "fi"], ["y_out"]),
            h.make_node("Identity", ["cond"], ["cond_out"]), h.make_node("Sin", ["y_out"], ["scan"]),
        ], name, [tensor("i", (), T.INT64), tensor("cond", (), T.BOOL), tensor("y_in", (16,))],
            [tensor("cond_out", (), T.BOOL), tensor("y_out", (16,)), tensor("scan", (16,))])
    nodes = [const_node("M", np.int64(9)),
             h.make_node("Loop", ["M", "", "a0"], ["a", "sa"], body=body("add", "Add")),
             h.make_node("Loop", ["M", "", "b0"], ["b", "sb"], body=body("mul", "Mul"))]
    m = model(nodes, [tensor("a0", (16,)), tensor("b0", (16,))],
              [tensor("a", (16,)), tensor("sa", (9, 16)), tensor("b", (16,)), tensor("sb", (9, 16))])
    lib = tk.compile(from_onnx(m), "cpu_llvm")
    executor = lib.executor
    spec = executor.native_entry.spec
    assert any(len(level) == 2 and all(spec.steps[i].control for i in level) for level in spec.levels), spec.levels
    feeds = _random(m, 8)
    expected = executor.run_with(feeds, native=False)
    storages = {s.id: s for s in lib.plan.storages}
    inputs = (ctypes.c_void_p * 2)(*(feeds[name].ctypes.data for name in ("a0", "b0")))
    for overlap in (1, 2, 3):
        arena = np.zeros(spec.arena_bytes, np.uint8)
        executor.native_entry(inputs, executor._native_constants, arena.ctypes.data, overlap)
        for value_id, want in zip(lib.plan.outputs, expected):
            value = lib.plan.values[value_id]
            offset = storages[value.storage].offset
            np.testing.assert_array_equal(arena[offset:offset + value.nbytes].view(np.float32).reshape(value.shape),
                                          want)


def test_a_long_lstm_runs_its_scan_over_time_in_the_entry():
    """recurrent.py lowers a sequence past UNROLL_LIMIT to a scan over the compiled cell: one native call."""
    from tensorkiln.frontend.onnx.converters.recurrent import UNROLL_LIMIT

    from ..controlflow.onnx_models import recurrent_feeds, recurrent_model
    m = recurrent_model("LSTM", UNROLL_LIMIT + 4, 2, 3, 5, direction="bidirectional", with_initial=True,
                        peepholes=True)
    feeds = recurrent_feeds(m)
    lib = tk.compile(m, "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    assert [type(s.control) for s in lib.executor.native_entry.spec.steps if s.control] == [PlanEntryScan] * 2
    for g, p, w in zip(lib.run(feeds), lib.executor.run_with(feeds, native=False),
                       ort.InferenceSession(m.SerializeToString()).run(None, feeds)):
        np.testing.assert_array_equal(g, p)
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=2e-5)
