"""cpu_llvm's whole-plan entry (plan_entry.py): called directly over an arena of our own, its error
codes, and (slow) every light model giving the Python executor's bits."""
from __future__ import annotations

import ctypes
import os
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.errors import RuntimeLaunchError
from tensorkiln.runtime.native_entry import NATIVE_EXECUTOR
from tensorkiln.sdk.native import FIELD_SHAPE, encode_error
from tensorkiln.sdk.plan_entry import encode_step_error

REPO = Path(__file__).resolve().parents[3]


def _model():
    x = graph.var("x", shape=(4, 8), dtype="float32")
    w = graph.const(np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8))
    hidden = graph.nn.relu(graph.nn.dense(x, w))
    return tk.compile(graph.Module.from_expr(graph.tanh(graph.nn.dense(hidden, w))), target="cpu_llvm")


def _pointers(arrays):
    return (ctypes.c_void_p * max(1, len(arrays)))(*(a.ctypes.data for a in arrays))


def test_the_entry_runs_the_plan_over_an_arena_it_is_given():
    lib = _model()
    executor = lib.executor
    entry = executor.native_entry
    assert [step.kernel for step in entry.spec.steps] == [step.kernel for step in lib.plan.steps]
    x = np.arange(32, dtype=np.float32).reshape(4, 8) / 16 - 1
    arena = np.full(entry.spec.arena_bytes, 0xFF, np.uint8)
    entry(_pointers([x]), executor._native_constants, arena.ctypes.data)
    out = lib.plan.values[lib.plan.outputs[0]]
    offset = next(s.offset for s in lib.plan.storages if s.id == out.storage)
    got = arena[offset:offset + out.nbytes].view(np.float32).reshape(out.shape)
    w = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
    np.testing.assert_allclose(got, np.tanh(np.maximum(x @ w.T, 0) @ w.T), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got, executor.run_with({"x": x}, native=False)[0])


def test_a_kernel_that_rejects_its_arguments_is_reported_by_step_kernel_and_field():
    lib = _model()
    spec = lib.executor.native_entry.spec
    short = replace(spec, steps=(replace(spec.steps[0], args=spec.steps[0].args[:-1]), *spec.steps[1:]))
    entry = lib.loaded_module("cpu_llvm").build_plan_entry(short)
    x = np.zeros((4, 8), np.float32)
    arena = np.zeros(spec.arena_bytes, np.uint8)
    kernel = spec.steps[0].kernel
    with pytest.raises(RuntimeLaunchError, match=rf"step 0 \(kernel {kernel}\) of the native plan entry: "
                                                 rf"{kernel}: native code rejected the argument count"):
        entry(_pointers([x]), lib.executor._native_constants, arena.ctypes.data)
    message = entry.describe_error(encode_step_error(1, encode_error(0, FIELD_SHAPE, 1)))
    assert message.startswith(f"step 1 (kernel {spec.steps[1].kernel}) of the native plan entry: ")
    assert "argument 0" in message and "has shape" in message


def test_models_keep_entries_of_their_own():
    first, second = _model(), _model()
    x = np.ones((4, 8), np.float32)
    assert first.executor.native_entry is not second.executor.native_entry
    np.testing.assert_array_equal(first(x), second(x))


def _branching_model(target: str = "cpu_llvm"):
    """Three dense layers of one input (one concurrent level), each a model output."""
    x = graph.var("x", shape=(8, 32), dtype="float32")
    rng = np.random.default_rng(3)
    branches = [graph.nn.dense(x, graph.const(rng.standard_normal((32, 32)).astype(np.float32) * 0.2))
                for _ in range(3)]
    return tk.compile(graph.Module.from_expr(graph.tuple_(graph.tanh(branches[0]), graph.sigmoid(branches[1]),
                                                         branches[2])), target=target)


def test_an_overlapped_level_gives_the_same_bits_and_reports_errors():
    lib = _branching_model()
    executor = lib.executor
    spec = executor.native_entry.spec
    wide = [level for level in spec.levels if len(level) > 1]
    assert wide, f"expected a concurrent level, got {spec.levels}"
    x = np.random.default_rng(4).standard_normal((8, 32)).astype(np.float32)
    expected = executor.run_with({"x": x}, native=False)
    storages = {s.id: s for s in lib.plan.storages}
    for overlap in (1, 2, 3, 8):
        arena = np.zeros(spec.arena_bytes, np.uint8)
        executor.native_entry(_pointers([x]), executor._native_constants, arena.ctypes.data, overlap)
        for value_id, want in zip(lib.plan.outputs, expected):
            value = lib.plan.values[value_id]
            offset = storages[value.storage].offset
            got = arena[offset:offset + value.nbytes].view(np.float32).reshape(value.shape)
            np.testing.assert_array_equal(got, want)
    # a step of the level that fails is reported after the level, whichever thread ran it
    index = wide[0][-1]
    broken = replace(spec, steps=tuple(replace(step, args=step.args[:-1]) if i == index else step
                                       for i, step in enumerate(spec.steps)))
    entry = lib.loaded_module("cpu_llvm").build_plan_entry(broken)
    arena = np.zeros(spec.arena_bytes, np.uint8)
    for overlap in (1, 2):
        with pytest.raises(RuntimeLaunchError, match=rf"step {index} \(kernel {spec.steps[index].kernel}\)"):
            entry(_pointers([x]), executor._native_constants, arena.ctypes.data, overlap)


def test_the_executor_overlaps_levels_when_kernels_leave_cores_free():
    before = tk.runtime.get_num_threads()
    tk.runtime.set_num_threads(None)   # each module's -num_threads option decides
    try:
        lib = _branching_model("cpu_llvm -num_threads=1")
        executor = lib.executor
        x = np.ones((8, 32), np.float32)
        expected = executor.run_with({"x": x}, native=False)
        assert executor.overlap_width() == (os.cpu_count() or 1)
        for got, want in zip(lib.run({"x": x}), expected):
            np.testing.assert_array_equal(got, want)
        # the runtime's thread count is the whole run's budget: one thread runs one kernel at a time
        tk.runtime.set_num_threads(1)
        assert executor.overlap_width() == 1
        for got, want in zip(lib.run({"x": x}), expected):
            np.testing.assert_array_equal(got, want)
    finally:
        tk.runtime.set_num_threads(0)   # the modules loaded so far back to all cores
        tk.runtime.set_num_threads(before)   # and no override left for later ones (a module's -num_threads)


LIGHT = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
LIGHT_MODELS = ("resnet50", "squeezenet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                "bvlc_alexnet", "zfnet512", "vgg19")


@pytest.mark.slow
@pytest.mark.parametrize("name", LIGHT_MODELS)
def test_light_models_give_the_python_executors_bits(name):
    sys.path.insert(0, str(REPO / "benchmarks"))
    import models

    model, inputs = models.light_model(name)
    lib = tk.compile(model, target="cpu_llvm")
    assert lib.summary()["executor"] == NATIVE_EXECUTOR
    native, python = lib.run(inputs), lib.executor.run_with(inputs, native=False)
    for a, b in zip(native, python):
        np.testing.assert_array_equal(a.view(np.uint8), b.view(np.uint8))
