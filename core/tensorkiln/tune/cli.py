"""tune/cli.py: `tensorkiln tune`, registered by tensorkiln/cli.py.

    tensorkiln tune model.onnx --target cpu_llvm --trials 400 --db tuning.sqlite [--strategy evolutionary]
                    [--space template|generated]
    tensorkiln tune --op gemm --shape 1024,1024,1024 --trials 128
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

__all__ = ["add_subcommands"]

STRATEGIES = ("model", "evolutionary", "optuna", "random", "grid", "anneal")
SPACE_KINDS = ("template", "generated")   # tune/task.py's; repeated here so `--help` imports nothing heavy


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    tune = commands.add_parser("tune", help="auto-tune a model's or an operator's kernels into a tuning database",
                               description="Search the knob values the target's strategies declare, measuring "
                                           "candidates on the device; records go to a SQLite database that "
                                           "tk.compile(..., tuning_db=...) applies.")
    tune.add_argument("model", nargs="?", help="path to an .onnx file (or use --op)")
    tune.add_argument("--op", help="tune one operator instead: gemm, matmul, dense, conv2d")
    tune.add_argument("--shape", help="the operator's dimensions, e.g. 1024,1024,1024 (M,N,K)")
    tune.add_argument("--input-shape", action="append", metavar="NAME=1,3,224,224", help="bind a model input shape")
    tune.add_argument("--target", default="cpu_llvm", help="target string, e.g. 'cpu_llvm -num_threads=2'")
    tune.add_argument("--trials", type=int, default=64, help="measurements in all (each task's default included)")
    tune.add_argument("--db", default="tuning.sqlite", help="SQLite tuning database (created when missing)")
    tune.add_argument("--strategy", default="model", choices=STRATEGIES)
    tune.add_argument("--space", default="template", choices=SPACE_KINDS,
                      help="template: the knobs the target's strategy declares (AutoTVM-style); generated: a sketch "
                           "derived from each group's compute, multi-level tiling with inline/fusion decisions "
                           "(Ansor-style)")
    tune.add_argument("--scheduler", metavar="ADDRESS", help="a Dask scheduler (tcp://host:8786): build and measure there")
    tune.add_argument("--budget", type=float, metavar="SECONDS", help="start no new batch after this many seconds")
    tune.add_argument("--batch", type=int, default=8, help="candidates per batch")
    tune.add_argument("--seed", type=int, default=0)
    tune.add_argument("--curve", metavar="FILE.png", help="tuning-curve plot (default: DB's name + '.png')")
    tune.add_argument("--export", metavar="FILE.jsonl", help="also write every record as JSON lines")
    tune.set_defaults(run=_cmd_tune)


def _tasks(args):
    from ..cli_common import parse_shapes
    from ..ir.errors import TensorkilnError
    from .task import Task, extract_tasks

    if args.op:
        if args.model:
            raise TensorkilnError("give a model file or --op, not both")
        if not args.shape:
            raise TensorkilnError(f"--op {args.op} needs --shape, e.g. --shape 1024,1024,1024")
        try:
            shape = [int(d) for d in args.shape.split(",")]
        except ValueError:
            raise TensorkilnError(f"--shape {args.shape!r}: comma-separated integers, e.g. 1024,1024,1024") from None
        return [Task.from_op(args.op, shape, args.target, space=args.space)]
    if not args.model:
        raise TensorkilnError("nothing to tune: give a model file (tensorkiln tune model.onnx) or --op NAME --shape DIMS")
    if not Path(args.model).is_file():
        raise TensorkilnError(f"model file {args.model} does not exist")
    shapes = parse_shapes(args.input_shape) if args.input_shape else None
    return extract_tasks(str(Path(args.model).resolve()), args.target, shape=shapes, space=args.space)


def _cmd_tune(args) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from . import session
    from .apply import open_database
    from .plot import plot_curves

    console = Console(width=None if sys.stdout.isatty() else 160)
    tasks = _tasks(args)
    if not tasks:
        console.print("nothing to tune: no group of this model has an implementation with knobs on this target")
        return 0
    db = open_database(args.db)
    measurer = None
    if args.scheduler:
        from .distributed import DaskMeasurer
        measurer = DaskMeasurer(args.scheduler)
    console.print(f"{len(tasks)} task(s), {sum(t.space.size for t in tasks)} configs in all; {args.trials} trials, "
                  f"strategy {args.strategy}, database {args.db}")
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=False) as progress:
        overall = progress.add_task("trials", total=args.trials)
        rows = {}

        def on_batch(state, result):
            key = id(state)
            best, default = state.best, state.default
            text = f"{state.task.name[:44]:44s} x{state.task.weight}"
            if best is not None and default is not None and default.valid:
                text += f"  best {best.cost * 1e3:8.3f} ms ({default.cost / best.cost:4.2f}x default)"
            if key not in rows:
                rows[key] = progress.add_task(text, total=None)
            progress.update(rows[key], description=text, completed=len(state.results))
            progress.update(overall, completed=sum(len(s.results) for s in result.states))

        result = session.tune(tasks, trials=args.trials, strategy=args.strategy, db=db, measurer=measurer,
                              batch=args.batch, seed=args.seed, time_budget=args.budget, on_batch=on_batch)
    table = Table(title=f"tuning summary ({result.seconds:.0f} s)")
    for column in ("task", "weight", "implementation", "space", "trials", "failed", "default ms", "best ms",
                   "speedup", "best config"):
        table.add_column(column)
    for row in result.summary():
        def ms(value):
            return f"{value:.3f}" if value is not None else "-"
        table.add_row(row["task"], str(row["weight"]), row["implementation"], str(row["space"]), str(row["trials"]),
                      str(row["failed"]), ms(row["default_ms"]), ms(row["best_ms"]),
                      f"{row['speedup']:.2f}x" if row["speedup"] else (row["skipped"] or "-"),
                      str(row["best_config"]))
    console.print(table)
    curve = args.curve or str(Path(args.db).with_suffix(".png")) if args.db != ":memory:" else args.curve
    if curve:
        plot_curves(result, curve)
        console.print(f"tuning curve: {curve}")
    if args.export:
        console.print(f"{db.export_jsonl(args.export)} records written to {args.export}")
    console.print(f"{len(db)} records in {args.db}; compile with tk.compile(..., tuning_db=tune.Database({args.db!r}))")
    return 0
