"""benchmarks/onnx_coverage.py: its onnxruntime backend passes node tests through tensorkiln's harness, and
the report lists every case tensorkiln does not pass with onnxruntime's status and a reason."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "onnx_coverage.py"


@pytest.fixture(scope="module")
def coverage():
    spec = importlib.util.spec_from_file_location("onnx_coverage", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _row(name, status, float32=True, detail=""):
    return dict(name=name, status=status, float32=float32, detail=detail)


def test_report_lists_each_missing_case_with_its_reason_and_onnxruntime_status(coverage):
    pytest.importorskip("onnxruntime")
    ours = {"test_a": _row("test_a", "pass"), "test_b": _row("test_b", "fail", detail="output 0: values differ"),
            "test_image_decoder_decode_png_rgb": _row("test_image_decoder_decode_png_rgb", "unsupported", False,
                                                      "UnsupportedOpError: ImageDecoder")}
    theirs = {"test_a": _row("test_a", "pass"), "test_b": _row("test_b", "pass"),
              "test_image_decoder_decode_png_rgb": _row("test_image_decoder_decode_png_rgb", "fail", False)}
    ops = {"test_a": "Add", "test_b": "Sub", "test_image_decoder_decode_png_rgb": "ImageDecoder"}
    text = coverage.report(ours, theirs, ops, "cpu_llvm")
    assert "| all | 1 / 3 (33.3%) | 2 / 3 (66.7%) |" in text
    assert "| float32 only | 1 / 2 (50.0%) | 2 / 2 (100.0%) |" in text
    assert "| Sub | test_b | output 0: values differ |" in text   # onnxruntime passes it, tensorkiln does not
    assert "| test_b | Sub | fail | pass | output 0: values differ |" in text
    assert "| test_image_decoder_decode_png_rgb | ImageDecoder | unsupported | no | ImageDecoder decodes" in text
    assert "test_a |" not in text


@pytest.mark.slow   # collecting onnx's node test cases takes several seconds
def test_onnxruntime_backend_runs_through_the_node_test_harness(coverage):
    pytest.importorskip("onnxruntime")
    from tensorkiln.node_tests import run_node_tests
    results = run_node_tests(backend=coverage.OnnxruntimeBackend, protocol="standard",
                             name_filter=lambda name: name in ("test_abs", "test_mod_mixed_sign_int64"))
    assert [(r.name, r.status) for r in results] == [("test_abs", "pass"), ("test_mod_mixed_sign_int64", "pass")]
    assert coverage.OnnxruntimeBackend.op_types["test_abs"] == "Abs"
