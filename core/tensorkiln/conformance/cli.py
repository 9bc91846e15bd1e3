"""conformance/cli.py: the `conformance`, `debug bisect` and `new-plugin` subcommands.

`tensorkiln.cli` calls `add_subcommands(commands)`; parsing lives here, the work
in the library (`run_conformance`, `bisect`, `scaffold_plugin`).
"""
from __future__ import annotations

import argparse
import sys

from .catalogue import LEVELS

__all__ = ["add_subcommands"]


def _levels(values: list[str] | None) -> tuple[str, ...]:
    if not values:
        return LEVELS
    levels = [level.strip() for value in values for level in value.split(",") if level.strip()]
    unknown = [level for level in levels if level not in LEVELS]
    if unknown:
        raise SystemExit(f"error: unknown level(s) {', '.join(unknown)}; levels are {', '.join(LEVELS)}")
    return tuple(level for level in LEVELS if level in levels)


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number; give a share between 0 and 1, e.g. 0.9") from None
    if not 0.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"{text} is not between 0 and 1; e.g. 0.9 requires 90% of ops on the target")
    return value


def _console():
    from rich.console import Console
    return Console(width=None if sys.stdout.isatty() else 160)


def _cmd_conformance(args) -> int:
    from .catalogue import KitOptions
    from .expected import write_expected
    from .runner import run_conformance

    options = KitOptions(shapes_per_op=args.shapes_per_op, dtypes=tuple(args.dtype) if args.dtype else None,
                         ops=tuple(args.op) if args.op else None, seed=args.seed,
                         min_target_share=args.min_target_share)
    console = _console()

    def progress(result) -> None:
        if args.verbose:
            from rich.markup import escape
            console.print(escape(f"{result.outcome:8} {result.id} "
                                 f"{result.summary_line if result.outcome != 'passed' else ''}"))

    expected = None if args.update_expected else (args.expected or "auto")
    report = run_conformance(args.target, _levels(args.level), options, expected=expected, on_result=progress)
    report.print_summary(console, show_skipped=args.show_skipped)
    if args.report:
        report.write_json(args.report)
        console.print(f"wrote {args.report}")
    if args.junit:
        report.write_junit(args.junit)
        console.print(f"wrote {args.junit}")
    if args.update_expected:
        path = write_expected(report, args.expected)
        console.print(f"wrote {path} ({sum(1 for r in report.results if r.outcome == 'failed')} expected failures)")
        return 0
    return report.exit_code


def _cmd_bisect(args) -> int:
    from ..cli_common import parse_shapes
    from .bisect import bisect

    result = bisect(args.model, args.target, reference=args.reference, shape=parse_shapes(args.shape),
                    seed=args.seed)
    result.print(_console())
    return 0 if result.first_divergence is None else 3


def _cmd_new_plugin(args) -> int:
    from .scaffold import scaffold_plugin

    directory = scaffold_plugin(args.name, args.dir)
    print(f"wrote plugin distribution {directory}\n"
          f"  pip install --no-deps --no-build-isolation {directory}\n"
          f"  tensorkiln conformance {args.name}")
    return 0


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    """Register `conformance`, `debug bisect` and `new-plugin` on the `tensorkiln` parser."""
    conformance = commands.add_parser("conformance", help="run the conformance kit on an installed target",
                                      description="Validate a target plugin: manifest, runtime, te, intrinsics, "
                                                  "ops, models. Exit code 1 when a required check fails.")
    conformance.add_argument("target", help="target name or string, e.g. 'opencl'")
    conformance.add_argument("--level", action="append", metavar="LEVEL",
                             help=f"levels to run (repeat or comma-separate): {', '.join(LEVELS)}; default all")
    conformance.add_argument("--report", metavar="FILE.json", help="write the JSON report")
    conformance.add_argument("--junit", metavar="FILE.xml", help="write JUnit XML")
    conformance.add_argument("--update-expected", action="store_true",
                             help="regenerate the plugin's conformance_expected.json from this run's failures")
    conformance.add_argument("--expected", metavar="FILE.json",
                             help="expected-failure file (default: conformance_expected.json beside the manifest)")
    conformance.add_argument("--shapes-per-op", type=int, default=3, metavar="N", help="shape variants per op (1-3)")
    conformance.add_argument("--dtype", action="append", help="only these dtypes in the ops level (repeatable)")
    conformance.add_argument("--op", action="append", help="only these ops in the ops level (repeatable)")
    conformance.add_argument("--seed", type=int, default=0)
    conformance.add_argument("--min-target-share", type=_share, default=0.0, metavar="FRACTION",
                             help="models level: fail a model when less than this share of its ops (0-1, e.g. 0.9) "
                                  "runs on the target rather than a fallback; default 0 (report only)")
    conformance.add_argument("--show-skipped", action="store_true", help="list skipped checks and why")
    conformance.add_argument("-v", "--verbose", action="store_true", help="print each check as it finishes")
    conformance.set_defaults(run=_cmd_conformance)

    debug = commands.add_parser("debug", help="debugging tools (bisect)")
    debug_commands = debug.add_subparsers(dest="debug_command", metavar="TOOL")
    bisect = debug_commands.add_parser("bisect", help="find the first op whose results differ from the reference",
                                       description="Compile MODEL for --target and for the reference at opt level "
                                                   "0, run both on the same random inputs and name the first op "
                                                   "whose outputs diverge beyond tolerance. Each op also runs on the "
                                                   "reference's inputs, so every op that is wrong itself shows, "
                                                   "not only the first; a step that raises is named with its error. "
                                                   "Exit code 3 when an op diverges.")
    bisect.add_argument("model", help="path to an .onnx file")
    bisect.add_argument("--target", required=True, help="target string to check")
    bisect.add_argument("--reference", default="cpu_llvm", help="reference target (default cpu_llvm)")
    bisect.add_argument("--shape", action="append", help="bind an input shape: NAME=1,3,224,224")
    bisect.add_argument("--seed", type=int, default=0)
    bisect.set_defaults(run=_cmd_bisect)
    debug.set_defaults(run=lambda args: (debug.print_help(), 2)[1])

    new_plugin = commands.add_parser("new-plugin", help="scaffold a target plugin distribution",
                                     description="Write a plain-C target plugin (pyproject, manifest, emitter, "
                                                 "ctypes loader, tests) that passes the kit's manifest and runtime "
                                                 "levels once installed.")
    new_plugin.add_argument("name", help="target name, lower_snake_case (e.g. my_npu)")
    new_plugin.add_argument("--dir", help="output directory (default: ./tensorkiln-NAME, '_' as '-': ./tensorkiln-my-npu)")
    new_plugin.set_defaults(run=_cmd_new_plugin)
