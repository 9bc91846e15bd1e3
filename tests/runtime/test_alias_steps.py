"""Zero-copy reshapes: a group that only reshapes runs no kernel, its output aliases its input's bytes.

Checked against numpy (and onnxruntime for the real graphs), against the same model compiled with
`zero_copy_reshape=False` (bit for bit), native entry against the Python executor, and on the
memory plan itself: no storage is written while an alias of its value is still read.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.memory_plan import plan_memory
from tensorkiln.passes import PassContext
from tensorkiln.runtime.plan import ExecutionPlan, KernelStep, ValueInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import real_graphs  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from _graphs import assert_same_bits, conv3x3, conv3x3_weight, np_conv3x3  # noqa: E402

KEEP_VIEWS = PassContext(disabled={"sink_reshapes"})
"""Compiles the chains of views below as written: sink_reshapes would merge or cancel them (tests/passes)."""

RNG = np.random.default_rng(11)
VIEW_OPS = {"reshape", "squeeze", "expand_dims", "copy"}


def _weight(cout: int, cin: int) -> np.ndarray:
    return conv3x3_weight(RNG, cout, cin)


def _root_intervals_are_disjoint(plan: ExecutionPlan) -> None:
    """The planner's invariant with aliases: a root value's storage is written by no other step from
    the step producing it to the last step reading it or any of its aliases (an in-place step may
    reuse it at that last read); model outputs are live to the end."""
    end = len(plan.steps)
    born: dict[int, int] = {}
    last: dict[int, int] = {}
    for index, step in enumerate(plan.steps):
        for value_id in step.outputs:
            born[value_id] = index
            last.setdefault(value_id, index)
        for value_id in step.inputs:
            last[plan.root(value_id)] = index
    for value_id in plan.outputs:
        last[plan.root(value_id)] = end
    by_storage: dict[int, list[tuple[int, int]]] = {}
    for value_id, start in born.items():
        by_storage.setdefault(plan.values[value_id].storage, []).append((start, last[value_id]))
    for storage, spans in by_storage.items():
        spans.sort()
        for (_, first_end), (second_start, _) in zip(spans, spans[1:]):
            assert second_start >= first_end, f"storage {storage} written at step {second_start} while read " \
                                              f"until step {first_end}: {spans}"
    for value in plan.values:   # an alias has its root's storage, or none (an input's or constant's buffer)
        if value.alias_of >= 0:
            assert value.storage == plan.values[plan.root(value.id)].storage


def _chain_model():
    """conv -> reshape -> expand_dims -> squeeze -> reshape -> conv, and the flat view as a 2nd output."""
    w1, w2 = _weight(4, 4), _weight(4, 4)
    x = graph.var("x", shape=(1, 4, 8, 8))
    a = conv3x3(x, w1)
    flat = graph.reshape(a, (1, 4, 64))
    back = graph.reshape(graph.squeeze(graph.expand_dims(flat, 2), (2,)), (1, 4, 8, 8))
    module = graph.Module.from_expr(graph.tuple_(conv3x3(back, w2), flat))

    def reference(x_value):
        first = np_conv3x3(x_value, w1)
        return [np_conv3x3(first, w2), first.reshape(1, 4, 64)]
    return module, reference


def test_a_reshape_chain_between_kernels_runs_no_kernel_and_matches_numpy():
    module, reference = _chain_model()
    lib = tk.compile(module, "cpu_llvm")
    copied = tk.compile(module, "cpu_llvm", zero_copy_reshape=False)
    assert lib.summary()["alias_steps"] >= 1 and copied.summary()["alias_steps"] == 0
    assert lib.summary()["kernel_launches"] == copied.summary()["kernel_launches"] - lib.summary()["alias_steps"]
    assert not any(set(step.ops) <= VIEW_OPS for step in lib.plan.steps)
    assert all(set(a.ops) <= VIEW_OPS for a in lib.plan.aliases)
    _root_intervals_are_disjoint(lib.plan)
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    native = lib.run({"x": x})
    for got, want in zip(native, reference(x)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert_same_bits(native, lib.executor.run_with({"x": x}, native=False))
    assert_same_bits(native, copied.run({"x": x}))


def test_a_chain_of_alias_steps_shares_one_storage():
    """flat = reshape(conv(x)) is read by two groups, so it and the view of it are two alias steps."""
    w1, w2 = _weight(4, 4), _weight(4, 4)
    x = graph.var("x", shape=(1, 4, 8, 8))
    flat = graph.reshape(conv3x3(x, w1), (1, 4, 64))
    lib = tk.compile(graph.Module.from_expr(graph.tuple_(conv3x3(graph.reshape(flat, (1, 4, 8, 8)), w2),
                                                         graph.expand_dims(flat, 0))), "cpu_llvm", context=KEEP_VIEWS)
    chained = [v for v in lib.plan.values if v.alias_of >= 0 and lib.plan.values[v.alias_of].alias_of >= 0]
    assert chained, lib.plan.aliases
    _root_intervals_are_disjoint(lib.plan)
    x_value = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    first = np_conv3x3(x_value, w1)
    out, view = lib.run({"x": x_value})
    np.testing.assert_allclose(out, np_conv3x3(first, w2), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(view, first.reshape(1, 1, 4, 64), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(1, 4, 8, 8), (1, 4, 128, 128)], ids=["copied", "read-in-place"])
def test_an_alias_of_a_model_input_reads_the_input(shape):
    """The view of an input has no storage; the large input (>= 256 KiB) is read in place by the
    native entry unless a view of it is a model output (returned from the state's copy)."""
    weight = _weight(4, 4)
    x = graph.var("x", shape=shape)
    flat = graph.reshape(x, (4, shape[2] * shape[3]))
    conv = conv3x3(graph.reshape(graph.expand_dims(flat, 0), shape), weight)
    for outputs, in_place in (((conv,), True), ((conv, flat), False)):
        lib = tk.compile(graph.Module.from_expr(graph.tuple_(*outputs)), "cpu_llvm", context=KEEP_VIEWS)
        assert any(lib.plan.values[a.input].kind == "input" for a in lib.plan.aliases)
        assert all(lib.plan.values[a.output].storage == -1 for a in lib.plan.aliases)
        assert lib.executor._inputs_in_place == in_place
        for _ in range(2):
            x_value = RNG.standard_normal(shape).astype(np.float32)
            results = lib.run([x_value])
            np.testing.assert_allclose(results[0], np_conv3x3(x_value, weight), rtol=1e-4, atol=1e-4)
            if len(outputs) == 2:
                np.testing.assert_array_equal(results[1], x_value.reshape(4, -1))
            assert_same_bits(results, lib.executor.run_with([x_value], native=False))


def test_alias_outputs_are_copies_that_the_next_run_does_not_change():
    module, reference = _chain_model()
    lib = tk.compile(module, "cpu_llvm")
    flat_value = lib.plan.outputs[1]
    assert lib.plan.values[flat_value].alias_of >= 0
    first_x, second_x = (RNG.standard_normal((1, 4, 8, 8)).astype(np.float32) for _ in range(2))
    for native in (True, False):
        first = lib.executor.run_with([first_x], native=native)
        kept = [a.copy() for a in first]
        lib.executor.run_with([second_x], native=native)
        assert_same_bits(first, kept)
        for array in first:
            assert array.base is None or not np.shares_memory(array, lib.executor._free_states[0].arenas[
                lib.plan.steps[0].target])
    lib.executor.set_input("x", first_x)
    lib.executor.run()
    got = lib.executor.get_output(1)
    lib.executor.run(x=second_x)
    np.testing.assert_allclose(got, reference(first_x)[1], rtol=1e-4, atol=1e-4)


def test_an_alias_of_a_constant_stays_read_only():
    """fold_constants off, so reshape(weights) reaches the plan as a view of the constant's buffer."""
    table = (RNG.standard_normal((4, 36)) * 0.3).astype(np.float32)
    x = graph.var("x", shape=(1, 4, 6, 6))
    module = graph.Module.from_expr(graph.nn.conv2d(x, graph.reshape(graph.const(table), (4, 4, 3, 3)),
                                                    padding=(1, 1, 1, 1)))
    with tk.passes.PassContext(opt_level=3, disabled={"fold_constants"}):
        lib = tk.compile(module, "cpu_llvm")
    views = [a for a in lib.plan.aliases if lib.plan.values[a.input].kind == "constant"]
    assert views, lib.plan.aliases
    assert lib.plan.values[views[0].output].storage == -1
    x_value = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    for native in (True, False):
        np.testing.assert_allclose(lib.executor.run_with([x_value], native=native)[0],
                                   np_conv3x3(x_value, table.reshape(4, 4, 3, 3)), rtol=1e-4, atol=1e-4)
    state = lib.executor._free_states[0]
    assert not state.host_values[views[0].output].flags.writeable
    np.testing.assert_array_equal(lib.executor.constants[views[0].input], table)   # unchanged by the runs


def test_the_planner_keeps_an_aliased_storage_from_in_place_reuse():
    """a = k0(x); b = alias of a; c = relu(a) (elementwise: would run in place over a, a's last direct
    read); d = k2(b) reads a's bytes after c. Without alias liveness c took a's storage."""
    values = (ValueInfo(0, (4, 4), "float32", "input", "x"),
              ValueInfo(1, (4, 4), "float32", "intermediate", "a"),
              ValueInfo(2, (16,), "float32", "intermediate", "b", alias_of=1),
              ValueInfo(3, (4, 4), "float32", "output", "c"),
              ValueInfo(4, (16,), "float32", "output", "d"))
    steps = (KernelStep("k0", "cpu", (0,), (1,), ("nn.relu",)),
             KernelStep("k1", "cpu", (1,), (3,), ("nn.relu",)),
             KernelStep("k2", "cpu", (2,), (4,), ("nn.relu",)))
    planned = plan_memory(ExecutionPlan(values, steps, (0,), (3, 4)))
    storage = {v.name: v.storage for v in planned.values}
    assert storage["b"] == storage["a"]
    assert storage["c"] != storage["a"]
    # d is elementwise over b, which dies there: it may take a's storage in place
    assert storage["d"] == storage["a"]
    _root_intervals_are_disjoint(planned)
    # without the alias (d reads a directly) the same rules give c a's storage only if a died at k1
    direct = plan_memory(ExecutionPlan(values[:2] + (ValueInfo(2, (4, 4), "float32", "intermediate", "b2"),) +
                                       values[3:], (steps[0], steps[1]), (0,), (3,)))
    assert direct.values[3].storage == direct.values[1].storage


def test_an_aliased_value_is_not_overwritten_by_an_elementwise_step_in_place():
    w1, w2 = _weight(4, 4), _weight(4, 4)
    x = graph.var("x", shape=(1, 4, 8, 8))
    a = conv3x3(x, w1)
    flat = graph.reshape(a, (4, 64))
    relu = graph.nn.relu(a)                  # elementwise over a: the in-place candidate
    later = conv3x3(graph.reshape(flat, (1, 4, 8, 8)) + relu, w2)
    lib = tk.compile(graph.Module.from_expr(graph.tuple_(later, graph.sigmoid(flat))), "cpu_llvm")
    _root_intervals_are_disjoint(lib.plan)
    x_value = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    first = np_conv3x3(x_value, w1)
    out, sig = lib.run([x_value])
    np.testing.assert_allclose(out, np_conv3x3(first + np.maximum(first, 0), w2), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(sig, 1 / (1 + np.exp(-first.reshape(4, 64))), rtol=1e-4, atol=1e-5)
    assert_same_bits([out, sig], tk.compile(graph.Module.from_expr(graph.tuple_(later, graph.sigmoid(flat))), "cpu_llvm",
                                      zero_copy_reshape=False).run([x_value]))


def test_two_threads_run_a_model_with_aliases_at_once():
    module, reference = _chain_model()
    lib = tk.compile(module, "cpu_llvm")
    inputs = [RNG.standard_normal((1, 4, 8, 8)).astype(np.float32) for _ in range(2)]
    expected = [lib.run([x]) for x in inputs]
    errors: list[str] = []
    barrier = threading.Barrier(2)

    def work(which: int) -> None:
        barrier.wait()
        for _ in range(200):
            got = lib.run([inputs[which]])
            if not all(np.array_equal(g, e) for g, e in zip(got, expected[which])):
                errors.append(f"thread {which} got another run's values")
                return

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    for x, want in zip(inputs, expected):
        np.testing.assert_allclose(want[0], reference(x)[0], rtol=1e-4, atol=1e-4)


def test_a_plan_with_aliases_round_trips_through_json_and_the_deploy_runtime(tmp_path):
    from tensorkiln.runtime import deploy
    module, reference = _chain_model()
    lib = tk.compile(module, "cpu_llvm")
    assert ExecutionPlan.from_json(lib.plan.to_json()) == lib.plan
    lib.export(tmp_path / "alias.tkpkg")
    model = deploy.load(tmp_path / "alias.tkpkg")
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert_same_bits(model.run({"x": x}), lib.run({"x": x}))
    assert_same_bits(model.executor.run_with({"x": x}, native=False), lib.run({"x": x}))


def test_tcn_elides_its_expand_dims_and_squeeze_copies():
    """The TCN's conv1d are expand_dims -> conv2d -> squeeze: every such copy group is elided (sink_reshapes, which
    cancels most of them first, kept out)."""
    name, model, feeds = real_graphs.build("tcn")
    lib = tk.compile(model, "cpu_llvm", context=KEEP_VIEWS)
    copied = tk.compile(model, "cpu_llvm", zero_copy_reshape=False, context=KEEP_VIEWS)
    copy_steps = [s for s in copied.plan.steps if set(s.ops) <= VIEW_OPS]
    assert copy_steps
    assert lib.summary()["alias_steps"] == len(copy_steps)
    assert lib.summary()["kernel_launches"] == len(copied.plan.steps) - len(copy_steps)
    _root_intervals_are_disjoint(lib.plan)
    result = lib.run(feeds)
    assert_same_bits(result, copied.run(feeds))
    assert_same_bits(result, lib.executor.run_with(feeds, native=False))
    import onnxruntime
    want = onnxruntime.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, ref in zip(result, want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", [b.__name__ for b in real_graphs.BUILDERS])
def test_real_graphs_give_the_same_bits_with_and_without_aliases(name):
    _, model, feeds = real_graphs.build(name)
    lib = tk.compile(model, "cpu_llvm")
    _root_intervals_are_disjoint(lib.plan)
    assert_same_bits(lib.run(feeds), tk.compile(model, "cpu_llvm", zero_copy_reshape=False).run(feeds))


def test_device_targets_without_alias_buffers_keep_the_copy_kernel():
    from tensorkiln.compiler import driver
    from tensorkiln.compiler.alias_steps import alias_group_calls
    from tensorkiln.sdk.plugin_manager import registry
    module, _ = _chain_model()
    target = registry().target("cpu_llvm")
    mod, _ = driver._partition(module, target, driver._context(None, None), False)
    calls = driver._group_calls(mod)
    assert target.capabilities.alias_buffers
    aliases = alias_group_calls(calls, target, registry())
    assert aliases
    # what tuning extracts: the kernels that run, not the elided groups
    assert len(driver.fused_groups(module, "cpu_llvm")[0]) == len(calls) - len(aliases)

    class NoAlias:
        def target(self, text):
            real = registry().target(text)
            return type("T", (), {"capabilities": real.capabilities.model_copy(update={"alias_buffers": False})})()
    assert not alias_group_calls(calls, target, NoAlias())
    names = registry().names()
    assert "cpu_llvm" in names and len(names) > 1
    for text in names:   # device memory: opencl, cuda, fpga_hls keep their copies
        declared = registry().spec(text).manifest.capabilities.alias_buffers
        assert declared == (text == "cpu_llvm"), text


def test_a_model_that_only_reshapes_its_input_returns_a_copy():
    x = graph.var("x", shape=(2, 3, 4))
    lib = tk.compile(graph.Module.from_expr(graph.squeeze(graph.expand_dims(graph.reshape(x, (6, 4)), 0), (0,))),
                     "cpu_llvm")
    assert not lib.plan.steps and lib.summary()["alias_steps"] == 1
    value = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    first = lib(value)
    np.testing.assert_array_equal(first, value.reshape(6, 4))
    assert not np.shares_memory(first, value)
    lib(value + 1)
    np.testing.assert_array_equal(first, value.reshape(6, 4))


@pytest.mark.parametrize("axes, view", [((0, 2, 1, 3), True), ((2, 0, 1, 3), True), ((0, 3, 2, 1), False)])
def test_a_transpose_is_an_alias_only_when_it_keeps_the_order_of_the_axes_longer_than_1(axes, view):
    w1, w2 = _weight(4, 4), _weight(4, 4)
    x = graph.var("x", shape=(1, 4, 8, 8))
    moved = graph.transpose(graph.reshape(conv3x3(x, w1), (1, 4, 1, 64)), axes)
    module = graph.Module.from_expr(conv3x3(graph.reshape(moved, (1, 4, 8, 8)), w2))
    lib = tk.compile(module, "cpu_llvm")
    assert any("transpose" in a.ops for a in lib.plan.aliases) == view
    assert any("transpose" in s.ops for s in lib.plan.steps) == (not view)
    x_value = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    first = np.transpose(np_conv3x3(x_value, w1).reshape(1, 4, 1, 64), axes).reshape(1, 4, 8, 8)
    np.testing.assert_allclose(lib(x_value), np_conv3x3(first, w2), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "squeezenet", "densenet121", "inception_v1", "inception_v2",
                                  "shufflenet", "bvlc_alexnet", "zfnet512", "vgg19"])
def test_light_models_give_the_same_bits_with_and_without_aliases(name):
    import models   # benchmarks/models.py: the onnx light model zoo and its inputs
    model, feeds = models.light_model(name)
    lib = tk.compile(model, "cpu_llvm")
    copied = tk.compile(model, "cpu_llvm", zero_copy_reshape=False)
    _root_intervals_are_disjoint(lib.plan)
    assert len(lib.plan.steps) == len(copied.plan.steps) - len(lib.plan.aliases)
    assert_same_bits(lib.run(feeds), copied.run(feeds))
