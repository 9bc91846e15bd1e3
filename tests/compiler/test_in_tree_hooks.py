"""Every hookspec has an in-tree implementer that tk.compile exercises (the SDK's promise, tested).

- tensorkiln_targets / tensorkiln_intrinsics: every compile (and the micro-kernel tensorize);
- tensorkiln_strategies: cpu_llvm and opencl (see test_strategies.py);
- tensorkiln_layout_preferences: cpu_llvm prefers NHWC convs when its CPU has >= 256-bit vectors;
- tensorkiln_supported_ops: opencl sends a long topk to the CPU with a reason;
- tensorkiln_passes: cpu_llvm turns a micro-kernel-sized constant-weight dense into a matmul;
- tensorkiln_schedule_rules: the tutorial plugin (sdk_docs/examples/tk_plainc) overrides its
  elementwise schedule; tests/conformance/test_tutorial_example.py compiles with it.
"""
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph import Module
from tensorkiln.sdk.plugin_manager import registry


REPO = Path(__file__).resolve().parents[2]


def _hook_implementers(name: str) -> set[str]:
    return {impl.plugin_name for impl in getattr(registry().hooks.hook, name).get_hookimpls()}


def test_every_hookspec_has_an_in_tree_implementer():
    from tensorkiln.sdk.hookspecs import TensorkilnHookSpecs
    in_tree = ("cpu_llvm", "opencl")
    for name in (n for n in dir(TensorkilnHookSpecs) if n.startswith("tensorkiln_")):
        if name == "tensorkiln_schedule_rules":
            # implemented by the tutorial plugin, which is pip-installed only inside its own test
            source = (REPO / "sdk_docs/examples/tk_plainc/tk_plainc/plugin.py").read_text()
            assert f"def {name}(" in source
            continue
        implementers = _hook_implementers(name)
        assert any(t in p for p in implementers for t in in_tree), (name, implementers)


def _conv_model():
    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(1, 32, 16, 16))
    w1 = graph.const(rng.standard_normal((32, 32, 3, 3)).astype("float32") * 0.1)
    w2 = graph.const(rng.standard_normal((64, 32, 1, 1)).astype("float32") * 0.1)
    y = graph.nn.relu(graph.nn.conv2d(x, w1, padding=1))
    y = graph.nn.relu(graph.nn.conv2d(y, w2))
    return Module.from_expr(y)


def _conv_layouts(lib) -> list[str]:
    return [c.attrs.data_layout for c in graph.post_order(lib.graph.main.body)
            if isinstance(c, graph.Call) and getattr(c.op, "name", "") == "nn.conv2d"] or \
        [c.attrs.data_layout for f in graph.post_order(lib.graph.main.body) if isinstance(f, graph.Call)
         and isinstance(f.op, graph.Function) for c in graph.post_order(f.op.body)
         if isinstance(c, graph.Call) and getattr(c.op, "name", "") == "nn.conv2d"]


def test_cpu_llvm_layout_preference_follows_the_cpu_at_the_default_opt_level():
    mod = _conv_model()
    data = np.random.default_rng(1).standard_normal((1, 32, 16, 16)).astype("float32")
    expected = graph.evaluate(mod, {"x": data})
    wide = tk.compile(mod, target="cpu_llvm -mcpu=haswell")               # AVX2: 256-bit vectors
    assert set(_conv_layouts(wide)) == {"NHWC"}
    narrow = tk.compile(mod, target="cpu_llvm -mcpu=x86-64")              # SSE2 baseline: 128-bit
    assert set(_conv_layouts(narrow)) == {"NCHW"}
    for lib in (wide, narrow):
        np.testing.assert_allclose(lib(data), expected, rtol=1e-4, atol=1e-4)
    assert tk.target("cpu_llvm -mcpu=haswell").capabilities.vector_width_bits == 256
    assert tk.target("cpu_llvm -mcpu=x86-64").capabilities.vector_width_bits == 128


def test_opencl_supported_ops_predicate_sends_a_long_topk_to_the_cpu_with_its_reason():
    for n, expected_target in ((64, "opencl"), (10000, "cpu_llvm")):
        x = graph.var("x", shape=(n,))
        values = graph.TupleGetItem(graph.call("topk", x, k=3), 0)
        lib = tk.compile(Module.from_expr(values), target="opencl")
        data = np.random.default_rng(n).random(n).astype("float32")
        np.testing.assert_allclose(lib(data), np.sort(data)[::-1][:3])
        (step,) = lib.placement()
        assert step["target"].split()[0] == expected_target
        if expected_target == "cpu_llvm":
            assert step["fallback_reason"].startswith("predicate:serial_on_one_work_item")


@pytest.mark.parametrize("rows, expected_op", [(64, "nn.dense_pack"), (1, "nn.dense")])
def test_cpu_llvm_pass_rewrites_only_micro_kernel_sized_dense(rows, expected_op):
    """A micro-kernel-sized dense with a constant weight runs with the weight packed at compile time
    (transposed to a matmul, then packed: nn.dense_pack); a one-row dense stays nn.dense (dense_split)."""
    rng = np.random.default_rng(rows)
    weight = rng.standard_normal((128, 96)).astype("float32")
    x = graph.var("x", shape=(rows, 96))
    lib = tk.compile(Module.from_expr(graph.nn.dense(x, graph.const(weight))), target="cpu_llvm")
    ops = [op for row in lib.placement() for op in row["ops"]]
    assert [op for op in ops if op.startswith("nn.")] == [expected_op]
    data = rng.standard_normal((rows, 96)).astype("float32")
    np.testing.assert_allclose(lib(data), data @ weight.T, rtol=1e-4, atol=1e-4)
    assert {"cpu_llvm_transpose_dense_weights", "cpu_llvm_pack_dense_weights"}.isdisjoint(
        lib.summary()["skipped_passes"])
