"""Placement and heterogeneous execution: ops a target cannot run fall back to the CPU.

The target under test is a throw-away plugin, "fake_gpu", installed into a tmp folder
(package + .dist-info, found through the real entry-point discovery). It reuses the
opencl target's emitter and loader objects, obtained through public API only
(`tensorkiln.target("opencl").spec`), and restricts what it runs:

- manifest: every op except nn.max_pool2d and nn.softmax (reason "not_in_manifest");
- a `tensorkiln_supported_ops` predicate: nn.conv2d only with groups == 1 (reason
  "predicate:grouped_conv").

Results are compared with the graph reference interpreter; the placement report
(`CompiledModel.placement()`), strict mode and the `tensorkiln compile` CLI are checked.
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.ir.errors import UnsupportedOpError
from tensorkiln.sdk import plugin_manager
from tensorkiln.sdk.plugin_manager import reload_plugins


if str(Path(__file__).resolve().parents[2]) not in sys.path:  # tests/compiler has no __init__.py
    sys.path.append(str(Path(__file__).resolve().parents[2]))
from tests.sdk.fake_plugins import write_plugin  # noqa: E402


def _opencl_spec():
    try:
        spec = tk.target("opencl").spec
    except Exception:  # the plugin is not installed in this environment
        return None
    return spec if spec.is_available else None


OPENCL_SPEC = _opencl_spec()
pytestmark = pytest.mark.skipif(OPENCL_SPEC is None, reason="the fake target reuses the opencl emitter and loader, "
                                "which need pyopencl and an OpenCL device")

MANIFEST = """\
[plugin]
name = "fake_gpu"
version = "0.1.0"
sdk_api = ">=1.0,<2"
device_kind = "gpu"
available = true

[capabilities]
dtypes = ["bool", "int32", "int64", "float32"]
vector_width_bits = 128
max_threads_per_block = 256
max_shared_memory_bytes = 32768
memory_scopes = ["global", "shared", "local"]
thread_axes = ["blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z"]

[options]
platform = { type = "str", help = "substring of the OpenCL platform name to use" }
device = { type = "int", default = 0, help = "device index on the platform" }

[ops]
supported = ["*"]
unsupported = ["nn.max_pool2d", "nn.softmax"]
"""

PLUGIN = """\
from tensorkiln.sdk import TargetSpec, hookimpl, load_manifest

import tk_fake_gpu_parts as parts

SPEC = TargetSpec(manifest=load_manifest(__file__), emitter=parts.EMITTER, loader=parts.LOADER)


@hookimpl
def tensorkiln_targets():
    return [SPEC]


@hookimpl
def tensorkiln_supported_ops(target):
    if target.name != "fake_gpu":
        return {}
    return {"nn.conv2d": lambda call: True if call.attrs.groups == 1 else "grouped_conv"}
"""


@pytest.fixture(scope="module")
def fake_gpu(tmp_path_factory):
    """Install the fake_gpu plugin for this module's tests; uninstall it afterwards."""
    root = tmp_path_factory.mktemp("fake_gpu_plugin")
    write_plugin(root, "tk_fake_gpu", "fake_gpu", plugin_code=PLUGIN, manifest=MANIFEST)
    (root / "tk_fake_gpu_parts.py").write_text("EMITTER = LOADER = None  # set by the test before discovery\n")
    sys.path.insert(0, str(root))
    parts = importlib.import_module("tk_fake_gpu_parts")
    parts.EMITTER, parts.LOADER = OPENCL_SPEC.emitter, OPENCL_SPEC.loader
    previous = plugin_manager.registry()
    try:
        registry = reload_plugins()
        assert "fake_gpu" in registry.names(), registry.errors
        yield tk.target("fake_gpu")
    finally:
        sys.path.remove(str(root))
        for name in ("tk_fake_gpu", "tk_fake_gpu.plugin", "tk_fake_gpu_parts"):
            sys.modules.pop(name, None)
        # Put the very same registry back: other tests hold its TargetSpecs and compare by identity.
        plugin_manager._registry = previous


def _model(groups: int = 1):
    """conv -> relu -> max_pool -> conv(groups) -> relu -> flatten -> dense -> softmax."""
    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(1, 4, 8, 8))
    w1 = graph.const(rng.standard_normal((8, 4, 3, 3)).astype("float32") * 0.3)
    w2 = graph.const(rng.standard_normal((8, 8 // groups, 3, 3)).astype("float32") * 0.3)
    w3 = graph.const(rng.standard_normal((10, 8 * 4 * 4)).astype("float32") * 0.1)
    y = graph.nn.relu(graph.nn.conv2d(x, w1, padding=(1, 1, 1, 1)))
    y = graph.nn.max_pool2d(y, pool_size=(2, 2), strides=(2, 2))
    y = graph.nn.relu(graph.nn.conv2d(y, w2, padding=(1, 1, 1, 1), groups=groups))
    y = graph.nn.dense(graph.reshape(y, (1, 8 * 4 * 4)), w3)
    return graph.Module.from_expr(graph.nn.softmax(y, axis=-1))


def _input():
    return (np.arange(256, dtype="float32").reshape(1, 4, 8, 8) / 256.0)


def _check_matches_reference(lib, mod):
    x = _input()
    expected = evaluate(mod, {"x": x})
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-6)


def test_unsupported_ops_fall_back_to_the_cpu_and_results_match(fake_gpu):
    mod = _model()
    lib = tk.compile(mod, fake_gpu, opt_level=2)
    rows = lib.placement()
    fallback = [row for row in rows if row["fallback_reason"]]
    assert {op for row in fallback for op in row["ops"]} == {"nn.max_pool2d", "nn.softmax"}
    assert all(row["target"].startswith("cpu_llvm") and row["fallback_reason"] == "not_in_manifest"
               for row in fallback)
    on_gpu = [row for row in rows if not row["fallback_reason"]]
    assert on_gpu and all(row["target"] == str(fake_gpu) for row in on_gpu)
    assert "nn.conv2d" in {op for row in on_gpu for op in row["ops"]}
    _check_matches_reference(lib, mod)


def test_groups_never_mix_targets_and_each_group_runs_where_its_ops_are_placed(fake_gpu):
    lib = tk.compile(_model(), fake_gpu, opt_level=2)
    for row in lib.placement():
        cpu_ops = {"nn.max_pool2d", "nn.softmax"} & set(row["ops"])
        assert not cpu_ops or row["target"].startswith("cpu_llvm"), row
        assert cpu_ops or row["target"] == str(fake_gpu), row


def test_a_predicate_rejection_falls_back_with_its_reason(fake_gpu):
    mod = _model(groups=2)
    lib = tk.compile(mod, fake_gpu, opt_level=2)
    reasons = {row["fallback_reason"] for row in lib.placement() if "nn.conv2d" in row["ops"]}
    assert reasons == {"", "predicate:grouped_conv"}
    _check_matches_reference(lib, mod)


def test_neighbouring_fallback_ops_share_a_group_so_copies_stay_few(fake_gpu):
    """The reshape between the CPU max_pool2d and the CPU softmax runs on the CPU too
    (reason follows_fallback), so the values cross targets twice instead of four times."""
    x = graph.var("x", shape=(1, 4, 8, 8))
    y = graph.nn.max_pool2d(graph.nn.relu(x), pool_size=(2, 2), strides=(2, 2))
    y = graph.nn.softmax(graph.reshape(y, (1, 64)), axis=-1)
    mod = graph.Module.from_expr(graph.exp(y))
    lib = tk.compile(mod, fake_gpu, opt_level=2)
    targets = [row["target"].split()[0] for row in lib.placement()]
    switches = sum(1 for a, b in zip(targets, targets[1:]) if a != b)
    assert switches == 2, lib.placement()
    reasons = {op: row["fallback_reason"] for row in lib.placement() for op in row["ops"]}
    # the reshape is elided (its output aliases the CPU pool's buffer): no kernel, the same placement
    reasons.update({op: a.fallback_reason for a in lib.plan.aliases for op in a.ops if a.target.startswith("cpu")})
    assert reasons["reshape"] == "follows_fallback" and reasons["nn.relu"] == reasons["exp"] == ""
    _check_matches_reference_exp(lib, mod)


def _check_matches_reference_exp(lib, mod):
    x = _input()
    np.testing.assert_allclose(lib(x), evaluate(mod, {"x": x}), rtol=1e-5, atol=1e-7)


def test_strict_mode_refuses_and_lists_every_unsupported_op(fake_gpu):
    with pytest.raises(UnsupportedOpError) as raised:
        tk.compile(_model(groups=2), fake_gpu, opt_level=2, strict=True)
    message = str(raised.value)
    assert "strict mode refuses to fall back" in message
    assert "nn.max_pool2d (not_in_manifest)" in message and "nn.softmax (not_in_manifest)" in message
    assert "nn.conv2d (predicate:grouped_conv)" in message
    assert message.count("\n  nn.conv2d") == 1  # the groups=1 conv runs on fake_gpu


def test_strict_mode_compiles_when_every_op_is_supported(fake_gpu):
    x = graph.var("x", shape=(2, 8))
    mod = graph.Module.from_expr(graph.nn.relu(x) * 2.0)
    lib = tk.compile(mod, fake_gpu, strict=True)
    assert {row["target"] for row in lib.placement()} == {str(fake_gpu)}
    a = np.linspace(-1, 1, 16, dtype="float32").reshape(2, 8)
    np.testing.assert_allclose(lib(a), np.maximum(a, 0) * 2)


def test_cli_compile_prints_the_placement_and_strict_fails(fake_gpu, tmp_path, capsys):
    import onnx
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2])
    relu = helper.make_node("Relu", ["p"], ["y"])
    model = helper.make_model(helper.make_graph(
        [node, relu], "pool_relu", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 2, 2])]))
    path = tmp_path / "pool_relu.onnx"
    onnx.save(model, str(path))
    from tensorkiln.cli import main
    assert main(["compile", str(path), "--target", "fake_gpu", "-o", str(tmp_path / "m.tkpkg")]) == 0
    out = capsys.readouterr().out
    assert "placement" in out and "not_in_manifest" in out and "cpu_llvm" in out and "fake_gpu" in out
    assert main(["compile", str(path), "--target", "fake_gpu", "--strict", "-o", str(tmp_path / "s.tkpkg")]) != 0
    captured = capsys.readouterr()
    assert "nn.max_pool2d (not_in_manifest)" in captured.out + captured.err


def test_placement_is_ir_data_on_the_calls_and_the_group_functions(fake_gpu):
    """place_ops annotates each op call; fusion copies the target and reason onto the group function."""
    from tensorkiln.compiler.placement import place_ops
    from tensorkiln.passes import fuse_ops, group_each_op

    placed = place_ops(_model(), fake_gpu)
    calls = {c.op.name: c for c in graph.post_order(placed.main.body) if isinstance(c, graph.Call)}
    assert calls["nn.max_pool2d"].target.startswith("cpu_llvm")
    assert calls["nn.max_pool2d"].fallback_reason == "not_in_manifest"
    assert calls["nn.conv2d"].target == str(fake_gpu) and calls["nn.conv2d"].fallback_reason == ""
    fused = group_each_op(fuse_ops(placed))
    groups = [c.op for c in graph.post_order(fused.main.body)
              if isinstance(c, graph.Call) and isinstance(c.op, graph.Function)]
    for function in groups:
        members = [c for c in graph.post_order(function.body) if isinstance(c, graph.Call)]
        assert {c.target for c in members} == {function.attr("target")}      # a group never mixes targets
        reasons = [c.fallback_reason for c in members if c.fallback_reason]
        assert function.attr("fallback_reason", "") == (reasons[0] if reasons else "")
    lib = tk.compile(_model(), fake_gpu, opt_level=2)
    by_kernel = {row["kernel"]: row for row in lib.placement()}
    assert any(row["fallback_reason"] == "not_in_manifest" for row in by_kernel.values())
