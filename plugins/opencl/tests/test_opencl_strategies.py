"""opencl's strategies: the SDK's GPU schedule library (tensorkiln.sdk.schedules.gpu), opted into by the
plugin's `tensorkiln_strategies` hook, with knob defaults from opencl's capabilities."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.strategy import implementations_for
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.ops import tags


def test_opencl_declares_the_gpu_library_for_every_anchor_and_injective(opencl_target):
    found = {impl.name: impl for impl in implementations_for(opencl_target)}
    assert set(found) >= {f"opencl.{key}" for key in (*tags.ANCHOR_TAGS, "injective")}
    assert {impl.plugin for impl in found.values()} == {"tensorkiln-opencl:opencl"}
    assert not [name for name in found if name.startswith("cpu_llvm.")]


def test_a_model_on_opencl_reports_opencl_strategies_and_matches_the_reference(opencl_target):
    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(1, 4, 8, 8))
    y = graph.nn.relu(graph.nn.conv2d(x, graph.const(rng.standard_normal((8, 4, 3, 3)).astype("float32") * 0.3),
                                      padding=(1, 1, 1, 1)))
    y = graph.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = graph.nn.dense(graph.reshape(y, (1, 8 * 4 * 4)),
                       graph.const(rng.standard_normal((10, 8 * 4 * 4)).astype("float32") * 0.1))
    mod = graph.Module.from_expr(graph.nn.softmax(y, axis=-1))
    lib = tk.compile(mod, opencl_target, strict=True)
    strategies = lib.summary()["strategies"]
    assert strategies and all(entry["strategy"].startswith("opencl.") for entry in strategies.values())
    block = min(256, opencl_target.capabilities.max_threads_per_block)
    assert all(entry["config"]["threads_per_block"] == block for entry in strategies.values())
    by_ops = {tuple(entry["ops"]): entry for entry in strategies.values()}
    conv = next(entry for ops, entry in by_ops.items() if "nn.conv2d" in ops)
    assert conv["strategy"] == "opencl.conv2d_nchw" and conv["config"]["conv_channel_block"] == 4
    dense = next(entry for ops, entry in by_ops.items() if "nn.dense" in ops)
    assert dense["strategy"] == "opencl.dense" and "matmul_tile" in dense["config"]
    data = rng.uniform(0, 1, size=(1, 4, 8, 8)).astype("float32")
    np.testing.assert_allclose(lib(data), evaluate(mod, {"x": data}), rtol=1e-4, atol=1e-6)
