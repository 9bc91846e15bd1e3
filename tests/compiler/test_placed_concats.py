"""Concatenations without a copy: each input is placed in the concatenation's output, whose group runs
no kernel (compiler/placed_concats.py).

Checked against numpy, against the same model compiled with `zero_copy_concat=False` (bit for bit),
native entry against the Python executor, with and without concurrent levels; on the memory plan
(no storage byte range is written while another value there is still read) and on the dependencies
(reading a concatenation waits for every part's writer, reading a part for that part's only).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.memory_plan import plan_memory
from tensorkiln.compiler.schedule_plan import schedule_plan, step_dependencies, value_writers
from tensorkiln.runtime.plan import ExecutionPlan, KernelStep, ValueInfo

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "passes"))
from _graphs import assert_same_bits, conv3x3, conv3x3_weight, np_conv3x3  # noqa: E402

RNG = np.random.default_rng(23)

def _compile(module, concurrent: bool | None = None, **options):
    """Opt level 3 without alter_layout: cpu_llvm turns convs to NHWC on hosts with 256-bit vectors
    (plugin.py), where a channel concatenation interleaves its inputs and keeps its kernel; these
    graphs stay NCHW to exercise placement."""
    with tk.passes.PassContext(opt_level=3, disabled={"alter_layout"}):
        return tk.compile(module, "cpu_llvm", concurrent=concurrent, **options)


def _weight(cout: int, cin: int) -> np.ndarray:
    return conv3x3_weight(RNG, cout, cin)


def _check_plan(plan: ExecutionPlan) -> None:
    """The planner's invariants with placed values.

    Parts tile their concatenation. Every root value (not placed, not an alias) is live from the first
    step writing any value rooted in it to the last step reading one (the end for model outputs), and
    two roots sharing a storage are never live at once (an in-place step may take a root's storage at
    its last read, unless it writes a placed part). With concurrent levels, steps count by level.
    """
    level_of = list(range(len(plan.steps)))
    lone = [True] * len(plan.steps)
    for number, level in enumerate(plan.concurrent_levels):
        for index in level:
            level_of[index], lone[index] = number, len(level) == 1
    end = max(level_of, default=-1) + 1
    for concat in plan.placed_concats:
        offset = 0
        for part in concat.inputs:
            assert plan.values[part].placed_in == concat.output and plan.values[part].placed_offset == offset
            offset += plan.values[part].nbytes
        assert offset == plan.values[concat.output].nbytes
    born: dict[int, int] = {}
    last: dict[int, int] = {}
    writes_part: dict[int, bool] = {}
    for index, step in enumerate(plan.steps):
        for value_id in step.outputs:
            root = plan.root(value_id)
            born.setdefault(root, level_of[index])
            last[root] = max(last.get(root, -1), level_of[index])
            writes_part[index] = writes_part.get(index, False) or plan.values[value_id].placed_in >= 0
        for value_id in step.inputs:
            last[plan.root(value_id)] = max(last.get(plan.root(value_id), -1), level_of[index])
    for value_id in plan.outputs:
        last[plan.root(value_id)] = end
    by_storage: dict[int, list[tuple[int, int, int]]] = {}
    for root, start in born.items():
        assert plan.values[root].storage >= 0
        by_storage.setdefault(plan.values[root].storage, []).append((start, last[root], root))
    for storage, spans in by_storage.items():
        spans.sort()
        for (_, first_end, _), (second_start, _, second) in zip(spans, spans[1:]):
            writer = next(i for i, s in enumerate(plan.steps) if any(plan.root(v) == second for v in s.outputs))
            in_place = second_start == first_end and lone[writer] and not writes_part[writer]
            assert second_start > first_end or in_place, f"storage {storage} written while read: {spans}"
    for value in plan.values:
        if value.placed_in >= 0 or value.alias_of >= 0:
            assert value.storage == plan.values[plan.root(value.id)].storage
    # every reader of a value comes after every step writing its bytes
    writers = value_writers(plan)
    for index, step in enumerate(plan.steps):
        for value_id in step.inputs:
            assert all(level_of[w] < level_of[index] for w in writers[value_id]), (index, value_id)


def _dense_block(layers: int = 3, channels: int = 4, growth: int = 4):
    """densenet's block: c_k = concat(c_{k-1}, conv(relu(c_{k-1}))), then a conv of the last."""
    x = graph.var("x", shape=(1, channels, 8, 8))
    weights = [_weight(channels, channels)]
    first = conv3x3(x, weights[0])
    c, width = first, channels
    for _ in range(layers):
        weights.append(_weight(growth, width))
        c = graph.concatenate([c, conv3x3(graph.nn.relu(c), weights[-1])], axis=1)
        width += growth
    weights.append(_weight(channels, width))
    module = graph.Module.from_expr(conv3x3(c, weights[-1]))

    def reference(x_value):
        c_value = np_conv3x3(x_value, weights[0])
        for weight in weights[1:-1]:
            c_value = np.concatenate([c_value, np_conv3x3(np.maximum(c_value, 0), weight)], axis=1)
        return np_conv3x3(c_value, weights[-1])
    return module, reference


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_dense_block_writes_its_convs_into_the_concatenation(concurrent):
    module, reference = _dense_block()
    lib = _compile(module, concurrent)
    copied = _compile(module, concurrent, zero_copy_concat=False)
    assert lib.summary()["placed_concats"] == 3 and copied.summary()["placed_concats"] == 0
    assert lib.summary()["kernel_launches"] == copied.summary()["kernel_launches"] - 3
    assert not any("concatenate" in step.ops for step in lib.plan.steps)
    assert bool(lib.plan.concurrent_levels) == concurrent
    # the chain is one storage: every conv output and every concatenation lives in the last one
    outermost = lib.plan.placed_concats[-1].output
    assert sum(1 for v in lib.plan.values if v.placed_in >= 0) == 6
    assert all(lib.plan.root(p) == outermost for c in lib.plan.placed_concats for p in c.inputs)
    _check_plan(lib.plan)
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    native = lib.run([x])
    assert lib.executor.executor_kind.startswith("native entry")
    np.testing.assert_allclose(native[0], reference(x), rtol=1e-4, atol=1e-4)
    assert_same_bits(native, lib.executor.run_with([x], native=False))
    assert_same_bits(native, copied.run([x]))
    lib.executor.concurrent = False
    assert_same_bits(native, lib.executor.run_with([x], native=False))
    assert lib.summary()["peak_activation_bytes"] <= copied.summary()["peak_activation_bytes"]


def test_the_tuner_extracts_no_elided_concatenation():
    from tensorkiln.compiler import driver
    module, _ = _dense_block()
    with tk.passes.PassContext(opt_level=3, disabled={"alter_layout"}):
        calls, _ = driver.fused_groups(module, "cpu_llvm")
    assert not any(isinstance(c.op.body, graph.Call) and c.op.body.op.name == "concatenate" for c in calls)
    assert len(calls) == len(_compile(module).plan.steps)


def _dense(x, rows: int, columns: int) -> tuple:
    weight = (RNG.standard_normal((rows, columns)) * 0.3).astype(np.float32)
    return graph.nn.dense(x, graph.const(weight)), weight


def test_concatenations_whose_inputs_interleave_keep_their_kernel():
    """Batch 2 on channels, and NHWC on channels: each input is many byte ranges of the output."""
    w1, w2 = _weight(4, 4), _weight(4, 4)
    for shape, axis in (((2, 4, 6, 6), 1), ((1, 4, 6, 6), 2), ((1, 4, 6, 6), 3)):
        x = graph.var("x", shape=shape)
        joined = graph.concatenate([conv3x3(x, w1), conv3x3(x, w2)], axis=axis)
        lib = _compile(graph.Module.from_expr(graph.nn.relu(graph.sigmoid(joined)) + graph.const(np.float32(1))))
        assert lib.summary()["placed_concats"] == 0
        x_value = RNG.standard_normal(shape).astype(np.float32)
        want = np.concatenate([np_conv3x3(x_value, w1), np_conv3x3(x_value, w2)], axis=axis)
        np.testing.assert_allclose(lib(x_value), np.maximum(1 / (1 + np.exp(-want)), 0) + 1, rtol=1e-4, atol=1e-4)


def test_a_concatenation_on_axis_0_and_an_nhwc_one_with_one_pixel_are_placed():
    x = graph.var("x", shape=(1, 6))
    a, wa = _dense(x, 4, 6)
    b, wb = _dense(x, 3, 6)
    c, wc = _dense(graph.concatenate([a, b], axis=1), 5, 7)    # (1, 7): outer extent 1
    stacked = graph.concatenate([graph.reshape(c, (1, 1, 5)), graph.reshape(c + graph.const(np.float32(1)),
                                                                            (1, 1, 5))], axis=0)
    module = graph.Module.from_expr(graph.sigmoid(stacked))
    lib = _compile(module)
    assert lib.summary()["placed_concats"] >= 1
    _check_plan(lib.plan)
    x_value = RNG.standard_normal((1, 6)).astype(np.float32)
    joined = np.concatenate([x_value @ wa.T, x_value @ wb.T], axis=1) @ wc.T
    want = 1 / (1 + np.exp(-np.stack([joined, joined + 1]).reshape(2, 1, 5)))
    got = lib(x_value)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert_same_bits([got], lib.executor.run_with([x_value], native=False))


def test_inputs_that_cannot_be_placed_keep_the_concatenation_correct():
    """A model input, a constant, a value twice, a value in two concatenations, a model output: the
    concatenation keeps its kernel (or, for the second of two, only the first places the value)."""
    x = graph.var("x", shape=(1, 4, 6, 6))
    w1, w2, w3 = _weight(4, 4), _weight(4, 4), _weight(4, 8)
    a, b = conv3x3(x, w1), conv3x3(x, w2)
    table = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    with_input = graph.concatenate([a, x], axis=1)
    with_constant = graph.concatenate([b, graph.const(table)], axis=1)
    twice = graph.concatenate([a, a], axis=1)
    first_of_two = graph.concatenate([b, a], axis=1)    # b placed here unless with_constant kept b
    second_of_two = graph.concatenate([a, b], axis=1)
    outputs = [conv3x3(v, w3) for v in (with_input, with_constant, twice, first_of_two, second_of_two)]
    as_output = graph.concatenate([conv3x3(x, w3[:, :4]), conv3x3(x, w3[:, 4:])], axis=1)   # a model output
    module = graph.Module.from_expr(graph.tuple_(*outputs, as_output, a))            # a: an output too
    lib = _compile(module)
    copied = _compile(module, zero_copy_concat=False)
    _check_plan(lib.plan)
    x_value = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    a_value, b_value = np_conv3x3(x_value, w1), np_conv3x3(x_value, w2)
    joined = [np.concatenate(pair, axis=1) for pair in ((a_value, x_value), (b_value, table), (a_value, a_value),
                                                         (b_value, a_value), (a_value, b_value))]
    want = [np_conv3x3(v, w3) for v in joined]
    want += [np.concatenate([np_conv3x3(x_value, w3[:, :4]), np_conv3x3(x_value, w3[:, 4:])], axis=1), a_value]
    got = lib.run([x_value])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert_same_bits(got, lib.executor.run_with([x_value], native=False))
    assert_same_bits(got, copied.run([x_value]))
    # only b can be placed (a is a model output), in one concatenation only
    placed = [v for v in lib.plan.values if v.placed_in >= 0]
    assert len(placed) <= 1
    assert all(lib.plan.values[v].placed_in < 0 for v in lib.plan.outputs)


def test_a_value_in_two_concatenations_is_placed_in_the_first_only_and_a_view_of_it_is_an_output():
    x = graph.var("x", shape=(1, 4, 6, 6))
    w = [_weight(4, 4) for _ in range(3)]
    wj = _weight(4, 8)
    b, c, d = (conv3x3(x, weight) for weight in w)
    first, second = graph.concatenate([b, c], axis=1), graph.concatenate([c, d], axis=1)
    module = graph.Module.from_expr(graph.tuple_(conv3x3(first, wj), conv3x3(second, wj), graph.reshape(c, (4, 36))))
    lib = _compile(module)
    assert lib.summary()["placed_concats"] == 1 and lib.summary()["alias_steps"] == 1
    (concat,) = lib.plan.placed_concats
    assert all(lib.plan.values[p].placed_in == concat.output for p in concat.inputs)
    assert sum(1 for v in lib.plan.values if v.placed_in >= 0) == 2
    _check_plan(lib.plan)
    x_value = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    b_value, c_value, d_value = (np_conv3x3(x_value, weight) for weight in w)
    got = lib.run([x_value])
    np.testing.assert_allclose(got[0], np_conv3x3(np.concatenate([b_value, c_value], axis=1), wj), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], np_conv3x3(np.concatenate([c_value, d_value], axis=1), wj), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[2], c_value.reshape(4, 36), rtol=1e-4, atol=1e-4)
    assert_same_bits(got, lib.executor.run_with([x_value], native=False))
    assert_same_bits(got, _compile(module, zero_copy_concat=False).run([x_value]))


def test_a_part_read_by_other_steps_is_read_where_it_is_placed():
    """b is placed in concat(a, b) at an offset and also read by two convs and an elementwise group
    before and after the concatenation's reader."""
    x = graph.var("x", shape=(1, 4, 6, 6))
    w1, w2, w3, w4 = _weight(4, 4), _weight(4, 4), _weight(4, 8), _weight(4, 4)
    a, b = conv3x3(x, w1), conv3x3(x, w2)
    joined = conv3x3(graph.concatenate([a, b], axis=1), w3)
    module = graph.Module.from_expr(graph.tuple_(joined + conv3x3(b, w4), graph.sigmoid(b) * joined))
    lib = _compile(module)
    assert lib.summary()["placed_concats"] == 1
    _check_plan(lib.plan)
    x_value = RNG.standard_normal((1, 4, 6, 6)).astype(np.float32)
    a_value, b_value = np_conv3x3(x_value, w1), np_conv3x3(x_value, w2)
    j = np_conv3x3(np.concatenate([a_value, b_value], axis=1), w3)
    got = lib.run([x_value])
    np.testing.assert_allclose(got[0], j + np_conv3x3(b_value, w4), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got[1], 1 / (1 + np.exp(-b_value)) * j, rtol=1e-4, atol=1e-4)
    assert_same_bits(got, lib.executor.run_with([x_value], native=False))


def test_a_plan_with_placed_values_round_trips_through_json_and_the_deploy_runtime(tmp_path):
    from tensorkiln.runtime import deploy
    module, reference = _dense_block(2)
    lib = _compile(module)
    data = lib.plan.to_json()
    assert ExecutionPlan.from_json(data) == lib.plan
    old = {**data, "values": [{k: v for k, v in value.items() if k not in ("placed_in", "placed_offset")}
                              for value in data["values"]]}
    del old["placed_concats"]   # a plan written before placement still loads
    assert ExecutionPlan.from_json(old).placed_concats == ()
    lib.export(tmp_path / "placed.tkpkg")
    model = deploy.load(tmp_path / "placed.tkpkg")
    x = RNG.standard_normal((1, 4, 8, 8)).astype(np.float32)
    assert_same_bits(model.run({"x": x}), lib.run({"x": x}))
    np.testing.assert_allclose(model.run({"x": x})[0], reference(x), rtol=1e-4, atol=1e-4)


# -- the plan alone: dependencies and memory -------------------------------------------------------

def _container_plan() -> ExecutionPlan:
    """x -> k0 -> a, x -> k1 -> b; C = [a | b] (placed); D = [C | d], d = k2(a); k3 reads C, k4 reads b,
    k5 reads a reshape alias of D."""
    f = "float32"
    values = (ValueInfo(0, (1, 4), f, "input", "x"),
              ValueInfo(1, (1, 4), f, "intermediate", "a", placed_in=3, placed_offset=0),
              ValueInfo(2, (1, 4), f, "intermediate", "b", placed_in=3, placed_offset=16),
              ValueInfo(3, (1, 8), f, "intermediate", "C", placed_in=5, placed_offset=0),
              ValueInfo(4, (1, 4), f, "intermediate", "d", placed_in=5, placed_offset=32),
              ValueInfo(5, (1, 12), f, "intermediate", "D"),
              ValueInfo(6, (1, 4), f, "output", "e"),
              ValueInfo(7, (1, 4), f, "output", "g"),
              ValueInfo(8, (12,), f, "intermediate", "D flat", alias_of=5),
              ValueInfo(9, (12,), f, "output", "h"))
    steps = (KernelStep("k0", "cpu", (0,), (1,), ("nn.dense",)),
             KernelStep("k1", "cpu", (0,), (2,), ("nn.dense",)),
             KernelStep("k2", "cpu", (1,), (4,), ("nn.dense",)),
             KernelStep("k3", "cpu", (3,), (6,), ("nn.dense",)),
             KernelStep("k4", "cpu", (2,), (7,), ("nn.relu",)),
             KernelStep("k5", "cpu", (8,), (9,), ("nn.relu",)))
    return ExecutionPlan(values, steps, (0,), (6, 7, 9))


def test_reading_a_concatenation_waits_for_every_part_and_reading_a_part_for_its_writer():
    plan = _container_plan()
    assert plan.root(1) == 5 and plan.root_offset(2) == 16 and plan.root_offset(4) == 32
    assert plan.root(8) == 5 and plan.root_offset(8) == 0
    writers = value_writers(plan)
    assert writers[1] == {0} and writers[2] == {1} and writers[3] == {0, 1}
    assert writers[5] == writers[8] == {0, 1, 2}
    assert step_dependencies(plan) == [set(), set(), {0}, {0, 1}, {1}, {0, 1, 2}]
    for concurrent in (True, False):
        planned = schedule_plan(plan, reuse=True, concurrent=concurrent)
        _check_plan(planned)
        root = planned.values[5].storage
        assert all(planned.values[v].storage == root for v in (1, 2, 3, 4, 8))


def test_a_placed_part_never_takes_a_dying_storage_in_place():
    """t dies at k1, elementwise, whose output b is placed at offset 16 of C: C must not take t's storage
    (b's writes would land on t's unread elements); r = relu(b) reads C's last value from offset 16, so
    it may not run in place over C either."""
    f = "float32"
    values = (ValueInfo(0, (1, 4), f, "input", "x"),
              ValueInfo(1, (1, 8), f, "intermediate", "t"),
              ValueInfo(2, (1, 4), f, "intermediate", "a", placed_in=4, placed_offset=0),
              ValueInfo(3, (1, 8), f, "intermediate", "b", placed_in=4, placed_offset=32),
              ValueInfo(4, (1, 12), f, "intermediate", "C"),
              ValueInfo(5, (1, 12), f, "output", "s"),
              ValueInfo(6, (1, 8), f, "output", "r"))
    steps = (KernelStep("k0", "cpu", (0,), (1,), ("nn.dense",)),
             KernelStep("ka", "cpu", (0,), (2,), ("nn.dense",)),
             KernelStep("k1", "cpu", (1,), (3,), ("nn.relu",)),
             KernelStep("k2", "cpu", (4,), (5,), ("nn.dense",)),
             KernelStep("k3", "cpu", (3,), (6,), ("nn.relu",)))
    planned = plan_memory(ExecutionPlan(values, steps, (0,), (5, 6)))
    storage = {v.name: v.storage for v in planned.values}
    assert storage["C"] != storage["t"]
    assert storage["r"] != storage["C"]
    _check_plan(planned)


# -- random graphs -------------------------------------------------------------------------------

@st.composite
def _concat_graphs(draw):
    """A random DAG over (1, n) vectors: dense layers (each with an optional elementwise epilogue) and
    concatenations of 1 to 3 earlier values, some of them read again later; numpy alongside."""
    x = graph.var("x", shape=(1, 4))
    x_value = RNG.standard_normal((1, 4)).astype(np.float32)
    exprs, values = [x], [x_value.astype(np.float64)]
    for step in range(draw(st.integers(3, 9))):
        if step >= 2 and draw(st.integers(0, 4)) >= 2:
            # mostly distinct kernel outputs (placeable); now and then the input or a value twice
            lowest = 0 if draw(st.integers(0, 4)) == 0 else 1
            picks = draw(st.lists(st.integers(lowest, len(exprs) - 1), min_size=1, max_size=3,
                                  unique=draw(st.integers(0, 4)) > 0))
            exprs.append(graph.concatenate([exprs[i] for i in picks], axis=1))
            values.append(np.concatenate([values[i] for i in picks], axis=1))
            continue
        source = draw(st.integers(0, len(exprs) - 1))
        columns = values[source].shape[1]
        rows = draw(st.integers(1, 6))
        weight = (RNG.standard_normal((rows, columns)) / np.sqrt(columns)).astype(np.float32)
        expr, value = graph.nn.dense(exprs[source], graph.const(weight)), values[source] @ weight.T.astype(np.float64)
        epilogue = draw(st.sampled_from(["none", "relu", "sigmoid", "add"]))
        if epilogue == "relu":
            expr, value = graph.nn.relu(expr), np.maximum(value, 0)
        elif epilogue == "sigmoid":
            expr, value = graph.sigmoid(expr), 1 / (1 + np.exp(-value))
        elif epilogue == "add":
            expr, value = expr + graph.const(np.float32(0.5)), value + 0.5
        exprs.append(expr)
        values.append(value)
    weight = (RNG.standard_normal((2, values[-1].shape[1]))).astype(np.float32)
    exprs.append(graph.nn.dense(exprs[-1], graph.const(weight)))   # mostly, concatenations are not outputs
    values.append(values[-1] @ weight.T.astype(np.float64))
    extra = [draw(st.integers(1, len(exprs) - 1))] if draw(st.integers(0, 3)) == 0 else []
    outputs = sorted({len(exprs) - 1, *extra})
    return graph.Module.from_expr(graph.tuple_(*(exprs[i] for i in outputs))), x_value, [values[i] for i in outputs]


@settings(max_examples=25, deadline=None)
@given(case=_concat_graphs(), concurrent=st.booleans())
def test_random_concatenation_graphs_match_numpy(case, concurrent):
    module, x_value, want = case
    lib = _compile(module, concurrent)
    _check_plan(lib.plan)
    got = lib.run([x_value])
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    assert_same_bits(got, lib.executor.run_with([x_value], native=False))


def test_an_if_step_reads_a_placed_value_where_it_lies():
    """b = x @ w2 is placed at an offset of concat(a, b); an If (a control-flow step, run inside the
    native entry or by Python) reads b from the outer scope."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper
    weights = {name: RNG.standard_normal(shape).astype(np.float32)
               for name, shape in (("w1", (4, 3)), ("w2", (4, 5)), ("w3", (8, 2)))}
    then = helper.make_graph([helper.make_node("Relu", ["b"], ["t"])], "then", [],
                             [helper.make_tensor_value_info("t", TensorProto.FLOAT, [1, 5])])
    other = helper.make_graph([helper.make_node("Sigmoid", ["b"], ["e"])], "else", [],
                              [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 5])])
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["a"]), helper.make_node("MatMul", ["x", "w2"], ["b"]),
             helper.make_node("Concat", ["a", "b"], ["c"], axis=1), helper.make_node("MatMul", ["c", "w3"], ["d"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)]
    model = helper.make_model(
        helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4]),
                                       helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
                          [helper.make_tensor_value_info("d", TensorProto.FLOAT, [1, 2]),
                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
                          initializer=[numpy_helper.from_array(v, k) for k, v in weights.items()]),
        opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    lib = _compile(model)
    assert lib.summary()["placed_concats"] == 1
    _check_plan(lib.plan)
    x = RNG.standard_normal((1, 4)).astype(np.float32)
    a, b = x @ weights["w1"], x @ weights["w2"]
    for flag in (True, False):
        feeds = {"x": x, "flag": np.array(flag)}
        got = lib.run(feeds)
        np.testing.assert_allclose(got[0], np.concatenate([a, b], axis=1) @ weights["w3"], rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(got[1], np.maximum(b, 0) if flag else 1 / (1 + np.exp(-b)), rtol=1e-5, atol=1e-6)
        assert_same_bits(got, lib.executor.run_with(feeds, native=False))
