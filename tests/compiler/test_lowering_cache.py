"""compiler/lowering_cache.py: a group lowered once is not lowered again, in this process or another,
and only an identical workload on an identical target, host and context gets the cached kernel."""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tensorkiln as tk
from tensorkiln.compiler import driver, lowering_cache as lc
from tensorkiln.passes import PassContext
from tensorkiln.sdk.plugin_manager import registry
from tensorkiln.sdk.target import Target


def _model(scale: float = 1.2345678e-3) -> onnx.ModelProto:
    """conv 3x3 + bias + relu, a scaled residual add, a max pool: conv, elementwise and pool groups."""
    rng = np.random.default_rng(7)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2, "w")
    bias = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    # of shape [1]: it stays inside its group as a constant, printed rounded (array2string)
    factor = numpy_helper.from_array(np.array([scale], dtype=np.float32), "s")
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("Mul", ["r", "s"], ["m"]),
        helper.make_node("Add", ["m", "c"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["y"], kernel_shape=[2, 2], strides=[2, 2]),
    ]
    graph = helper.make_graph(nodes, "cached", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 6, 6])],
                              [weight, bias, factor])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


_X = np.random.default_rng(3).standard_normal((1, 8, 12, 12)).astype(np.float32)


def _reference(model) -> np.ndarray:
    return ReferenceEvaluator(model).run(None, {"x": _X})[0]


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch):
    """The lowering cache in an empty directory of this test's own."""
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("TENSORKILN_KERNEL_CACHE", raising=False)
    monkeypatch.delenv(lc.LOWERING_CACHE_ENV, raising=False)
    cache = lc.lowering_cache()
    assert cache is not None and cache.directory == tmp_path / "lowered"
    return cache


@pytest.fixture
def lowerings(monkeypatch):
    """The names of the groups lowered (not taken from the cache) while the test runs."""
    lowered = []
    real = driver.lower_group

    def counting(function, name, *args, **kwargs):
        lowered.append(name)
        return real(function, name, *args, **kwargs)
    monkeypatch.setattr(driver, "lower_group", counting)
    return lowered


def test_a_model_compiled_again_lowers_nothing_and_runs_the_same(fresh_cache, lowerings):
    model = _model()
    first = tk.compile(model, target="cpu_llvm")
    assert lowerings, "the first compile lowers its groups"
    assert len(list(fresh_cache.directory.glob("*.pkl"))) == len(lowerings)
    lowerings.clear()
    second = tk.compile(model, target="cpu_llvm")
    assert lowerings == []
    # the summary says where each kernel's loop nest came from
    assert {row["lowering_cache"] for row in first.summary()["strategies"].values()} == {"miss"}
    assert {row["lowering_cache"] for row in second.summary()["strategies"].values()} == {"hit"}
    assert fresh_cache.hits >= len(first.executor.plan.steps) - len(first.executor.plan.aliases)
    (artifact,) = first.artifacts.values()
    (again,) = second.artifacts.values()
    assert again.source == artifact.source      # the same kernels, so the same optimised LLVM IR
    expected = _reference(model)
    for lib in (first, second):
        np.testing.assert_allclose(lib.run({"x": _X})[0], expected, rtol=1e-5, atol=1e-5)


def test_another_process_reads_the_lowered_groups_from_disk(tmp_path):
    # both compiles in new processes: this one's plugin registry may have been changed by other tests
    path = tmp_path / "model.onnx"
    onnx.save(_model(), str(path))
    np.save(tmp_path / "x.npy", _X)
    program = (
        "import sys, numpy as np, onnx, tensorkiln as tk\n"
        "from tensorkiln.compiler import driver, lowering_cache as lc\n"
        "lowered = []\n"
        "real = driver.lower_group\n"
        "driver.lower_group = lambda f, name, *a, **k: lowered.append(name) or real(f, name, *a, **k)\n"
        f"lib = tk.compile(onnx.load({str(path)!r}), target='cpu_llvm')\n"
        f"np.save(sys.argv[1], lib.run({{'x': np.load({str(tmp_path / 'x.npy')!r})}})[0])\n"
        "print(len(lowered), lc.lowering_cache().hits)\n")
    env = {**os.environ, "TENSORKILN_CACHE_DIR": str(tmp_path / "cache")}
    for variable in ("TENSORKILN_KERNEL_CACHE", lc.LOWERING_CACHE_ENV):
        env.pop(variable, None)
    counts = []
    for run in ("cold", "warm"):
        done = subprocess.run([sys.executable, "-c", program, str(tmp_path / f"{run}.npy")], env=env,
                              capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, done.stderr
        counts.append(tuple(int(word) for word in done.stdout.split()))
    (lowered_cold, hits_cold), (lowered_warm, hits_warm) = counts
    assert lowered_cold > 0 and hits_cold == 0
    assert lowered_warm == 0 and hits_warm == lowered_cold
    expected = _reference(_model())
    for run in ("cold", "warm"):
        np.testing.assert_allclose(np.load(tmp_path / f"{run}.npy"), expected, rtol=1e-5, atol=1e-5)


def _groups(model, target="cpu_llvm"):
    calls, resolved = driver.fused_groups(model, target)
    return [call.op for call in calls], resolved


def _keys(model, target="cpu_llvm", context=None) -> list[str | None]:
    functions, resolved = _groups(model, target)
    return [lc.group_key(function, resolved, context or PassContext()) for function in functions]


def test_the_key_tells_apart_constants_targets_and_contexts(fresh_cache):
    scale = np.float32(1.2345678e-3)
    keys = _keys(_model(scale))
    assert all(keys) and len(set(keys)) == len(keys)
    assert keys == _keys(_model(scale))
    # the scale is a constant inside the elementwise group: one ulp apart (the same printed text) is
    # another workload
    nudged = _keys(_model(float(np.nextafter(scale, np.float32(1)))))
    assert sum(a != b for a, b in zip(keys, nudged)) == 1
    assert not set(keys) & set(_keys(_model(scale), "cpu_llvm -mcpu=haswell"))
    assert not set(keys) & set(_keys(_model(scale), context=PassContext(opt_level=3)))
    assert not set(keys) & set(_keys(_model(scale), context=PassContext(disabled={"unroll_loops"})))


def test_a_different_host_never_gets_the_cached_kernel(fresh_cache):
    functions, target = _groups(_model())
    other_host = Target(dataclasses.replace(target.spec, host_fingerprint=lambda t: "another CPU, other caches"),
                        target.options)
    for function in functions:
        assert lc.group_key(function, target, PassContext()) != lc.group_key(function, other_host, PassContext())


def test_what_is_never_cached(fresh_cache, lowerings, monkeypatch):
    functions, target = _groups(_model())
    # a target whose plugin does not say what its schedules read from the host
    silent = Target(dataclasses.replace(target.spec, host_fingerprint=None), target.options)
    assert lc.group_key(functions[0], silent, PassContext()) is None
    # a config the key cannot hold exactly
    assert lc.group_key(functions[0], target, PassContext(config={"unroll_loops": {"f": object()}})) is None
    # a plugin registered by hand: its code is in no digest
    class HandMade:
        pass
    registry().hooks.register(HandMade(), name="hand-made-test-plugin")
    try:
        assert lc.group_key(functions[0], target, PassContext()) is None
    finally:
        registry().hooks.unregister(name="hand-made-test-plugin")
    assert lc.group_key(functions[0], target, PassContext()) is not None
    # the caller's own pass instruments see every loop pass run, each compile
    model = _model()
    from tensorkiln.passes import PassTimingInstrument
    for _ in range(2):
        lowerings.clear()
        lib = tk.compile(model, target="cpu_llvm", context=PassContext(instruments=[PassTimingInstrument()]))
        assert lowerings
        assert {row["lowering_cache"] for row in lib.summary()["strategies"].values()} == {None}
    # turned off by the environment
    for variable in (lc.LOWERING_CACHE_ENV, "TENSORKILN_KERNEL_CACHE"):
        monkeypatch.setenv(variable, "0")
        assert lc.lowering_cache() is None
        monkeypatch.delenv(variable)


def test_a_damaged_entry_is_lowered_again(fresh_cache, lowerings):
    model = _model()
    tk.compile(model, target="cpu_llvm")
    count = len(lowerings)
    for entry in fresh_cache.directory.glob("*.pkl"):
        entry.write_bytes(b"not a pickle")
    fresh_cache.memory.clear()
    lowerings.clear()
    lib = tk.compile(model, target="cpu_llvm")
    assert len(lowerings) == count
    np.testing.assert_allclose(lib.run({"x": _X})[0], _reference(model), rtol=1e-5, atol=1e-5)
    fresh_cache.memory.clear()
    lowerings.clear()
    tk.compile(model, target="cpu_llvm")      # the entries were written again
    assert lowerings == []
