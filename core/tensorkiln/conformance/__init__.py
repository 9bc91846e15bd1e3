"""The conformance kit: validates any installed target plugin, in-tree or third-party.

    from tensorkiln.conformance import run_conformance
    report = run_conformance("opencl", levels=("manifest", "runtime"))
    report.print_summary(); report.write_json("report.json"); report.exit_code

Levels (`LEVELS`): manifest, runtime, te, intrinsics, ops, models. The catalogue
of checks for a target depends on what it claims (`catalogue(target)`); skipped
checks carry the reason. The same checks run as pytest items:

    pytest --pyargs tensorkiln.conformance --tk-target opencl [--tk-level manifest,runtime]

and from the command line: `tensorkiln conformance opencl --report r.json --junit r.xml`.
"""
from .catalogue import FAILURE_KINDS, LEVELS, Check, CheckFailure, KitOptions, catalogue, stage
from .compare import assert_close
from .expected import EXPECTED_FILE, ExpectedFailures, load_expected, write_expected
from .report import CheckResult, Report
from .runner import run_check, run_conformance

__all__ = [
    "LEVELS", "FAILURE_KINDS", "Check", "CheckFailure", "KitOptions", "catalogue", "stage", "assert_close",
    "EXPECTED_FILE", "ExpectedFailures", "load_expected", "write_expected", "CheckResult", "Report",
    "run_check", "run_conformance",
]
