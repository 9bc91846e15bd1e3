"""tests/runtime/test_export.py: Exported shared libraries load again with tensorkiln.runtime.load_module, without llvmlite."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import tir
from tensorkiln.ir.errors import ArtifactError, TargetError

from .kernels import buf, elementwise, loop


@pytest.fixture(scope="module")
def library(tmp_path_factory):
    n = 256
    a, b = buf("A", (n,)), buf("B", (n,))
    scale = tir.Var("scale", "float32")
    i = tir.Var("i")
    scaled = tir.PrimFunc("scaled_tanh", (a, b, scale), loop(
        i, n, tir.Store(b, tir.Call("float32", "tanh", (tir.Load(a, i),)) * scale, i), tir.ForKind.PARALLEL))
    double = elementwise("double", n, [a], b, lambda x: x + x)
    module = tk.build([scaled, double], target="llvm", name="scaled_tanh")
    path = tmp_path_factory.mktemp("export") / "kernels.so"
    module.export_library(path)
    return module, path


def test_export_writes_a_library_with_metadata(library):
    module, path = library
    loaded = tk.runtime.load_module(path)
    assert loaded.kernel_names == ["scaled_tanh", "double"]
    assert loaded.artifact.metadata["target"] == module.artifact.target
    x, out = np.linspace(-2, 2, 256).astype(np.float32), np.zeros(256, np.float32)
    loaded(x, out, 3.0)
    np.testing.assert_allclose(out, np.tanh(x) * 3, rtol=1e-6)
    loaded.get_function("double")(x, out)
    np.testing.assert_array_equal(out, x * 2)


def test_reload_in_a_process_without_llvmlite(library):
    _, path = library
    script = textwrap.dedent(f"""
        import sys, json
        sys.modules["llvmlite"] = None            # any import of llvmlite now fails
        sys.modules["tensorkiln_cpu_llvm"] = None  # nor may the plugin be imported
        import numpy as np
        import tensorkiln as tk
        from tensorkiln.ir.errors import RuntimeLaunchError
        module = tk.runtime.load_module({str(path)!r})
        x = np.linspace(-2, 2, 256).astype(np.float32)
        out = np.zeros(256, np.float32)
        tk.runtime.set_num_threads(2)
        module(x, out, 2.0)
        try:
            module(x, np.zeros(3, np.float32), 2.0)
            error = None
        except RuntimeLaunchError as caught:
            error = str(caught)
        timing = module.time_evaluator(number=2, repeat=2)(x, out, 2.0)
        print(json.dumps({{"max_error": float(np.abs(out - np.tanh(x) * 2).max()), "error": error,
                          "repeats": len(timing.results), "llvmlite": "llvmlite" in sys.modules and
                          sys.modules["llvmlite"] is not None}}))
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["max_error"] < 1e-5
    assert report["error"] == "scaled_tanh: argument 1 'B' has shape (3,), expected (256,)"
    assert report["repeats"] == 2 and report["llvmlite"] is False


def test_load_module_errors(tmp_path):
    with pytest.raises(ArtifactError, match=r"is not a shared library \(\.so\)"):
        tk.runtime.load_module(tmp_path / "model.bin")
    with pytest.raises(ArtifactError, match="cannot load native library"):
        tk.runtime.load_module(tmp_path / "missing.so")
    libm = subprocess.run(["sh", "-c", "ls /lib/x86_64-linux-gnu/libm.so.6 /usr/lib64/libm.so.6 2>/dev/null"],
                          capture_output=True, text=True).stdout.split()
    if libm:
        link = tmp_path / "libm.so"
        link.symlink_to(libm[0])
        with pytest.raises(ArtifactError, match="has no tensorkiln_metadata symbol"):
            tk.runtime.load_module(link)


def test_code_for_cpu_features_this_host_lacks_is_refused_not_run(tmp_path):
    """A kernel compiled for an instruction set the running CPU lacks raises TargetError naming it, in the JIT
    module and in its exported library, instead of stopping the process with an illegal instruction."""
    from tensorkiln.sdk.native import host_cpu_features
    lacking = next(f for f in ("avx512f", "avx512bf16", "avx512fp16", "amx-fp8", "avx10.2")
                   if f not in host_cpu_features())
    a, b = buf("A", (64,)), buf("B", (64,))
    module = tk.build([elementwise("double", 64, [a], b, lambda x: x + x)], target=f"llvm -mattr=+{lacking}",
                      name="double")
    assert lacking in module.artifact.metadata["cpu_features"]
    x, out = np.ones(64, np.float32), np.zeros(64, np.float32)
    with pytest.raises(TargetError, match=f"lacks: {lacking}.*Compile for this machine"):
        module(x, out)
    path = tmp_path / "double.so"
    module.export_library(path)
    loaded = tk.runtime.load_module(path)
    with pytest.raises(TargetError, match=f"lacks: {lacking}"):
        loaded(x, out)
    native = tk.build([elementwise("double", 64, [a], b, lambda x: x + x)], target="llvm", name="double")
    native(x, out)                      # the host's own features pass the check
    np.testing.assert_array_equal(out, x * 2)
