"""`tensorkiln debug bisect` names the first op whose outputs diverge, on a deliberately broken target.

The broken target is a throw-away plugin whose emitter and loader wrap cpu_llvm's
(found through `tensorkiln.target("cpu_llvm").spec`, never by importing the
plugin) and whose loaded kernels for `nn.relu` add 0.5 to their output.
"""
from __future__ import annotations

import sys

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.conformance.bisect import bisect
from tensorkiln.conformance.intermediates import run_capturing
from tensorkiln.conformance.models import mlp, residual_cnn
from tensorkiln.sdk import reload_plugins

from ..sdk.fake_plugins import write_plugin

_MANIFEST = """\
[plugin]
name = "kiln_broken"
version = "0.1.0"
sdk_api = ">=1.0,<2"
device_kind = "accelerator"

[capabilities]
dtypes = ["float32", "int32", "int64"]

[ops]
supported = ["*"]
"""

_PLUGIN = '''
import numpy as np
import tensorkiln as tk
from tensorkiln.sdk import Emitter, LoadedModule, KernelFunction, RuntimeLoader, TargetSpec, hookimpl, load_manifest


class WrappingEmitter(Emitter):
    def emit(self, funcs, target):
        reference = tk.target("cpu_llvm")
        return reference.spec.emitter.emit(funcs, reference)


class CorruptKernel(KernelFunction):
    def __init__(self, inner):
        self.inner, self.signature = inner, inner.signature

    def __call__(self, *args):
        self.inner(*args)
        args[-1][...] += np.asarray(0.5, dtype=args[-1].dtype)


class CorruptModule(LoadedModule):
    def __init__(self, inner):
        self.inner, self.artifact = inner, inner.artifact

    def get_function(self, name):
        function = self.inner.get_function(name)
        return CorruptKernel(function) if "relu" in name else function


class CorruptingLoader(RuntimeLoader):
    def load(self, artifact, target):
        reference = tk.target("cpu_llvm")
        return CorruptModule(reference.spec.loader.load(artifact, reference))


@hookimpl
def tensorkiln_targets():
    return [TargetSpec(manifest=load_manifest(__file__), emitter=WrappingEmitter(), loader=CorruptingLoader())]
'''


@pytest.fixture
def broken_target(tmp_path):
    write_plugin(tmp_path, "kiln_broken_plugin", "kiln_broken", manifest=_MANIFEST, plugin_code=_PLUGIN)
    sys.path.insert(0, str(tmp_path))
    reload_plugins()
    try:
        yield "kiln_broken"
    finally:
        sys.path.remove(str(tmp_path))
        reload_plugins()


def test_bisect_names_the_first_corrupted_op(broken_target):
    mod, _ = residual_cnn()
    result = bisect(mod, broken_target)
    first = result.first_divergence
    assert first is not None and first.ops == ("nn.relu",) and first.index == 2
    assert first.max_abs_error == pytest.approx(0.5, abs=1e-3)
    assert all(not s.diverges for s in result.steps[:first.index])
    assert result.to_json()["first_divergence"]["ops"] == ("nn.relu",)


def test_bisect_finds_nothing_on_a_correct_target():
    mod, _ = mlp()
    result = bisect(mod, "cpu_llvm -opt_level=1")
    assert result.first_divergence is None and len(result.steps) >= 5


def test_run_capturing_returns_every_step_output():
    mod, inputs = mlp()
    lib = tk.compile(mod, target="cpu_llvm", opt_level=0)
    steps = run_capturing(lib.executor, inputs)
    assert [s.step.ops for s in steps][:3] == [("nn.dense",), ("nn.bias_add",), ("nn.relu",)]
    np.testing.assert_allclose(steps[-1].outputs[0], tk.graph.evaluate(mod, inputs), rtol=1e-5, atol=1e-6)


def test_debug_bisect_command_on_an_onnx_model(tmp_path, broken_target, capsys):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "x"], ["a"]), helper.make_node("Relu", ["a"], ["r"]),
         helper.make_node("Mul", ["r", "x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4])])
    path = tmp_path / "model.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    from tensorkiln.cli import main

    code = main(["debug", "bisect", str(path), "--target", broken_target, "--shape", "x=2,4"])
    out = capsys.readouterr().out
    assert code == 3
    assert "first divergence" in out and "op nn.relu" in out
