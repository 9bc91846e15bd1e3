"""cuda's default GPU strategies with cross-thread reductions: warp shuffles within warps (the
manifest's warp_size = 32), __shared__ memory once across warps; run on the CPU shim, and every
reduction kernel compiles under NVRTC for sm_90 without spills."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.sdk.schedules.gpu_reduce import cross_thread_threads

CASES = {
    "sum": (lambda x: graph.sum(x, axis=(1,)), (3, 1000)),
    "argmax": (lambda x: graph.argmax(x, axis=1), (2, 700)),
    "softmax": (lambda x: graph.nn.softmax(x, axis=-1), (4, 1000)),
    "global_avg_pool": (lambda x: graph.nn.global_avg_pool2d(x), (1, 4, 17, 19)),
}

_SLOW = ("argmax", "global_avg_pool")   # two more shim builds (~15 s on a loaded machine); --runslow


def _compile(build, shape, target):
    x = graph.var("x", shape=shape)
    mod = graph.Module.from_expr(build(x))
    lib = tk.compile(mod, target, strict=True)
    return mod, lib, list(lib.artifacts.values())


@pytest.mark.parametrize("name", [pytest.param(name, marks=[pytest.mark.slow] if name in _SLOW else [])
                                  for name in sorted(CASES)])
def test_long_reductions_use_warp_shuffles_and_match_the_reference_on_the_shim(shim_target, name):
    build, shape = CASES[name]
    mod, lib, artifacts = _compile(build, shape, shim_target)
    source = "".join(artifact.source or "" for artifact in artifacts)
    assert "__shfl_down_sync(0xffffffffu" in source and "__shfl_sync(0xffffffffu" in source
    data = np.random.default_rng(0).standard_normal(shape).astype("float32")
    np.testing.assert_allclose(lib(data), evaluate(mod, {"x": data}), rtol=1e-4, atol=1e-5)


def test_reduction_kernels_compile_for_sm_90_without_spills():
    target = tk.target("cuda -arch=sm_90 -device=cpu_shim")
    for name in ("softmax", "argmax"):
        build, shape = CASES[name]
        _, _, artifacts = _compile(build, shape, target)
        resources = [kernel for artifact in artifacts
                     for kernel in (artifact.metadata.get("resources") or {}).values()]
        assert resources, f"{name}: no ptxas resources recorded"
        assert all(kernel.get("spill_stores", 0) == 0 and kernel.get("spill_loads", 0) == 0
                   for kernel in resources), resources


def test_the_rule_rounds_to_the_declared_warp_size(shim_target):
    assert shim_target.capabilities.warp_size == 32
    assert cross_thread_threads(shim_target, rows=2, length=63, block=256) == 0       # < 2 warps of elements
    assert cross_thread_threads(shim_target, rows=2, length=64, block=256) == 64
    assert cross_thread_threads(shim_target, rows=2, length=10_000, block=256) == 256
    assert cross_thread_threads(shim_target, rows=2, length=10_000, block=2048) == 1024   # max_threads_per_block
