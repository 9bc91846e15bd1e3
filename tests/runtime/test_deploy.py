"""The deploy-only runtime: an exported package runs with numpy and the standard library alone."""
from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.ir.errors import ArtifactError

MODEL = Path(__file__).resolve().parents[2] / "examples" / "models" / "small_cnn.onnx"

BLOCKED = ("llvmlite", "onnx", "onnxruntime", "pydantic", "pluggy", "tensorkiln_cpu_llvm", "tensorkiln_opencl",
           "tensorkiln.compiler", "tensorkiln.te", "tensorkiln.tir", "tensorkiln.graph", "tensorkiln.frontend")

RUNNER = textwrap.dedent('''
    import importlib.abc, sys, time
    BLOCKED = {blocked!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                raise ImportError(f"blocked for the deploy test: {{name}}")
            return None

    sys.meta_path.insert(0, Block())
    start = time.perf_counter()
    import numpy as np
    from tensorkiln.runtime import deploy
    imported = time.perf_counter() - start
    model = deploy.load({package!r})
    x = np.load({inputs!r})
    np.save({outputs!r}, model(x))
    print(f"import {{imported * 1e3:.1f}} ms")
    print(sorted(m for m in sys.modules if m.split(".")[0] in ("pydantic", "pluggy", "llvmlite", "onnx")))
''')


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    folder = tmp_path_factory.mktemp("deploy")
    lib = tk.compile(tk.frontend.from_onnx(MODEL, shape={"input": (1, 3, 32, 32)}), target="cpu_llvm")
    path = folder / "model.tkpkg"
    lib.export(path)
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return folder, path, lib, x


def test_a_package_runs_with_the_compiler_llvmlite_onnx_and_pydantic_blocked(exported):
    folder, path, lib, x = exported
    np.save(folder / "x.npy", x)
    script = RUNNER.format(blocked=BLOCKED, package=str(path), inputs=str(folder / "x.npy"),
                           outputs=str(folder / "y.npy"))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[-1] == "[]"                      # none of the blocked distributions was imported
    assert lines[-2].startswith("import ")
    np.testing.assert_allclose(np.load(folder / "y.npy"), lib(x), rtol=1e-5, atol=1e-6)


def test_deploy_load_checks_the_signature_and_threads_share_nothing(exported, tmp_path):
    _, _, lib, x = exported
    from tensorkiln.runtime import deploy
    signed = tmp_path / "signed.tkpkg"
    tk.runtime.save(lib, signed, key=b"k")
    model = deploy.load(signed, key=b"k")
    from concurrent.futures import ThreadPoolExecutor
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda _: model(x), range(16)))
    for result in results:
        np.testing.assert_allclose(result, lib(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(ArtifactError, match="no valid signature"):
        deploy.load(signed, key=b"other")


def test_an_exported_library_refuses_a_read_only_output(exported, tmp_path):
    """Kernels of a library loaded with ctypes check written buffers too (sdk/native.py)."""
    from tensorkiln import te
    a = te.placeholder((8,), name="A")
    b = te.compute((8,), lambda i: a[i] * 2.0, name="B")
    f = tk.build(te.create_schedule(b.op), [a, b], target="cpu_llvm", name="double")
    f.export_library(str(tmp_path / "double.so"))
    loaded = tk.runtime.load_module(str(tmp_path / "double.so"))
    out = np.zeros(8, np.float32)
    out.flags.writeable = False
    with pytest.raises(Exception, match="read-only|writeable|writable"):
        loaded(np.ones(8, np.float32), out)
    assert not out.any()
