"""The conformance kit as pytest items: one per check of the catalogue (see pytest_plugin.py)."""
from __future__ import annotations

import pytest


def test_check(conformance_check, conformance_target, record_property):
    from tensorkiln.conformance.runner import run_check

    result = run_check(conformance_check, conformance_target)
    for name, value in result.facts.items():   # e.g. a model's target_share, in JUnit <properties>
        record_property(name, value)
    if result.outcome == "failed":
        message = f"[{result.kind}] {result.message}"
        if result.max_abs_error is not None:
            message += f"\nmax abs error {result.max_abs_error:.3g}, max rel error {result.max_rel_error:.3g}"
        if not result.required:
            pytest.xfail(f"optional check failed: {message}")
        pytest.fail(message + ("\n\n" + result.detail if result.detail else ""), pytrace=False)
