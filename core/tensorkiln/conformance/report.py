"""conformance/report.py: one run's results as JSON, JUnit XML and a rich terminal table.

The JSON is keyed by what identifies the run: core version, plugin version and
distribution, manifest hash, target string and device description. Failures are
separated by kind (compile, run, numeric with max abs/rel error, contract,
coverage). A check's facts (each model's share of ops on the target) appear in
its JSON entry and, for the models level, in a table of the terminal summary.

Messages are summarised by `CheckResult.summary_line`: the first line, followed
by the lines it introduces when it ends with a colon, so the reason of an
unsupported op (`argmax (dtype_unsupported:int64) at ...`) is not cut off.
"""
from __future__ import annotations

import json
import math
import platform
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from .catalogue import FAILURE_KINDS, LEVELS

__all__ = ["CheckResult", "Report", "REPORT_SCHEMA_VERSION"]

REPORT_SCHEMA_VERSION = 1
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed")
_SUMMARY_LINES = 3      # lines after a first line ending in ':' that summary_line shows
_SUMMARY_CHARS = 400


@dataclass
class CheckResult:
    id: str
    level: str
    required: bool
    outcome: str                    # one of OUTCOMES
    description: str = ""
    kind: str = ""                  # failure kind (FAILURE_KINDS) when failed / xfailed
    message: str = ""
    skip_reason: str = ""
    seconds: float = 0.0
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    detail: str = ""                # traceback of the underlying exception, when there was one
    expected_reason: str = ""
    facts: dict = field(default_factory=dict)   # what the check measured (models: share of ops on the target)

    @property
    def first_line(self) -> str:
        text = self.message or self.skip_reason
        return (text.strip().splitlines() or [""])[0]

    @property
    def summary_line(self) -> str:
        """One line for tables: the first line of the message, followed by the lines it introduces
        when it ends with ':' ("... refuses to fall back: argmax (dtype_unsupported:int64) at ..."),
        at most _SUMMARY_CHARS long."""
        lines = [line.strip() for line in (self.message or self.skip_reason).strip().splitlines() if line.strip()]
        if not lines:
            return ""
        text = lines[0]
        if text.endswith(":") and len(lines) > 1:
            shown = lines[1:1 + _SUMMARY_LINES]
            more = len(lines) - 1 - len(shown)
            text = f"{text} {'; '.join(shown)}{f'; ... ({more} more lines)' if more else ''}"
        return text if len(text) <= _SUMMARY_CHARS else text[:_SUMMARY_CHARS - 3] + "..."

    @property
    def is_blocking(self) -> bool:
        """A required check that failed and was not expected to."""
        return self.outcome == "failed" and self.required


@dataclass
class Report:
    core_version: str
    sdk_api: str
    target: str
    plugin: dict
    device: str
    levels: tuple[str, ...]
    options: dict
    results: list[CheckResult]
    seconds: float = 0.0
    expected_file: str = ""
    host: dict = field(default_factory=dict)

    @classmethod
    def create(cls, target: Any, levels, options, results, device: str, seconds: float = 0.0, expected=None) -> "Report":
        from .. import SDK_API_VERSION, __version__

        plugin = {"name": target.name, "distribution": target.spec.distribution,
                  "version": target.manifest.plugin.version, "manifest_hash": target.spec.manifest_hash,
                  "device_kind": target.manifest.plugin.device_kind}
        host = {"machine": platform.machine(), "system": platform.system(), "python": platform.python_version()}
        return cls(__version__, SDK_API_VERSION, str(target), plugin, device, tuple(levels), asdict(options),
                   list(results), seconds, getattr(expected, "path", "") or "", host)

    # -- queries ------------------------------------------------------------------------------

    def by_outcome(self, outcome: str) -> list[CheckResult]:
        return [r for r in self.results if r.outcome == outcome]

    @property
    def blocking(self) -> list[CheckResult]:
        return [r for r in self.results if r.is_blocking]

    @property
    def exit_code(self) -> int:
        return 1 if self.blocking else 0

    def counts(self, level: str | None = None) -> dict[str, int]:
        rows = [r for r in self.results if level is None or r.level == level]
        counts = {outcome: sum(1 for r in rows if r.outcome == outcome) for outcome in OUTCOMES}
        counts["failed_required"] = sum(1 for r in rows if r.is_blocking)
        return counts

    # -- JSON -----------------------------------------------------------------------------------

    def to_json(self) -> dict:
        failures: dict[str, list] = {kind: [] for kind in FAILURE_KINDS}
        for r in self.results:
            if r.outcome in ("failed", "xfailed"):
                entry = {"id": r.id, "required": r.required, "expected": r.outcome == "xfailed",
                         "message": r.summary_line}
                if r.kind == "numeric":
                    entry.update(max_abs_error=_json_number(r.max_abs_error),
                                 max_rel_error=_json_number(r.max_rel_error))
                failures.setdefault(r.kind or "contract", []).append(entry)
        return {
            "schema_version": REPORT_SCHEMA_VERSION,
            "key": {"core_version": self.core_version, "plugin_version": self.plugin["version"],
                    "manifest_hash": self.plugin["manifest_hash"], "target": self.target, "device": self.device},
            "core_version": self.core_version, "sdk_api": self.sdk_api, "target": self.target, "plugin": self.plugin,
            "device": self.device, "host": self.host, "levels": list(self.levels), "options": self.options,
            "seconds": round(self.seconds, 3), "expected_file": self.expected_file,
            "summary": {"total": self.counts(), **{level: self.counts(level) for level in self.levels}},
            "passed": self.exit_code == 0,
            "failures": failures,
            "unexpected_passes": [r.id for r in self.by_outcome("xpassed")],
            "checks": [_result_json(r) for r in self.results],
        }

    def write_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_json(), indent=2) + "\n")

    # -- JUnit XML -------------------------------------------------------------------------------

    def to_junit(self) -> ET.Element:
        suites = ET.Element("testsuites", name=f"tensorkiln conformance {self.target}")
        for level in self.levels:
            rows = [r for r in self.results if r.level == level]
            counts = self.counts(level)
            suite = ET.SubElement(suites, "testsuite", name=f"{self.plugin['name']}.{level}", tests=str(len(rows)),
                                  failures=str(counts["failed"]), skipped=str(counts["skipped"] + counts["xfailed"]),
                                  errors="0", time=f"{sum(r.seconds for r in rows):.3f}")
            for r in rows:
                case = ET.SubElement(suite, "testcase", classname=f"conformance.{self.plugin['name']}.{level}",
                                     name=r.id, time=f"{r.seconds:.3f}")
                if r.outcome == "failed":
                    failure = ET.SubElement(case, "failure", type=r.kind, message=r.summary_line)
                    failure.text = r.message + ("\n\n" + r.detail if r.detail else "")
                elif r.outcome == "skipped":
                    ET.SubElement(case, "skipped", message=r.skip_reason)
                elif r.outcome == "xfailed":
                    ET.SubElement(case, "skipped", message=f"expected failure ({r.kind}): {r.summary_line}")
                elif r.outcome == "xpassed":
                    ET.SubElement(case, "system-out").text = "unexpected pass: listed as an expected failure"
        return suites

    def write_junit(self, path: str | Path) -> None:
        tree = ET.ElementTree(self.to_junit())
        ET.indent(tree)
        tree.write(path, encoding="unicode", xml_declaration=True)

    # -- terminal ------------------------------------------------------------------------------

    def _print_target_shares(self, console) -> None:
        """The models level's share of ops on the target, per model (from each check's facts)."""
        from rich.markup import escape
        from rich.table import Table

        rows = [r for r in self.results if r.level == "models" and "target_share" in r.facts]
        if not rows:
            return
        table = Table(title=f"models: share of ops on {self.plugin['name']}")
        for column in ("model", "ops on target", "share", "fell back"):
            table.add_column(column, overflow="fold")
        for r in rows:
            facts = r.facts
            fell_back = ", ".join(f"{op} on {where}" for op, where in facts.get("fallbacks", {}).items()) or "-"
            table.add_row(escape(r.id.split("/", 1)[1]), f"{facts['ops_on_target']} of {facts['ops']}",
                          f"{facts['target_share']:.0%}", escape(fell_back))
        console.print(table)

    def print_summary(self, console=None, show_skipped: bool = False) -> None:
        from rich.console import Console
        from rich.markup import escape
        from rich.table import Table

        console = console or Console()
        console.print(f"tensorkiln {self.core_version} conformance: [bold]{escape(self.target)}[/bold] "
                      f"({self.plugin['distribution']} {self.plugin['version']}, manifest "
                      f"{self.plugin['manifest_hash'][:12]}) on {escape(self.device)}")
        table = Table(title="results by level")
        for column in ("level", "passed", "failed (required)", "failed (optional)", "expected failures",
                       "unexpected passes", "skipped"):
            table.add_column(column, justify="right" if column != "level" else "left")
        for level in (*self.levels, None):
            c = self.counts(level)
            table.add_row(level or "[bold]total[/bold]", str(c["passed"]), _red(c["failed_required"]),
                          str(c["failed"] - c["failed_required"]), str(c["xfailed"]), _yellow(c["xpassed"]),
                          str(c["skipped"]))
        console.print(table)
        failed = [r for r in self.results if r.outcome in ("failed", "xpassed")]
        if failed:
            problems = Table(title="failing checks (and unexpected passes)")
            for column in ("check", "required", "kind", "error"):
                problems.add_column(column, overflow="fold")
            for r in failed:
                kind = r.kind if r.outcome == "failed" else "unexpected pass"
                # escape: messages quote manifest tables ("[[intrinsics]]"), which rich would read as markup
                problems.add_row(escape(r.id), "yes" if r.required else "no", kind,
                                 escape(r.summary_line) if r.outcome == "failed"
                                 else "listed in " + escape(self.expected_file or "?"))
            console.print(problems)
        self._print_target_shares(console)
        if show_skipped:
            skipped = Table(title="skipped checks")
            skipped.add_column("check")
            skipped.add_column("reason", overflow="fold")
            for r in self.by_outcome("skipped"):
                skipped.add_row(escape(r.id), escape(r.skip_reason))
            console.print(skipped)
        verdict = "[green]PASSED[/green]" if self.exit_code == 0 else \
            f"[red]FAILED[/red]: {len(self.blocking)} required check(s) failed"
        console.print(f"{verdict} in {self.seconds:.1f} s")


def _json_number(value: float | None) -> float | str | None:
    """A float for JSON: inf and nan, which strict JSON lacks, become the strings "inf" / "nan"."""
    if value is None or math.isfinite(value):
        return value
    return str(value)


def _result_json(r: CheckResult) -> dict:
    data = {"id": r.id, "level": r.level, "required": r.required, "outcome": r.outcome,
            "seconds": round(r.seconds, 4)}
    if r.kind:
        data["kind"] = r.kind
    if r.message:
        data["message"] = r.message
    if r.skip_reason:
        data["skip_reason"] = r.skip_reason
    if r.max_abs_error is not None:
        data["max_abs_error"] = _json_number(r.max_abs_error)
        data["max_rel_error"] = _json_number(r.max_rel_error)
    if r.expected_reason:
        data["expected_reason"] = r.expected_reason
    if r.facts:
        data["facts"] = r.facts
    return data


def _red(count: int) -> str:
    return f"[red]{count}[/red]" if count else "0"


def _yellow(count: int) -> str:
    return f"[yellow]{count}[/yellow]" if count else "0"
