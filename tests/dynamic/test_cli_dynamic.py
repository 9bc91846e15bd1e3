"""`tensorkiln compile --shape x=?:1..2x3x8x8`: a model with a symbolic batch is packaged per shape (the
bounds' ends by default, or --specialize); each package runs like any other and matches onnxruntime."""
from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import tensorkiln as tk
from tensorkiln.cli import main
from tensorkiln.runtime.package import load

from test_dynamic_shapes import _mlp

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")


def test_compile_with_symbolic_batch_writes_one_package_per_bound(tmp_path, capsys):
    model = _mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, path)
    assert main(["compile", str(path), "--shape", "x=?:1..2x3x8x8"]) == 0
    out = capsys.readouterr().out
    assert "dynamic model: x: float32(batch[1..2], 3, 8, 8)" in out
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for batch in (1, 2):
        lib = load(tmp_path / f"mlp.{batch}x3x8x8.tkpkg")
        x = np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)
        np.testing.assert_allclose(lib(x), session.run(None, {"x": x})[0], rtol=1e-4, atol=1e-5)


def test_specialize_outside_the_bounds_is_an_error(tmp_path, capsys):
    path = tmp_path / "mlp.onnx"
    onnx.save(_mlp(), path)
    assert main(["compile", str(path), "--shape", "x=?:1..2x3x8x8", "--specialize", "x=3x3x8x8"]) == 1
    assert "dimension 0 ('batch') is 3, outside its bounds 1..2" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="must look like lo..hi"):
        main(["compile", str(path), "--shape", "x=?:1.2x3x8x8"])
