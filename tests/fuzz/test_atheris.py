"""Runs the atheris harness (atheris_importer.py) for a bounded number of inputs in a subprocess:
a non-tensorkiln exception or a crash makes atheris exit non-zero. TK_FUZZ_CASES raises the count and
TK_FUZZ_SECONDS the time limit (30 s by default, which CI reaches before the count on a 2-core host)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import atheris  # noqa: F401  (the [test] extra installs it; a missing one fails here, loudly)

HARNESS = Path(__file__).with_name("atheris_importer.py")


def test_the_importer_survives_coverage_guided_fuzzing(tmp_path):
    runs = int(os.environ.get("TK_FUZZ_CASES", "2000"))
    seconds = int(os.environ.get("TK_FUZZ_SECONDS", "30"))
    # libFuzzer's default 2 GB RSS limit is below what the instrumented harness holds once every
    # converter and op module is imported (2.25 GB at start-up): the limit is for leaks, not the baseline
    result = subprocess.run([sys.executable, str(HARNESS), f"-runs={runs}", f"-max_total_time={seconds}", "-seed=1",
                             "-rss_limit_mb=6144", f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True,
                            encoding="utf-8", timeout=300)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "Done" in result.stderr
