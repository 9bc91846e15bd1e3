"""The `tensorkiln` command: a thin layer over the public API.

Each subcommand is a function `_cmd_<name>(args) -> int`; argument parsing stays
here, the work happens in the library so everything the CLI does is scriptable.
"""
from __future__ import annotations

import argparse
import json
import sys

from . import __version__, SDK_API_VERSION

__all__ = ["main"]


def _target_rows(reg) -> list[dict]:
    rows = []
    for name in reg.names():
        spec = reg.targets[name]
        manifest = spec.manifest
        caps = manifest.capabilities
        rows.append({
            "target": name,
            "aliases": list(manifest.plugin.aliases),
            "version": manifest.plugin.version,
            "distribution": spec.distribution,
            "device_kind": manifest.plugin.device_kind,
            "available": spec.is_available,
            "unavailable_reason": "" if spec.is_available else manifest.plugin.unavailable_reason,
            "sdk_api": manifest.plugin.sdk_api,
            "manifest_hash": spec.manifest_hash,
            "capabilities": caps.model_dump(mode="json"),
        })
    return rows


def _cmd_targets(args) -> int:
    from .sdk.plugin_manager import registry

    reg = registry()
    rows = _target_rows(reg)
    errors = [{"plugin": e.plugin, "phase": e.phase, "reason": e.reason, "fix": e.fix} for e in reg.errors]
    if args.json:
        json.dump({"core_version": __version__, "sdk_api": SDK_API_VERSION, "targets": rows, "errors": errors},
                  sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    from rich.console import Console
    from rich.table import Table

    # Wide enough for the table when piped (rich assumes 80 columns without a terminal).
    console = Console(width=None if sys.stdout.isatty() else 180)
    table = Table(title=f"tensorkiln {__version__} (SDK API {SDK_API_VERSION}): installed targets")
    for column in ("target", "aliases", "version", "device", "status", "dtypes", "vector bits", "threads", "scopes"):
        table.add_column(column)
    for row in rows:
        caps = row["capabilities"]
        threads = ("all cores" if caps["max_threads"] == 0 else str(caps["max_threads"]))
        if caps["max_threads_per_block"]:
            threads = f"{caps['max_threads_per_block']}/block"
        status = "available" if row["available"] else "not available yet (*)"
        table.add_row(row["target"], ", ".join(row["aliases"]), row["version"], row["device_kind"], status,
                      ", ".join(caps["dtypes"]), str(caps["vector_width_bits"]), threads,
                      ", ".join(caps["memory_scopes"]))
    console.print(table)
    for row in rows:
        if not row["available"]:
            console.print(f"(*) {row['target']}: {row['unavailable_reason']}")
    if errors:
        problems = Table(title="plugins that failed to load (skipped)")
        for column in ("plugin", "phase / field", "reason", "fix"):
            problems.add_column(column)
        for error in errors:
            problems.add_row(error["plugin"], error["phase"], error["reason"], error["fix"])
        console.print(problems)
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorkiln", description="tensorkiln deep-learning compiler")
    parser.add_argument("--version", action="version", version=f"tensorkiln {__version__} (SDK API {SDK_API_VERSION})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    targets = commands.add_parser("targets", help="list installed target plugins and load errors")
    targets.add_argument("--json", action="store_true", help="machine-readable output")
    targets.set_defaults(run=_cmd_targets)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    from .ir.errors import TensorkilnError

    try:
        return args.run(args)
    except TensorkilnError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
