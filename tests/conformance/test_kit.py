"""The kit's runner, report, expected failures, CLI, docs and pytest plugin, on the in-tree targets."""
from __future__ import annotations

import json
import subprocess
import sys
from xml.etree import ElementTree as ET

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.conformance import (LEVELS, Check, CheckFailure, ExpectedFailures, KitOptions, catalogue,
                                    run_check, run_conformance)
from tensorkiln.conformance.docs import stale_files
from tensorkiln.conformance.op_cases import missing_cases
from tensorkiln.conformance.report import CheckResult, Report

from .dists import REPO

QUICK = KitOptions(shapes_per_op=1, dtypes=("float32",))


def test_every_registered_op_has_a_case():
    assert missing_cases() == []


def test_catalogue_follows_the_targets_claims():
    cpu = {c.id: c for c in catalogue(tk.target("cpu_llvm"), LEVELS, QUICK)}
    assert cpu["te/bind"].skip_reason == "the target does not claim 'bind'"
    assert not cpu["te/parallel"].is_skipped
    assert any(i.startswith("intrinsics/sgemm_ukernel/") for i in cpu)
    assert cpu["te/tensorize"].skip_reason.startswith("tensorize is checked per intrinsic")
    opencl = {c.id: c for c in catalogue(tk.target("opencl"), ("te", "intrinsics"), QUICK)}
    assert opencl["te/parallel"].skip_reason == "the target does not claim 'parallel'"
    assert "te/cache_read/shared" in opencl


def test_unknown_level_is_refused():
    with pytest.raises(ValueError, match=r"unknown conformance level\(s\) \['kernels'\]"):
        catalogue(tk.target("cpu_llvm"), ("kernels",))


def test_failures_are_classified_and_expected_failures_do_not_block():
    target = tk.target("cpu_llvm")

    def numeric(_):
        raise CheckFailure("numeric", "off by one", max_abs_error=1.0, max_rel_error=0.5)

    def crash(_):
        raise KeyError("boom")

    checks = [Check("x/numeric", "ops", True, "", numeric), Check("x/crash", "ops", False, "", crash),
              Check("x/ok", "ops", True, "", lambda _: None), Check("x/skip", "ops", True, "", skip_reason="why")]
    expected = ExpectedFailures({"x/ok": "listed"})
    results = [run_check(c, target, expected) for c in checks]
    assert [r.outcome for r in results] == ["failed", "failed", "xpassed", "skipped"]
    assert results[0].kind == "numeric" and results[0].max_abs_error == 1.0
    assert results[1].kind == "contract" and "KeyError" in results[1].message and not results[1].is_blocking
    report = Report.create(target, ("ops",), QUICK, results, "test device")
    assert report.exit_code == 1 and [r.id for r in report.blocking] == ["x/numeric"]
    data = report.to_json()
    assert data["key"]["manifest_hash"] == target.spec.manifest_hash and data["key"]["core_version"] == tk.__version__
    assert data["failures"]["numeric"][0] == {"id": "x/numeric", "required": True, "expected": False,
                                              "message": "off by one", "max_abs_error": 1.0, "max_rel_error": 0.5}
    assert data["unexpected_passes"] == ["x/ok"]
    junit = ET.fromstring(ET.tostring(report.to_junit()))
    assert junit.find(".//testcase[@name='x/numeric']/failure").get("type") == "numeric"


def test_cli_runs_levels_and_writes_reports(tmp_path, capsys):
    from tensorkiln.cli import main

    code = main(["conformance", "cpu_llvm", "--level", "manifest,runtime", "--report", str(tmp_path / "r.json"),
                 "--junit", str(tmp_path / "r.xml")])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "results by level" in out and "PASSED" in out
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["levels"] == ["manifest", "runtime"] and report["passed"]
    assert report["plugin"]["distribution"] == "tensorkiln-cpu-llvm"
    assert ET.parse(tmp_path / "r.xml").getroot().tag == "testsuites"


# opencl's whole kit (2.5 min on PoCL, the suite's slowest case) is slow: in CI its levels are covered
# elsewhere, per check (plugins/opencl/tests/test_opencl_conformance.py: manifest, runtime, te,
# intrinsics), per op on OpenCL (tests/ops/test_gpu_schedules.py) and per model
# (plugins/opencl/tests/test_opencl_models.py); cpu_llvm runs the kit itself end to end.
@pytest.mark.parametrize("target", ["cpu_llvm", pytest.param("opencl", marks=pytest.mark.slow)])
def test_in_tree_target_passes_every_required_check(target):
    """The whole kit with one shape per op at float32 and int32 (the CLI default runs 3 shapes, all dtypes),
    requiring every op of the models on the target."""
    report = run_conformance(target, LEVELS, KitOptions(shapes_per_op=1, dtypes=("float32", "int32"),
                                                        min_target_share=1.0))
    assert report.exit_code == 0, [(r.id, r.kind, r.summary_line) for r in report.blocking]
    assert report.counts()["passed"] > 100
    shares = {r.id: r.facts["target_share"] for r in report.results if r.level == "models" and r.facts.get("ops")}
    assert shares == {"models/mlp": 1.0, "models/residual_cnn": 1.0, "models/attention": 1.0}


def test_summary_line_keeps_the_lines_a_message_introduces():
    def result(message):
        return CheckResult("ops/argmax/float32/0", "ops", True, "failed", kind="compile", message=message)

    unsupported = ("UnsupportedOpError: target acme cannot run 1 op(s) and strict mode refuses to fall back:\n"
                   "  argmax (dtype_unsupported:int64) at %0 = argmax(%x)")
    assert result(unsupported).summary_line == (
        "UnsupportedOpError: target acme cannot run 1 op(s) and strict mode refuses to fall back: "
        "argmax (dtype_unsupported:int64) at %0 = argmax(%x)")
    assert result(unsupported).first_line.endswith("fall back:")
    assert result("off by one\nsecond line").summary_line == "off by one"
    many = result("failed:\n" + "\n".join(f"line {i}" for i in range(6))).summary_line
    assert many == "failed: line 0; line 1; line 2; ... (3 more lines)"
    assert len(result("x" * 1000).summary_line) == 400

    # messages quote manifest tables; the terminal summary must not read them as rich markup
    from rich.console import Console

    console = Console(record=True, width=200)
    Report.create(tk.target("cpu_llvm"), ("ops",), QUICK, [result("make [[intrinsics]] tile list the extents")],
                  "test device").print_summary(console)
    assert "make [[intrinsics]] tile list the extents" in console.export_text()


def test_errors_stay_finite_and_quiet_where_the_reference_is_zero():
    import warnings

    from tensorkiln.conformance.compare import errors

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert errors(np.array([0.5, 1.5, 3.0]), np.array([0.0, 1.0, 3.0])) == (0.5, 0.5)
        assert errors(np.array([0.5, 1.0]), np.array([0.0, 1.0])) == (0.5, float("inf"))   # only where 0 is expected
        assert errors(np.array([np.nan, np.inf]), np.array([np.nan, np.inf])) == (0.0, 0.0)
        assert errors(np.array([np.nan, 1.0]), np.array([2.0, 1.0])) == (float("inf"), float("inf"))
        assert errors(np.array([1e308]), np.array([-1e308])) == (float("inf"), float("inf"))


def test_claimed_dtypes_an_op_case_does_not_cover_are_listed_as_skipped():
    checks = {c.id: c for c in catalogue(tk.target("opencl"), ("ops",), KitOptions(shapes_per_op=1, ops=("nn.relu",)))}
    assert checks["ops/nn.relu/int32"].skip_reason == (
        "the kit's case for nn.relu covers float dtypes only; int32 is claimed but not checked (extend its entry "
        "in tensorkiln/conformance/op_cases.py if the op accepts it)")
    assert not checks["ops/nn.relu/float32/0"].is_skipped


def test_generated_docs_are_up_to_date():
    assert stale_files(REPO / "sdk_docs") == [], "run `python -m tensorkiln.conformance.docs`"


def test_pytest_plugin_runs_the_checks_as_items(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--pyargs",
         "tensorkiln.conformance", "--tk-target", "cpu_llvm", "--tk-level", "manifest", "--tk-min-target-share", "0.9",
         "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout and "failed" not in result.stdout
