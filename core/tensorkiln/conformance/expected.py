"""conformance/expected.py: a plugin's expected-failure list, `conformance_expected.json` beside its manifest.

    {"target": "opencl", "plugin_version": "0.1.0",
     "expected_failures": {"ops/nn.lrn/float32/2": "numeric: ... (why it is expected)"}}

A listed check that fails is "xfailed" and does not fail the run; a listed check
that passes is "xpassed" (regenerate the file with `--update-expected`).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["EXPECTED_FILE", "ExpectedFailures", "load_expected", "expected_path"]

EXPECTED_FILE = "conformance_expected.json"


@dataclass
class ExpectedFailures:
    failures: dict[str, str] = field(default_factory=dict)   # check id -> reason
    path: str = ""

    def reason(self, check_id: str) -> str | None:
        return self.failures.get(check_id)

    @classmethod
    def read(cls, path: str | Path) -> "ExpectedFailures":
        data = json.loads(Path(path).read_text())
        failures = data.get("expected_failures", {})
        if not isinstance(failures, dict):
            raise ValueError(f"{path}: 'expected_failures' must map check ids to reasons")
        return cls({str(k): str(v) for k, v in failures.items()}, str(path))

    def to_json(self, target: Any) -> dict:
        return {"target": target.name, "plugin_version": target.manifest.plugin.version,
                "expected_failures": dict(sorted(self.failures.items()))}


def expected_path(target: Any) -> Path | None:
    """Where the plugin's expected-failure file lives (next to its manifest), or None."""
    from .plugin_info import plugin_directory

    directory = plugin_directory(target)
    return None if directory is None else directory / EXPECTED_FILE


def load_expected(target: Any) -> ExpectedFailures | None:
    path = expected_path(target)
    if path is None or not path.is_file():
        return None
    return ExpectedFailures.read(path)


def write_expected(report: Any, path: str | Path | None = None) -> Path:
    """Write the failures of `report` as the expected-failure file (default: beside the plugin's manifest)."""
    import tensorkiln as tk

    target = tk.target(report.target)
    destination = Path(path) if path else expected_path(target)
    if destination is None:
        raise ValueError(f"cannot locate the package of {target.name!r}; pass --expected FILE")
    failures = {r.id: f"{r.kind}: {r.first_line}" for r in report.results if r.outcome in ("failed", "xfailed")}
    destination.write_text(json.dumps(ExpectedFailures(failures).to_json(target), indent=2) + "\n")
    return destination
