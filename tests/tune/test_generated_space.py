"""Generated search spaces (tune/sketch.py, Ansor-style sketches): random points of the space of a
GEMM, a conv2d with its epilogue, a softmax and an elementwise group all compute what numpy
computes; an illegal point is a negative sample with its reason; a generated record is applied by
tk.compile only when it beat a measured template record."""
from __future__ import annotations

import json
import random

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, tune
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.tune.measure import MeasureOptions, build_candidate, run_kernel
from tensorkiln.tune.record import INVALID, MeasureResult
from tensorkiln.tune.sketch import GENERATED_NAME, tile_candidates

TARGET = "cpu_llvm"
OPTIONS = MeasureOptions(repeats=1, min_seconds=0.0, timeout=60)


def _outputs(task, config, inputs):
    built = build_candidate(task, config)
    assert built.artifact is not None, built.result.error
    answer = run_kernel(built.artifact, str(task.target), built.inputs, inputs, None, None, OPTIONS)
    return answer["outputs"]


def _random_configs(task, count: int, seed: int):
    rng = random.Random(seed)
    yield task.space.default_config()
    for _ in range(count):
        yield {knob.name: rng.choice(knob.candidates) for knob in task.space.knobs}


def _conv_reference(data, weight, bias):
    n, c, h, w = data.shape
    o, _, kh, kw = weight.shape
    padded = np.pad(data, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))
    out = np.zeros((n, o, h, w), np.float64)
    for y in range(kh):
        for x in range(kw):
            out += np.einsum("nchw,oc->nohw", padded[:, :, y:y + h, x:x + w], weight[:, :, y, x])
    return np.maximum(out + bias[None, :, None, None], 0)


def test_tile_candidates_divide_the_extent_and_keep_the_innermost_small():
    for extent in (1, 7, 49, 96, 1000, 1024):
        candidates = tile_candidates(extent, 3)
        assert candidates and len(candidates) == len(set(candidates)) <= 96
        for text in candidates:
            a, b, c = map(int, text.split(","))
            assert extent % (a * b * c) == 0 and c <= 64


def test_random_points_of_a_gemm_space_match_numpy():
    task = tune.Task.from_op("gemm", (48, 40, 24), TARGET, space="generated")
    assert task.implementation_name == GENERATED_NAME
    names = {knob.name for knob in task.space.knobs}
    assert {"parallel", "vectorize", "unroll"} <= names and sum(n.startswith("tile_") for n in names) == 3
    a, b = task.input_arrays(seed=3)
    for config in _random_configs(task, 6, seed=1):
        (out,) = _outputs(task, config, [a, b])
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5, err_msg=json.dumps(config))


def test_cache_write_points_of_a_gemm_space_match_numpy():
    """The anchor as the group's output: knob `cache_write` accumulates each output tile in a local
    cache (te cache_write) that is copied out; every tile size with it computes a @ b."""
    task = tune.Task.from_op("gemm", (36, 40, 24), TARGET, space="generated")
    (knob,) = [k for k in task.space.knobs if k.name == "cache_write"]
    assert knob.default is False and set(knob.candidates) == {True, False}
    a, b = task.input_arrays(seed=4)
    configs = [{**config, "cache_write": True} for config in _random_configs(task, 5, seed=2)]
    configs.append({**configs[0], "unroll": True, "vectorize": True, "parallel": True})
    for config in configs:
        func = task.lower(config).func
        assert "local" in str(func), "the cache stage was not made"
        (out,) = _outputs(task, config, [a, b])
        np.testing.assert_allclose(out, a @ b, rtol=1e-5, atol=1e-5, err_msg=json.dumps(config))


def test_random_points_of_a_fused_conv_space_match_numpy():
    data = graph.var("data", shape=(1, 4, 10, 10))
    weight = graph.var("weight", shape=(8, 4, 3, 3))
    bias = graph.var("bias", shape=(8,))
    body = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(data, weight, padding=(1, 1, 1, 1)), bias))
    tasks = tune.extract_tasks(body, TARGET, space="generated", opt_level=1)   # fused, NCHW
    (task,) = [t for t in tasks if "conv2d" in t.name]
    assert "fuse_epilogue" in {knob.name for knob in task.space.knobs}
    rng = np.random.default_rng(5)
    inputs = [rng.uniform(-1, 1, p.checked_type.shape).astype(np.float32) for p in task.function.params]
    by_name = {p.name: x for p, x in zip(task.function.params, inputs)}
    shapes = {x.shape: x for x in inputs}
    expected = _conv_reference(shapes[(1, 4, 10, 10)], shapes[(8, 4, 3, 3)], shapes[(8,)])
    assert len(by_name) == 3
    for config in _random_configs(task, 5, seed=2):
        (out,) = _outputs(task, config, inputs)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4, err_msg=json.dumps(config))


@pytest.mark.parametrize("kind", ["softmax", "elementwise"])
def test_random_points_of_reduction_and_elementwise_spaces_match_numpy(kind):
    x = graph.var("x", shape=(6, 40))
    body = graph.nn.softmax(x, axis=-1) if kind == "softmax" else graph.exp(x) * 2.0 + 1.0
    tasks = tune.extract_tasks(body, TARGET, space="generated")
    assert tasks
    data = np.random.default_rng(0).uniform(-2, 2, (6, 40)).astype(np.float32)
    compared = 0
    for task in tasks:
        inputs = [data] if len(task.function.params) == 1 else None
        if inputs is None:
            continue
        for config in _random_configs(task, 4, seed=3):
            out = _outputs(task, config, inputs)[-1]
            if kind == "softmax":
                e = np.exp(data - data.max(axis=-1, keepdims=True))
                want = e / e.sum(axis=-1, keepdims=True)
            else:
                want = np.exp(data) * 2 + 1
            if out.shape == want.shape:
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6, err_msg=json.dumps(config))
                compared += 1
    assert compared >= 5


def test_an_illegal_point_is_a_negative_sample_with_its_reason():
    task = tune.Task.from_op("gemm", (48, 40, 24), TARGET, space="generated")
    knob = next(k for k in task.space.knobs if k.name.startswith("tile_"))
    built = build_candidate(task, {knob.name: "5,5,5"})
    assert built.artifact is None and built.result.status == INVALID and knob.name in built.result.error
    with pytest.raises(TensorkilnError, match="space=.ansor."):
        tune.Task.from_op("gemm", (8, 8, 8), TARGET, space="ansor")


def _store(db, task, config, cost):
    db.add(task.identity(), MeasureResult(task.validate(config), status="ok", cost=cost))


@pytest.mark.parametrize("generated_wins", [True, False])
def test_a_generated_record_is_applied_only_when_it_beat_a_template_record(generated_wins):
    generated = tune.Task.from_op("gemm", (48, 40, 24), TARGET, space="generated")
    template = generated.template_twin()
    db = tune.Database(":memory:")
    config = dict(generated.space.default_config(), parallel=False)
    _store(db, template, template.space.default_config(), 2e-5)
    _store(db, generated, config, 1e-5 if generated_wins else 3e-5)
    a = graph.var("A", shape=(48, 24))
    b = graph.var("B", shape=(24, 40))
    lib = tk.compile(graph.nn.matmul(a, b), TARGET, tuning_db=db)
    (choice,) = lib.summary()["strategies"].values()
    assert (choice["strategy"] == GENERATED_NAME) == generated_wins
    if generated_wins:
        assert choice["config"] == generated.validate(config) and choice["tuning_record"]["cost"] == 1e-5
    x, y = generated.input_arrays(seed=4)
    np.testing.assert_allclose(lib.run({"A": x, "B": y})[0], x @ y, rtol=1e-5, atol=1e-5)


def test_a_generated_record_without_a_template_record_is_not_applied():
    generated = tune.Task.from_op("gemm", (48, 40, 24), TARGET, space="generated")
    db = tune.Database(":memory:")
    _store(db, generated, generated.space.default_config(), 1e-9)
    lib = tk.compile(graph.nn.matmul(graph.var("A", shape=(48, 24)), graph.var("B", shape=(24, 40))), TARGET,
                     tuning_db=db)
    (choice,) = lib.summary()["strategies"].values()
    assert choice["strategy"] != GENERATED_NAME and choice["tuning_record"] is None
