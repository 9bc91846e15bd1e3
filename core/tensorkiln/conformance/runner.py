"""conformance/runner.py: run the catalogue for one target and collect a Report.

    report = run_conformance("opencl", levels=("manifest", "runtime"))
    report.exit_code      # 1 when a required check failed unexpectedly
    report.write_json("report.json"); report.write_junit("out.xml")

Outcomes: "passed", "failed", "skipped", "xfailed" (failed and listed in the
plugin's expected-failure file), "xpassed" (listed there but passed). Failed
checks carry their kind: compile, run, numeric (with max abs / rel error),
contract or coverage. A check's facts (a model's share of ops on the target)
are kept whether it passed or failed.
"""
from __future__ import annotations

import time
import traceback
from typing import Any, Callable, Iterable

from .catalogue import LEVELS, Check, CheckFailure, KitOptions, catalogue
from .expected import ExpectedFailures, load_expected
from .report import CheckResult, Report

__all__ = ["run_check", "run_conformance", "resolve_target"]


def resolve_target(target: Any):
    """A Target from a name/target string or a Target."""
    import tensorkiln as tk
    return tk.target(target)


def run_check(check: Check, target: Any, expected: ExpectedFailures | None = None) -> CheckResult:
    """Run one check; never raises (an exception from the check is a result)."""
    reason = expected.reason(check.id) if expected is not None else None
    if check.is_skipped:
        return CheckResult(check.id, check.level, check.required, "skipped", check.description,
                           skip_reason=check.skip_reason)
    start = time.perf_counter()
    failure: CheckFailure | None = None
    facts = None
    try:
        facts = check.run(target)
    except CheckFailure as error:
        failure = error
    except Exception as error:  # an exception outside a stage: the target broke a contract
        failure = CheckFailure("contract", f"{type(error).__name__}: {error}")
        failure.__cause__ = error
    seconds = time.perf_counter() - start
    if failure is None:
        outcome = "xpassed" if reason is not None else "passed"
        return CheckResult(check.id, check.level, check.required, outcome, check.description, seconds=seconds,
                           expected_reason=reason or "", facts=dict(facts) if isinstance(facts, dict) else {})
    detail = ""
    if failure.__cause__ is not None:
        detail = "".join(traceback.format_exception(failure.__cause__))[-4000:]
    return CheckResult(check.id, check.level, check.required, "xfailed" if reason is not None else "failed",
                       check.description, kind=failure.kind, message=failure.message, seconds=seconds,
                       max_abs_error=failure.max_abs_error, max_rel_error=failure.max_rel_error, detail=detail,
                       expected_reason=reason or "", facts=dict(failure.facts or {}))


def _unavailable(checks: list[Check], target: Any) -> list[Check]:
    reason = target.manifest.plugin.unavailable_reason or "the plugin provides no emitter or loader"
    return [c if c.level == "manifest" else Check(c.id, c.level, c.required, c.description,
                                                   skip_reason=f"target not available: {reason}")
            for c in checks]


def run_conformance(target: Any, levels: Iterable[str] = LEVELS, options: KitOptions | None = None,
                    expected: ExpectedFailures | str | None = "auto",
                    on_result: Callable[[CheckResult], None] | None = None) -> Report:
    """Run the checks of `levels` for `target`; `expected` is "auto" (the plugin's file), a path, or None."""
    from .plugin_info import describe_device

    target = resolve_target(target)
    options = options or KitOptions()
    levels = tuple(levels)
    if expected == "auto":
        expected = load_expected(target)
    elif isinstance(expected, str):
        expected = ExpectedFailures.read(expected)
    checks = catalogue(target, levels, options)
    if not target.spec.is_available:
        checks = _unavailable(checks, target)
    results = []
    start = time.perf_counter()
    for check in checks:
        result = run_check(check, target, expected)
        results.append(result)
        if on_result is not None:
            on_result(result)
    return Report.create(target, levels, options, results, describe_device(target),
                         seconds=time.perf_counter() - start, expected=expected)
