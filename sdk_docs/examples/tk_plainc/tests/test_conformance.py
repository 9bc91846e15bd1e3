"""Runs the tensorkiln conformance kit on plainc: `pytest tests/` after `pip install .`."""
import tensorkiln as tk
from tensorkiln.conformance import run_conformance


def test_target_is_installed():
    assert "plainc" in tk.targets()


def test_conformance_manifest_and_runtime_levels_pass():
    report = run_conformance("plainc", levels=("manifest", "runtime"))
    assert report.exit_code == 0, [(r.id, r.message) for r in report.blocking]
