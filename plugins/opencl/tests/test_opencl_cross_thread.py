"""opencl's default GPU strategies with cross-thread reductions (sdk/schedules/gpu_reduce.py): long
reductions over few rows run one work-group per row, combined through __local memory with
barrier(CLK_LOCAL_MEM_FENCE); short reductions over many rows keep one work-item per output."""
from __future__ import annotations

import re

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.sdk.schedules.gpu_reduce import cross_thread_threads

_GAMMA = np.random.default_rng(1).standard_normal(600).astype("float32")

CASES = {
    "sum": (lambda x: graph.sum(x, axis=(1,)), (3, 1000)),
    "mean_keepdims": (lambda x: graph.mean(x, axis=(1, 2), keepdims=True), (2, 30, 40)),
    "max_all": (lambda x: graph.max(x), (37, 41)),
    "argmax": (lambda x: graph.argmax(x, axis=1), (3, 777)),
    "softmax": (lambda x: graph.nn.softmax(x, axis=-1), (4, 1000)),
    "log_softmax": (lambda x: graph.nn.log_softmax(x, axis=-1), (2, 513)),
    "layer_norm": (lambda x: graph.nn.layer_norm(x, graph.const(_GAMMA), graph.const(_GAMMA[::-1].copy())), (3, 600)),
    "global_avg_pool": (lambda x: graph.nn.global_avg_pool2d(x), (1, 4, 17, 19)),
    "global_max_pool": (lambda x: graph.nn.global_max_pool2d(x), (1, 3, 30, 30)),
}


def _compile(build, shape, target):
    x = graph.var("x", shape=shape)
    mod = graph.Module.from_expr(build(x))
    lib = tk.compile(mod, target, strict=True)
    source = "".join(artifact.source or "" for artifact in lib.artifacts.values())
    return mod, lib, source


@pytest.mark.parametrize("name", sorted(CASES))
def test_long_reductions_combine_across_a_work_group_and_match_the_reference(opencl_target, name):
    build, shape = CASES[name]
    mod, lib, source = _compile(build, shape, opencl_target)
    assert re.search(r"__local \w+ red_buf\[", source) and "barrier(CLK_LOCAL_MEM_FENCE);" in source
    data = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(lib(data), evaluate(mod, {"x": data}), rtol=1e-4, atol=1e-5)


def test_short_reductions_over_many_rows_keep_one_work_item_per_row(opencl_target):
    mod, lib, source = _compile(lambda x: graph.nn.softmax(x, axis=-1), (500, 12), opencl_target)
    assert "red_buf" not in source
    data = np.random.default_rng(0).standard_normal((500, 12)).astype("float32")
    np.testing.assert_allclose(lib(data), evaluate(mod, {"x": data}), rtol=1e-4, atol=1e-6)


def test_the_rule_reads_threads_per_block_and_uses_a_minimum_group_without_a_warp_size(opencl_target):
    limit = opencl_target.capabilities.max_threads_per_block
    assert opencl_target.capabilities.warp_size == 0
    assert cross_thread_threads(opencl_target, rows=4, length=100_000, block=4096) == limit
    assert cross_thread_threads(opencl_target, rows=4, length=100, block=256) == 64
    assert cross_thread_threads(opencl_target, rows=4, length=31, block=256) == 0        # < 2 x 16
    assert cross_thread_threads(opencl_target, rows=5000, length=1000, block=256) == 0   # rows >= length
