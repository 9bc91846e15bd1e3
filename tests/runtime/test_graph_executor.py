"""GraphExecutor through CompiledModel: input validation, set_input/run/get_output, copies, multi-output."""
from __future__ import annotations

import gc
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.errors import RuntimeLaunchError

REPO = Path(__file__).resolve().parents[2]


def _split_module() -> graph.Module:
    """Two inputs, three outputs: split(relu(x) + y) into thirds, the middle one doubled."""
    x = graph.var("x", shape=(2, 6), dtype="float32")
    y = graph.var("y", shape=(2, 6), dtype="float32")
    parts = graph.split(graph.nn.relu(x) + y, 3, axis=1)
    return graph.Module.from_expr(graph.tuple_(parts[0], parts[1] * graph.const(2.0), parts[2]))


def _expected(x: np.ndarray, y: np.ndarray) -> list[np.ndarray]:
    s = np.maximum(x, 0) + y
    return [s[:, 0:2], s[:, 2:4] * 2, s[:, 4:6]]


@pytest.fixture(scope="module")
def mod():
    return _split_module()


@pytest.fixture(scope="module")
def lib(mod):
    return tk.compile(mod, target="cpu_llvm")


@pytest.fixture
def fresh(mod):
    """A model no test has set inputs on (the executor keeps inputs between runs)."""
    return tk.compile(mod, target="cpu_llvm", opt_level=0)


X = (np.arange(12, dtype=np.float32).reshape(2, 6) - 5) / 3
Y = np.linspace(-1, 1, 12, dtype=np.float32).reshape(2, 6)


def _assert_outputs(outputs, x=X, y=Y):
    assert len(outputs) == 3
    for actual, expected in zip(outputs, _expected(x, y)):
        np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_model_describes_its_inputs_and_outputs(lib):
    assert lib.input_names == ["x", "y"]
    assert lib.input_info() == [{"name": "x", "shape": (2, 6), "dtype": "float32"},
                                {"name": "y", "shape": (2, 6), "dtype": "float32"}]
    assert lib.output_info() == [{"shape": (2, 2), "dtype": "float32"}] * 3
    assert lib.get_num_outputs() == 3


def test_call_with_positional_arrays_returns_every_output(lib):
    _assert_outputs(lib(X, Y))


def test_call_with_keywords(lib):
    _assert_outputs(lib(y=Y, x=X))


def test_run_with_a_dict_returns_a_list(lib):
    outputs = lib.run({"x": X, "y": Y})
    assert isinstance(outputs, list)
    _assert_outputs(outputs)


def test_set_input_run_get_output(lib):
    lib.set_input("x", X)
    lib.set_input(1, Y)  # by position
    assert lib.run() is None
    _assert_outputs([lib.get_output(i) for i in range(lib.get_num_outputs())])


def test_matches_the_reference_interpreter(lib, mod):
    reference = graph.evaluate(mod, {"x": X, "y": Y})
    for actual, expected in zip(lib(X, Y), reference):
        np.testing.assert_allclose(actual, expected, rtol=1e-6)


def test_outputs_are_copies_that_later_runs_do_not_change(lib):
    first = lib(X, Y)
    kept = [a.copy() for a in first]
    second = lib(-X, Y * 3)
    _assert_outputs(second, -X, Y * 3)
    for before, now in zip(kept, first):
        np.testing.assert_array_equal(before, now)
    # Writing into a returned array does not change the next result either.
    second[0][...] = 1e9
    _assert_outputs(lib(-X, Y * 3), -X, Y * 3)


def test_get_output_is_a_copy(lib):
    lib.set_input("x", X)
    lib.set_input("y", Y)
    lib.run()
    out = lib.get_output(0)
    out[...] = 7
    _assert_outputs([lib.get_output(i) for i in range(3)])


def test_inputs_are_copied_at_set_input(lib):
    x = X.copy()
    lib.set_input("x", x)
    lib.set_input("y", Y)
    x[...] = 100  # changing the caller's array after set_input changes nothing
    lib.run()
    _assert_outputs([lib.get_output(i) for i in range(3)])


def test_non_contiguous_input_is_accepted(lib):
    wide = np.zeros((2, 12), np.float32)
    wide[:, ::2] = X
    strided = wide[:, ::2]
    assert not strided.flags.c_contiguous
    _assert_outputs(lib(strided, Y))


def test_unknown_input_name(lib):
    with pytest.raises(RuntimeLaunchError, match=r"the model has no input 'z'; its inputs are \['x', 'y'\]"):
        lib.set_input("z", X)
    with pytest.raises(RuntimeLaunchError, match=r"the model has no input 'z'"):
        lib.run({"x": X, "z": Y})


def test_input_index_out_of_range(lib):
    with pytest.raises(RuntimeLaunchError, match=r"input index 5 out of range: the model has 2 inputs \['x', 'y'\]"):
        lib.set_input(5, X)


def test_wrong_shape(lib):
    with pytest.raises(RuntimeLaunchError, match=r"input 'x' has shape \(2, 3\), expected \(2, 6\)"):
        lib.set_input("x", X[:, :3])


@pytest.mark.parametrize("dtype", ["float64", "int32", "float16"])
def test_wrong_dtype_names_the_fix(lib, dtype):
    with pytest.raises(RuntimeLaunchError, match=rf"input 'x' has dtype {dtype}, expected float32; "
                                                 r"convert it with array.astype\('float32'\)"):
        lib.set_input("x", X.astype(dtype))


def test_wrong_number_of_positional_inputs(lib):
    with pytest.raises(RuntimeLaunchError, match=r"the model takes 2 inputs, got 1"):
        lib(X)


def test_missing_input(fresh):
    fresh.set_input("x", X)
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['y'\] were not set; call set_input\(name, array\) first"):
        fresh.run()
    fresh.set_input("y", Y)
    fresh.run()
    _assert_outputs([fresh.get_output(i) for i in range(3)])


def test_every_call_passes_every_input_nothing_is_reused_from_an_earlier_call(fresh):
    _assert_outputs(fresh(X, Y))
    # before: these reused x and y of the call above and returned its outputs
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['x', 'y'\] were not given; every call passes all "
                                                 r"of the model's inputs \['x', 'y'\]"):
        fresh(**{})
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['x', 'y'\] were not given"):
        fresh.run({})
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['y'\] were not given"):
        fresh.run({"x": -X})
    fresh.set_input("y", Y)   # the stateful API's inputs do not leak into a call either
    with pytest.raises(RuntimeLaunchError, match=r"inputs \['y'\] were not given"):
        fresh(x=X)


def _statm_rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads RSS from /proc/self/statm (Linux)")
def test_one_model_called_from_eight_threads_gives_the_single_threaded_results_without_growing():
    lib = tk.compile(str(REPO / "examples/models/small_cnn.onnx"), target="cpu_llvm",
                     shape={"input": (1, 3, 32, 32)})
    rng = np.random.default_rng(0)
    inputs = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(8)]
    expected = [lib(x) for x in inputs]
    threads, runs = 8, 50

    def worker(thread: int) -> int:
        wrong = 0
        for run in range(runs):
            index = (thread + run) % len(inputs)
            wrong += not np.array_equal(lib(inputs[index]), expected[index])
        return wrong

    def round_of_calls() -> int:
        with ThreadPoolExecutor(threads) as pool:
            return sum(pool.map(worker, range(threads)))

    assert round_of_calls() == 0            # before: 4-57 wrong of 400 (the arena was shared)
    gc.collect()
    warm = _statm_rss_bytes()
    assert round_of_calls() == 0
    gc.collect()
    grown = _statm_rss_bytes() - warm
    assert grown < 8 * 2**20, f"RSS grew by {grown / 2**20:.1f} MiB in the second round"
    assert lib.executor.state_count <= threads + 1    # states are reused, not made per call


@pytest.mark.parametrize("index", [3, -1])
def test_output_index_out_of_range(lib, index):
    with pytest.raises(RuntimeLaunchError, match=rf"output index {index} out of range: the model has 3 outputs"):
        lib.get_output(index)


def test_opt_level_0_and_2_agree(fresh, lib):
    for a, b in zip(fresh(X, Y), lib(X, Y)):
        np.testing.assert_allclose(a, b, rtol=1e-6)


def test_single_output_model_returns_an_array():
    x = graph.var("x", shape=(3, 4), dtype="float32")
    single = tk.compile(graph.Module.from_expr(graph.nn.softmax(x, axis=-1)), target="cpu_llvm")
    data = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    out = single(data)
    assert isinstance(out, np.ndarray) and out.shape == (3, 4)
    expected = np.exp(data) / np.exp(data).sum(-1, keepdims=True)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-7)
    assert isinstance(single.run({"x": data}), list)


def test_zero_dimensional_outputs_keep_their_shape(tmp_path):
    """A 0-d constant output (ONNX Size folds to one) and a 0-d computed output stay shape ()."""
    x = graph.var("x", shape=(3, 4), dtype="float32")
    mod = graph.Module.from_expr(graph.tuple_(graph.const(np.array(12, np.int64)), graph.sum(x)))
    lib = tk.compile(mod, target="cpu_llvm")
    data = np.arange(12, dtype=np.float32).reshape(3, 4)
    size, summed = lib(data)
    assert size.shape == () and size.dtype == np.int64 and size == 12
    assert summed.shape == () and summed == data.sum()
    lib.export(tmp_path / "scalar.tkpkg")
    size, summed = tk.runtime.load(tmp_path / "scalar.tkpkg")(data)
    assert size.shape == () and summed.shape == ()


# -- gather indices are checked, not clamped -------------------------------------------------

def _gather_model(op_type: str, index_shape, out_shape, constant_indices=None, add_one=False, **attrs):
    """data (3, 4) float32 gathered by int64 indices: a model input, or a constant; with
    `add_one` the indices are computed (idx + 1) and would fuse into the gather's kernel."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits, index_name = [], [], "idx"
    if add_one:
        inits.append(numpy_helper.from_array(np.array(1, np.int64), "one"))
        nodes.append(helper.make_node("Add", ["idx", "one"], ["idx1"]))
        index_name = "idx1"
    if constant_indices is not None:
        inits.append(numpy_helper.from_array(constant_indices, "idx"))
    nodes.append(helper.make_node(op_type, ["data", index_name], ["y"], name=f"my_{op_type}", **attrs))
    inputs = [helper.make_tensor_value_info("data", TensorProto.FLOAT, [3, 4])]
    if constant_indices is None:
        inputs.append(helper.make_tensor_value_info("idx", TensorProto.INT64, list(index_shape)))
    graph_proto = helper.make_graph(nodes, "gather", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                          list(out_shape))], inits)
    model = helper.make_model(graph_proto, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


DATA = np.arange(12, dtype=np.float32).reshape(3, 4)
GATHERS = [  # op, attrs, valid indices (negative ones included), out-of-range indices, message
    ("Gather", {"axis": 0}, np.array([0, -3, 2], np.int64), np.array([0, 3, 1], np.int64), [3, 4],
     r"take \(ONNX node 'my_Gather'\): index 3 at position \[1\] is out of range for an axis of size 3; "
     r"valid indices are -3 to 2"),
    ("GatherElements", {"axis": 1}, np.array([[0, -4, 3, 1]], np.int64), np.array([[0, 1, -5, 1]], np.int64),
     [1, 4], r"gather_elements \(ONNX node 'my_GatherElements'\): index -5 at position \[0, 2\] is out of range "
             r"for an axis of size 4; valid indices are -4 to 3"),
    ("GatherND", {}, np.array([[2, -1], [-3, 0]], np.int64), np.array([[2, 3], [1, 4]], np.int64), [2],
     r"gather_nd \(ONNX node 'my_GatherND'\): index 4 at position \[1, 1\] \(coordinate 1 of an index tuple\) "
     r"is out of range for an axis of size 4; valid indices are -4 to 3"),
]


@pytest.mark.parametrize("target", ["cpu_llvm", "opencl"])
@pytest.mark.parametrize("op_type, attrs, valid, invalid, out_shape, message", GATHERS, ids=[g[0] for g in GATHERS])
def test_gather_indices_out_of_range_are_refused_at_run_time(target, op_type, attrs, valid, invalid, out_shape,
                                                              message):
    ort = pytest.importorskip("onnxruntime")
    model = _gather_model(op_type, valid.shape, out_shape, **attrs)
    lib = tk.compile(model, target=target)
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"data": DATA, "idx": valid})[0]
    np.testing.assert_array_equal(lib(data=DATA, idx=valid), expected)   # negative indices within [-n, n) work
    with pytest.raises(RuntimeLaunchError, match=message):   # before: clamped, a wrong element silently
        lib(data=DATA, idx=invalid)
    with pytest.raises(Exception):
        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"data": DATA, "idx": invalid})


def test_computed_gather_indices_stay_a_checked_kernel_input():
    model = _gather_model("Gather", (3,), (3, 4), add_one=True, axis=0)
    lib = tk.compile(model, target="cpu_llvm")
    np.testing.assert_array_equal(lib(data=DATA, idx=np.array([1, -4, 0], np.int64)), DATA[[2, 0, 1]])
    with pytest.raises(RuntimeLaunchError, match=r"take .* index 3 at position \[0\]"):
        lib(data=DATA, idx=np.array([2, 0, 0], np.int64))
    (check,) = [c for step in lib.plan.steps for c in step.index_checks]
    assert (check.op, check.extents) == ("take", (3,))


def test_constant_gather_indices_out_of_range_are_refused_at_compile_time(tmp_path):
    from tensorkiln.ir.errors import ShapeError

    for op_type, attrs, _, invalid, out_shape, message in GATHERS:
        model = _gather_model(op_type, invalid.shape, out_shape, constant_indices=invalid, **attrs)
        with pytest.raises(ShapeError, match=message):
            tk.compile(model, target="cpu_llvm")
    # the checks travel with an exported package
    lib = tk.compile(_gather_model("Gather", (3,), (3, 4), axis=0), target="cpu_llvm")
    lib.export(tmp_path / "gather.tkpkg")
    loaded = tk.runtime.load(tmp_path / "gather.tkpkg")
    with pytest.raises(RuntimeLaunchError, match=r"take \(ONNX node 'my_Gather'\): index 3"):
        loaded(data=DATA, idx=np.array([3, 0, 0], np.int64))
