"""`tensorkiln debug bisect` names the ops whose outputs diverge, on deliberately broken targets.

The broken targets are throw-away plugins whose emitter and loader wrap cpu_llvm's
(found through `tensorkiln.target("cpu_llvm").spec`, never by importing the
plugin): one whose loaded kernels for `nn.relu` add 0.5 to their output, one that
also corrupts `nn.max_pool2d` (a second, independent defect), and a device-memory
target whose loader flattens what it copies back to the host, while `nn.softmax`
falls back to the CPU.
"""
from __future__ import annotations

import math
import sys
import warnings

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

CORRUPTED = {corrupted!r}

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
        return CorruptKernel(function) if any(part in name for part in CORRUPTED) else function


class CorruptingLoader(RuntimeLoader):
    def load(self, artifact, target):
        reference = tk.target("cpu_llvm")
        return CorruptModule(reference.spec.loader.load(artifact, reference))


@hookimpl
def tensorkiln_targets():
    return [TargetSpec(manifest=load_manifest(__file__), emitter=WrappingEmitter(), loader=CorruptingLoader())]
'''


_DEVICE_PLUGIN = '''
import numpy as np
import tensorkiln as tk
from tensorkiln.sdk import Emitter, RuntimeLoader, TargetSpec, hookimpl, load_manifest


class WrappingEmitter(Emitter):
    def emit(self, funcs, target):
        reference = tk.target("cpu_llvm")
        return reference.spec.emitter.emit(funcs, reference)


class FlatteningLoader(RuntimeLoader):
    """Device memory (numpy arrays standing in for it) whose to_host loses the shape."""

    uses_host_memory = False

    def load(self, artifact, target):
        reference = tk.target("cpu_llvm")
        return reference.spec.loader.load(artifact, reference)

    def to_host(self, device_array):
        return np.array(device_array, copy=True).reshape(-1)   # the defect


@hookimpl
def tensorkiln_targets():
    return [TargetSpec(manifest=load_manifest(__file__), emitter=WrappingEmitter(), loader=FlatteningLoader())]
'''


def _installed(tmp_path, name: str, plugin_code: str, manifest: str = _MANIFEST):
    write_plugin(tmp_path, f"{name}_plugin", name, manifest=manifest.replace("kiln_broken", name),
                 plugin_code=plugin_code)
    sys.path.insert(0, str(tmp_path))
    reload_plugins()
    try:
        yield name
    finally:
        sys.path.remove(str(tmp_path))
        reload_plugins()


@pytest.fixture
def broken_target(tmp_path):
    yield from _installed(tmp_path, "kiln_broken", _PLUGIN.replace("{corrupted!r}", repr(("relu",))))


@pytest.fixture
def twice_broken_target(tmp_path):
    yield from _installed(tmp_path, "kiln_twice", _PLUGIN.replace("{corrupted!r}", repr(("relu", "max_pool"))))


@pytest.fixture
def flattening_target(tmp_path):
    manifest = _MANIFEST.replace('supported = ["*"]', 'supported = ["*"]\nunsupported = ["nn.softmax"]')
    yield from _installed(tmp_path, "kiln_flat", _DEVICE_PLUGIN, manifest)


def test_bisect_names_the_first_corrupted_op(broken_target):
    mod, _ = residual_cnn()
    result = bisect(mod, broken_target)
    first = result.first_divergence
    assert first is not None and first.ops == ("nn.relu",) and first.index == 2
    assert first.max_abs_error == pytest.approx(0.5, abs=1e-3)
    assert all(not s.diverges for s in result.steps[:first.index])
    assert result.to_json()["first_divergence"]["ops"] == ("nn.relu",)


def test_bisect_runs_each_step_on_the_reference_inputs_so_a_second_defect_shows(twice_broken_target):
    mod, _ = residual_cnn()
    result = bisect(mod, twice_broken_target)
    ops = {s.index: s.ops for s in result.steps}
    relus = [i for i, o in ops.items() if o == ("nn.relu",)]
    (pool,) = [i for i, o in ops.items() if o == ("nn.max_pool2d",)]
    assert [s.index for s in result.defects] == sorted([*relus, pool]) and pool > relus[0]
    assert result.first_divergence.index == relus[0] == 2
    # correct ops after the first defect diverge on their own inputs only
    inherited = [s for s in result.steps if s.diverges and not s.diverges_on_reference_inputs]
    assert inherited and all(s.ops[0] not in ("nn.relu", "nn.max_pool2d") for s in inherited)
    assert all(s.on_reference_inputs.max_abs_error < 1e-3 for s in inherited)
    assert result.steps[pool].on_reference_inputs.max_abs_error == pytest.approx(0.5, abs=1e-3)
    assert result.steps[pool].verdict == "diverges on its own inputs and on the reference's inputs"
    assert result.to_json()["defects"] == [s.index for s in result.defects]


def test_bisect_names_the_step_whose_loader_copy_raises(flattening_target, capsys):
    from rich.console import Console

    mod, _ = mlp()
    result = bisect(mod, flattening_target)   # no traceback: the fallback step's ValueError is recorded
    softmax = result.steps[-1]
    assert softmax.ops == ("nn.softmax",) and softmax.placed_on.startswith("cpu_llvm")
    assert softmax.diverges and softmax.note.startswith("raised ValueError: could not broadcast")
    assert not softmax.on_reference_inputs.diverges       # the CPU kernel itself is right
    device_steps = result.steps[:-1]
    assert all("shape (" in s.note for s in device_steps)  # to_host returns flat arrays
    assert result.defects == []                            # every kernel is right on the reference's inputs
    result.print(Console(width=250))
    out = capsys.readouterr().out
    assert "raised ValueError" in out and "every kernel matches on the reference's inputs" in out


def test_bisect_reports_finite_relative_errors_without_warnings(broken_target):
    mod, _ = residual_cnn()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no RuntimeWarning from dividing by tiny references
        result = bisect(mod, broken_target)
    relu = result.first_divergence
    # the relu's reference output is 0 at about half the elements: those are left out of the relative error
    assert math.isfinite(relu.max_rel_error) and 0.5 / 10 < relu.max_rel_error < 1e6


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
