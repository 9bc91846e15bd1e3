"""benchmarks/ort_isa.py: the copy of onnxruntime held to its AVX2 kernels (the AVX2 column of
benchmarks/models.py) loads, says it is held, and computes what the installed onnxruntime computes."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ort_isa  # noqa: E402

ort = pytest.importorskip("onnxruntime")


def _model() -> bytes:
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((32, 16, 3, 3)).astype(np.float32), "w")
    matrix = numpy_helper.from_array(rng.standard_normal((32 * 12 * 12, 40)).astype(np.float32), "m")
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]),
             helper.make_node("MatMul", ["f", "m"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 12, 12])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 40])], [weight, matrix])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


CHILD = """
import json, sys
import numpy as np, onnxruntime
sys.path.insert(0, sys.argv[1])
import ort_isa
session = onnxruntime.InferenceSession(open(sys.argv[2], "rb").read(), providers=["CPUExecutionProvider"])
x = np.load(sys.argv[3])
print(json.dumps({"file": onnxruntime.__file__, "held": ort_isa.held_sites(onnxruntime.__file__.rsplit("/", 1)[0]),
                  "y": session.run(None, {"x": x})[0].tolist()}))
"""


def _fake_package(folder: Path, payload: bytes) -> Path:
    package = folder / "onnxruntime"
    (package / "capi").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "capi" / "onnxruntime_pybind11_state.cpython-311-x86_64-linux-gnu.so").write_bytes(payload)
    return package


def test_each_xcr0_probe_is_rewritten_in_a_copy_and_the_original_is_left_alone(tmp_path):
    payload = b"\x90" * 7 + ort_isa.XGETBV_SEQUENCE + b"\xc3" * 5 + ort_isa.XGETBV_SEQUENCE + b"\xcc"
    package = _fake_package(tmp_path / "site", payload)
    root = ort_isa.avx2_onnxruntime(str(tmp_path / "cache"), source=str(package), version="9.9")
    (copied,) = (Path(root) / "onnxruntime" / "capi").iterdir()
    data = copied.read_bytes()
    assert len(data) == len(payload) and ort_isa.XGETBV_SEQUENCE not in data
    assert data == payload.replace(ort_isa.XGETBV_SEQUENCE, ort_isa.XGETBV_AVX2_ONLY)
    assert ort_isa.held_sites(str(Path(root) / "onnxruntime")) == "onnxruntime 9.9: 2 XCR0 probe(s) masked to bits 0-4"
    assert ort_isa.held_sites(str(package)) is None
    assert (package / "capi" / copied.name).read_bytes() == payload   # the installed package untouched


def test_a_build_without_the_probe_sequence_is_refused_by_name(tmp_path):
    package = _fake_package(tmp_path / "site", b"\x0f\x01\xd0\x90\x90" * 4)   # xgetbv, another sequence
    with pytest.raises(RuntimeError, match=r"onnxruntime 1\.2\.3 at .*: the XCR0 probe sequence .* not found"):
        ort_isa.avx2_onnxruntime(str(tmp_path / "cache"), source=str(package), version="1.2.3")
    assert not list((tmp_path / "cache").glob("*"))   # nothing half-made left to be reused


def test_the_held_copy_computes_what_onnxruntime_computes(tmp_path):
    try:
        root = ort_isa.avx2_onnxruntime(str(tmp_path / "cache"))
    except RuntimeError as error:
        # another onnxruntime build: then the refusal must name it (models.py prints it and keeps the
        # native comparison); onnxruntime 1.32, what setup installs today, has the sequence
        assert f"onnxruntime {ort.__version__}" in str(error) and "not found" in str(error)
        return
    assert ort_isa.avx2_onnxruntime(str(tmp_path / "cache")) == root   # made once, then reused
    model, data = tmp_path / "m.onnx", tmp_path / "x.npy"
    model.write_bytes(_model())
    x = np.random.default_rng(1).standard_normal((1, 16, 12, 12)).astype(np.float32)
    np.save(data, x)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH")))))
    result = subprocess.run([sys.executable, "-c", CHILD, str(Path(ort_isa.__file__).parent), str(model), str(data)],
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    child = json.loads(result.stdout.strip().splitlines()[-1])
    assert child["file"].startswith(root), child["file"]
    assert child["held"] and "masked" in child["held"]
    expected = ort.InferenceSession(_model(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    np.testing.assert_allclose(np.array(child["y"], np.float32), expected, rtol=1e-4, atol=1e-3)

