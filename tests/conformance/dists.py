"""Install throw-away plugin distributions for conformance tests without touching the shared environment.

`pip install --no-deps --no-build-isolation --target DIR` puts the plugin and its
.dist-info into DIR; a subprocess with DIR on PYTHONPATH discovers it through the
real entry-point path. "Uninstalling" is deleting DIR, so concurrent test runs in
the same environment never see the plugin.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def pip_install(source: Path | list[Path], site: Path) -> None:
    """Install one distribution source folder, or several in one pip call, into `site`."""
    sources = source if isinstance(source, list) else [source]
    result = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                             "--no-compile", "--disable-pip-version-check", "-q", "--target", str(site),
                             *map(str, sources)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    for folder in sources:
        shutil.rmtree(folder / "build", ignore_errors=True)
        for info in folder.glob("*.egg-info"):
            shutil.rmtree(info, ignore_errors=True)


def environment(site: Path) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def run_python(code: str, site: Path, timeout: int = 240) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=environment(site),
                          timeout=timeout)


def run_cli(args: list[str], site: Path, timeout: int = 240, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorkiln.cli", *args], capture_output=True, text=True,
                          env=environment(site), timeout=timeout, cwd=cwd)


def conformance_report(target: str, levels: str, site: Path, tmp: Path, *extra: str) -> tuple[int, dict]:
    """Run `tensorkiln conformance` in a subprocess; returns (exit code, JSON report)."""
    report = tmp / f"{target}-report.json"
    result = run_cli(["conformance", target, "--level", levels, "--report", str(report), *extra], site)
    assert report.is_file(), result.stdout + result.stderr
    return result.returncode, json.loads(report.read_text())
