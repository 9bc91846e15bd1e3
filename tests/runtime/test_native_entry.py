"""The executor's whole-plan native entry (runtime/native_entry.py): same bits as the Python
executor, the fallbacks to it and why, inputs read in place, threads, and bad inputs."""
from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.errors import RuntimeLaunchError
from tensorkiln.runtime.native_entry import NATIVE_EXECUTOR, PYTHON_EXECUTOR

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import real_graphs  # noqa: E402

RNG = np.random.default_rng(7)


def _cnn_module() -> graph.Module:
    """conv -> bias -> relu -> max pool -> flatten -> dense -> softmax, and a second output."""
    x = graph.var("x", shape=(1, 3, 12, 12), dtype="float32")
    w = graph.const(RNG.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3)
    b = graph.const(RNG.standard_normal((1, 8, 1, 1)).astype(np.float32))
    y = graph.nn.relu(graph.nn.conv2d(x, w, padding=(1, 1, 1, 1)) + b)
    y = graph.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    flat = graph.reshape(y, (1, 8 * 6 * 6))
    dense = graph.nn.dense(flat, graph.const(RNG.standard_normal((10, 288)).astype(np.float32) * 0.05))
    return graph.Module.from_expr(graph.tuple_(graph.nn.softmax(dense), graph.sigmoid(y)))


@pytest.fixture(scope="module")
def cnn():
    return _cnn_module()


@pytest.fixture(scope="module")
def cnn_lib(cnn):
    return tk.compile(cnn, target="cpu_llvm")


X = RNG.standard_normal((1, 3, 12, 12)).astype(np.float32)


def _bitwise_equal(first, second) -> None:
    assert len(first) == len(second)
    for a, b in zip(first, second):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))


def test_a_plain_model_runs_as_one_native_call_and_summary_says_so(cnn_lib, cnn):
    assert cnn_lib.executor.native_entry is not None
    assert cnn_lib.summary()["executor"] == NATIVE_EXECUTOR
    native = cnn_lib.run({"x": X})
    _bitwise_equal(native, cnn_lib.executor.run_with({"x": X}, native=False))
    for actual, expected in zip(native, graph.evaluate(cnn, {"x": X})):
        np.testing.assert_allclose(actual, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name, params", [("tcn", dict(channels=16, steps=64, layers=3)),
                                          ("shape_ops", dict(batch=2, seq=8, d=16)),
                                          ("gpt_decoder_block", dict(seq=8, d=32, heads=2))])
def test_real_graphs_give_the_same_bits_native_and_in_python(name, params):
    import onnxruntime as ort

    builder = {b.__name__: b for b in real_graphs.BUILDERS}[name]
    _, model, inputs = builder(**params)
    lib = tk.compile(model, target="cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    native = lib.run(inputs)
    _bitwise_equal(native, lib.executor.run_with(inputs, native=False))
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, inputs)
    for actual, expected in zip(native, want):
        np.testing.assert_allclose(actual, expected, rtol=1e-4, atol=1e-4)


def test_the_stateful_api_and_opt_level_0_use_the_entry_too(cnn):
    lib = tk.compile(cnn, target="cpu_llvm", opt_level=0)
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    lib.set_input("x", X)
    lib.run()
    _bitwise_equal([lib.get_output(0), lib.get_output(1)], lib.executor.run_with({"x": X}, native=False))


def test_inputs_read_in_place_or_copied_give_the_same_result(cnn_lib):
    expected = cnn_lib.executor.run_with({"x": X}, native=False)
    read_only = X.copy()
    read_only.flags.writeable = False
    strided = np.zeros((1, 3, 12, 24), np.float32)[..., ::2]
    strided[...] = X
    fortran = np.asfortranarray(X)
    for variant in (X, read_only, strided, fortran):
        _bitwise_equal(cnn_lib.run([variant]), expected)
    # the caller's array is read, never written
    before = X.copy()
    cnn_lib(X)
    np.testing.assert_array_equal(X, before)


def test_bad_inputs_get_the_clear_errors_before_native_code(cnn_lib):
    with pytest.raises(RuntimeLaunchError, match=r"input 'x' has shape \(1, 3, 12, 11\), expected \(1, 3, 12, 12\)"):
        cnn_lib(X[..., :11])
    with pytest.raises(RuntimeLaunchError, match=r"input 'x' has dtype float64, expected float32; convert"):
        cnn_lib(X.astype(np.float64))
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['x'\] were not given"):
        cnn_lib.run({})
    _bitwise_equal(cnn_lib.run([X]), cnn_lib.executor.run_with({"x": X}, native=False))   # still fine after


def test_two_threads_share_no_arena(cnn_lib):
    batches = [RNG.standard_normal((1, 3, 12, 12)).astype(np.float32) for _ in range(8)]
    expected = [cnn_lib.executor.run_with({"x": b}, native=False) for b in batches]
    with ThreadPoolExecutor(max_workers=2) as pool:
        for _ in range(5):
            results = list(pool.map(lambda b: cnn_lib.run({"x": b}), batches))
            for got, want in zip(results, expected):
                _bitwise_equal(got, want)


def test_use_native_false_and_the_profiler_run_step_by_step(cnn_lib):
    from tensorkiln.runtime.profiler import profile

    executor = cnn_lib.executor
    report = profile(cnn_lib, {"x": X}, repeat=2, warmup=0)
    assert len(report.steps) == len(cnn_lib.plan.steps) and all(s.seconds > 0 for s in report.steps)
    executor.use_native = False
    try:
        assert executor.executor_kind == f"{PYTHON_EXECUTOR}: use_native is False"
        python = cnn_lib.run({"x": X})
        assert len(executor.last_step_times) == len(cnn_lib.plan.steps)
    finally:
        executor.use_native = True
    _bitwise_equal(cnn_lib.run({"x": X}), python)


def test_control_flow_steps_run_inside_the_native_entry_and_their_bodies_run_native():
    """The If calls its branch's own entry from inside the model's (runtime/native_control.py); a step the
    entry cannot run stays in Python between native calls (tests/runtime/test_native_control_flow.py)."""
    x = graph.var("x", (4,))
    flag = graph.var("flag", (), dtype="bool")
    p, q = graph.Var("p", x.checked_type), graph.Var("q", x.checked_type)
    expr = graph.call("if", flag, graph.call("exp", x), then_branch=graph.Function((p,), graph.call("tanh", p)),
                      else_branch=graph.Function((q,), q * graph.const(np.float32(3))))
    lib = tk.compile(graph.Module.from_expr(graph.call("sigmoid", expr)), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    assert [(s.native, s.end - s.begin) for s in lib.executor._segments] == [(True, 3)]
    value = np.linspace(-1, 1, 4).astype(np.float32)
    sigmoid = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    np.testing.assert_allclose(lib(flag=np.array(True), x=value), sigmoid(np.tanh(np.exp(value))), rtol=1e-6)
    np.testing.assert_allclose(lib(flag=np.array(False), x=value), sigmoid(np.exp(value) * 3), rtol=1e-6)
    for flag in (True, False):
        _bitwise_equal(lib.run({"flag": np.array(flag), "x": value}),
                       lib.executor.run_with({"flag": np.array(flag), "x": value}, native=False))
    (program,) = lib.host_programs.values()
    assert [body.executor.executor_kind for body in program.bodies] == [NATIVE_EXECUTOR] * 2


def test_gather_indices_computed_in_the_graph_are_checked_by_the_entry():
    """The entry checks them before the kernel (PlanEntryStep.checks), with the Python executor's words."""
    data = graph.var("data", (3, 4))
    idx = graph.var("idx", (3,), dtype="int64")
    lib = tk.compile(graph.Module.from_expr(graph.take(data, idx + graph.const(np.int64(1)), axis=0)), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    assert sum(len(s.checks) for s in lib.executor.native_entry.spec.steps) == 1
    assert not lib.executor._segments[0].checks
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(lib(data=table, idx=np.array([1, -4, 0], np.int64)), table[[2, 0, 1]])
    bad = {"data": table, "idx": np.array([0, 2, 0], np.int64)}
    with pytest.raises(RuntimeLaunchError, match=r"index 3 at position \[1\]") as native:
        lib.run(bad)
    with pytest.raises(RuntimeLaunchError) as python:
        lib.executor.run_with(bad, native=False)
    assert str(native.value) == str(python.value)


def test_gather_nd_int32_indices_are_checked_per_coordinate_by_the_entry():
    data = graph.var("data", (3, 5))
    idx = graph.var("idx", (2, 2), dtype="int32")
    lib = tk.compile(graph.Module.from_expr(graph.nn.relu(graph.gather_nd(data, idx * graph.const(np.int32(1))))),
                     "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    assert [c.per_last_axis for s in lib.executor.native_entry.spec.steps for c in s.checks] == [True]
    assert lib.executor._segments[0].checks == ()   # none left to Python
    table = np.arange(15, dtype=np.float32).reshape(3, 5) - 7
    good = np.array([[2, 4], [-3, -5]], np.int32)
    np.testing.assert_array_equal(lib(data=table, idx=good), np.maximum(table[good[:, 0], good[:, 1]], 0))
    for bad, where in ((np.array([[2, 5], [0, 0]], np.int32), r"index 5 at position \[0, 1\] \(coordinate 1"),
                       (np.array([[0, 0], [-4, 0]], np.int32), r"index -4 at position \[1, 0\] \(coordinate 0")):
        with pytest.raises(RuntimeLaunchError, match=where) as native:
            lib.run({"data": table, "idx": bad})
        with pytest.raises(RuntimeLaunchError) as python:
            lib.executor.run_with({"data": table, "idx": bad}, native=False)
        assert str(native.value) == str(python.value)


def test_gather_indices_that_are_inputs_are_checked_before_the_native_call():
    data = graph.var("data", (3, 4))
    idx = graph.var("idx", (3,), dtype="int64")
    lib = tk.compile(graph.Module.from_expr(graph.nn.relu(graph.take(data, idx, axis=0))), "cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    table = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    np.testing.assert_array_equal(lib(data=table, idx=np.array([2, -3, 1], np.int64)),
                                  np.maximum(table[[2, 0, 1]], 0))
    with pytest.raises(RuntimeLaunchError, match=r"index 3"):
        lib(data=table, idx=np.array([3, 0, 0], np.int64))


def test_an_input_that_is_also_an_output_is_returned_intact():
    x = graph.var("x", (2, 3))
    lib = tk.compile(graph.Module.from_expr(graph.tuple_(x, graph.nn.relu(x))), "cpu_llvm")
    value = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    same, relu = lib.run({"x": value})
    np.testing.assert_array_equal(same, value)
    np.testing.assert_array_equal(relu, np.maximum(value, 0))


def test_large_inputs_are_read_in_place_and_small_ones_copied():
    from tensorkiln.runtime.native_entry import IN_PLACE_BYTES

    x = graph.var("x", (256, 1024))
    y = graph.var("y", (4,))
    lib = tk.compile(graph.Module.from_expr(graph.tuple_(graph.nn.relu(x) * graph.const(np.float32(2)),
                                                         graph.exp(y))), "cpu_llvm")
    big = RNG.standard_normal((256, 1024)).astype(np.float32)
    small = np.linspace(-1, 1, 4).astype(np.float32)
    assert big.nbytes >= IN_PLACE_BYTES > small.nbytes
    executor = lib.executor
    state = executor._acquire_state()
    try:
        addresses = executor._native_inputs(state, {0: big, 1: small})
        assert addresses[0] == big.ctypes.data                      # read in place
        assert addresses[1] == state.native.state_inputs[1]         # copied into the state's buffer
        np.testing.assert_array_equal(state.host_values[executor.plan.inputs[1]], small)
    finally:
        executor._release_state(state)
    strided = np.zeros((256, 2048), np.float32)[:, ::2]
    strided[...] = big
    read_only = big.copy()
    read_only.flags.writeable = False
    expected = executor.run_with([big, small], native=False)
    for variant in (big, strided, read_only):
        _bitwise_equal(lib.run([variant, small]), expected)
    np.testing.assert_array_equal(expected[0], np.maximum(big, 0) * 2)


def test_an_exported_package_carries_the_entry_for_the_deploy_runtime(cnn_lib, tmp_path):
    from tensorkiln.runtime import deploy

    cnn_lib.export(tmp_path / "cnn.tkpkg")
    model = deploy.load(tmp_path / "cnn.tkpkg")
    assert model.executor.executor_kind == NATIVE_EXECUTOR
    native = model.run({"x": X})
    _bitwise_equal(native, model.executor.run_with({"x": X}, native=False))
    _bitwise_equal(native, cnn_lib.run({"x": X}))


def test_a_deployed_package_checks_gather_indices_in_its_entry_and_an_entry_without_checks_still_serves(
        tmp_path, monkeypatch):
    from tensorkiln.runtime import deploy
    from tensorkiln_cpu_llvm.runtime import JITModule

    data = graph.var("data", (3, 4))
    idx = graph.var("idx", (3,), dtype="int64")
    module = graph.Module.from_expr(graph.take(data, idx + graph.const(np.int64(1)), axis=0))
    table = np.arange(12, dtype=np.float32).reshape(3, 4)
    good, bad = np.array([1, -4, 0], np.int64), np.array([0, 2, 0], np.int64)
    for checks in (True, False):   # False: a package exported before entries checked indices
        monkeypatch.setattr(JITModule, "plan_entry_index_checks", checks)
        tk.compile(module, "cpu_llvm").export(tmp_path / f"take{checks}.tkpkg")
        model = deploy.load(tmp_path / f"take{checks}.tkpkg")
        assert model.executor.native_entry is not None
        assert bool(model.executor.native_entry.spec.steps[-1].checks) == checks
        np.testing.assert_array_equal(model.run({"data": table, "idx": good})[0], table[[2, 0, 1]])
        with pytest.raises(RuntimeLaunchError, match=r"index 3 at position \[1\]"):
            model.run({"data": table, "idx": bad})


def test_a_library_entry_serves_only_the_spec_it_was_built_for(cnn_lib, tmp_path):
    from dataclasses import replace

    from tensorkiln.sdk.native import load_native_library

    spec = cnn_lib.executor.native_entry.spec
    path = tmp_path / "cnn.so"
    cnn_lib.loaded_module("cpu_llvm").export_library(str(path), plan_entry=spec)
    library = load_native_library(str(path))
    assert library.build_plan_entry(spec) is not None
    assert library.build_plan_entry(replace(spec, arena_bytes=spec.arena_bytes + 64)) is None


def test_segments_split_at_control_flow_and_at_checks_of_computed_indices():
    from tensorkiln.runtime.native_entry import Segment, plan_levels, segments
    from tensorkiln.runtime.plan import ExecutionPlan, IndexCheck, KernelStep, ValueInfo

    values = tuple(ValueInfo(i, (4,), "int64", "input" if i < 2 else "intermediate", f"v{i}") for i in range(7))
    check = IndexCheck(input=1, extents=(4,), op="take")
    steps = (KernelStep("a", "cpu_llvm", (0,), (2,), ("add",)),
             KernelStep("if", "cpu_llvm", (2,), (3,), ("if",)),
             KernelStep("take_input", "cpu_llvm", (3, 1), (4,), ("take",), index_checks=(check,)),
             KernelStep("b", "cpu_llvm", (4,), (5,), ("add",)),
             KernelStep("take_computed", "cpu_llvm", (5, 3), (6,), ("take",), index_checks=(check,)))
    plan = ExecutionPlan(values, steps, inputs=(0, 1), outputs=(6,))
    assert segments(plan, plan_levels(plan), ("if",)) == (
        Segment(True, 0, 1, (2,)),      # the gather of a model input is checked before the first call
        Segment(False, 1, 2),           # the If, in Python
        Segment(True, 2, 4),
        Segment(True, 4, 5, (4,)))      # indices computed by step 3: checked after it, before this call
