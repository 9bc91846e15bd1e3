"""The `tensorkiln` command: a thin layer over the public API.

Each subcommand is a function `_cmd_<name>(args) -> int`; argument parsing stays
here, the work happens in the library so everything the CLI does is scriptable.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from . import __version__, SDK_API_VERSION
from .cli_common import parse_shapes

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
            "availability_note": spec.loader.availability_note() if spec.is_available else "",
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
        elif row["availability_note"]:
            console.print(f"{row['target']}: {row['availability_note']}")
    if errors:
        problems = Table(title="plugins that failed to load or were disabled (skipped)")
        for column in ("plugin", "phase / field", "reason", "fix"):
            problems.add_column(column)
        for error in errors:
            problems.add_row(error["plugin"], error["phase"], error["reason"], error["fix"])
        console.print(problems)
    return 0


def _print_strategies(summary: dict, console) -> None:
    """Per kernel: the implementation the target's strategies chose, its knob values and what was rejected."""
    from rich.table import Table

    table = Table(title="strategies")
    for column in ("kernel", "target", "strategy", "knobs", "space", "not applicable"):
        table.add_column(column)
    for kernel, row in (summary.get("strategies") or {}).items():
        knobs = ", ".join(f"{k}={v}" for k, v in row["config"].items()) or "-"
        rejected = "; ".join(f"{name}: {reason}" for name, reason in row.get("rejected", ())) or "-"
        table.add_row(kernel, row["target"].split()[0], row["strategy"], knobs, str(row["space_size"]), rejected)
    console.print(table)


def _print_estimates(summary: dict, console) -> None:
    """Per kernel: the estimate its target's emitter attached (latency cycles, resources), if any."""
    from rich.table import Table

    estimates = summary.get("estimates") or {}
    if not estimates:
        return
    keys = list(dict.fromkeys(key for row in estimates.values() for key in row))
    table = Table(title="estimates")
    for column in ("kernel", *keys):
        table.add_column(column)
    for kernel, row in estimates.items():
        table.add_row(kernel, *(str(row.get(key, "-")) for key in keys))
    console.print(table)


def _print_summary(summary: dict, console) -> None:
    from rich.table import Table

    console.print(f"kernels: {summary['kernels']} (launches {summary['kernel_launches']}) from {summary['ops']} graph ops; "
                  f"planned activation memory {summary['peak_activation_bytes'] / 1e6:.2f} MB "
                  f"(no reuse: {summary['unplanned_activation_bytes'] / 1e6:.2f} MB); "
                  f"weights {summary['weight_bytes'] / 1e6:.2f} MB; compile {summary['compile_seconds']:.2f} s")
    skipped = summary.get("skipped_passes") or {}
    if skipped:
        console.print("skipped passes: " + "; ".join(f"{name} ({reason})" for name, reason in skipped.items()))
    table = Table(title="placement")
    for column in ("#", "kernel", "ops", "target", "fallback reason"):
        table.add_column(column)
    for index, row in enumerate(summary["placement"]):
        table.add_row(str(index), row["kernel"], ", ".join(row["ops"]), row["target"], row["fallback_reason"] or "-")
    console.print(table)


def _cmd_compile(args) -> int:
    from rich.console import Console

    from .compiler import compile as compile_model
    from .passes import PassContext, PassTimingInstrument, PrintIRInstrument

    console = Console(width=None if sys.stdout.isatty() else 180)
    timing = PassTimingInstrument()
    # only the instruments asked for: any instrument makes the compile lower every group itself
    # (it expects to see the loop passes run), where it could take them from the lowering cache
    instruments = [PrintIRInstrument(after=args.print_ir_after)] if args.print_ir_after else []
    if args.time_passes:
        instruments.append(timing)
    context = PassContext(opt_level=args.opt_level, disabled=set(args.disable_pass or ()), instruments=instruments)
    lib = compile_model(args.model, target=args.target, context=context, strict=args.strict,
                        shape=parse_shapes(args.shape))
    if getattr(lib, "signature", None) is not None:  # symbolic dimensions: one package per shape
        from .cli_dynamic import export_specializations
        return export_specializations(lib, args.model, args.output, args.specialize, console)
    _print_summary(lib.summary(), console)
    if args.explain:
        _print_strategies(lib.summary(), console)
        _print_estimates(lib.summary(), console)
    if args.time_passes:
        console.print(timing.render())
    output = args.output or str(Path(args.model).with_suffix(".tkpkg"))
    lib.export(output)
    console.print(f"wrote {output}")
    return 0


def _cmd_run(args) -> int:
    import time

    import numpy as np

    from .ir.dtypes import to_numpy
    from .runtime.package import load

    key = Path(args.key_file).read_bytes() if args.key_file else None
    lib = load(args.package, key=key)
    inputs = {}
    given = list(args.input or [])
    rng = np.random.default_rng(0)
    for index, info in enumerate(lib.input_info()):
        if index < len(given):
            name, _, path = given[index].rpartition("=")
            if not Path(path).is_file():
                raise SystemExit(f"error: input file {path!r} for input {name or info['name']!r} does not exist")
            try:
                inputs[name or info["name"]] = np.load(path, allow_pickle=False)
            except (ValueError, OSError) as error:  # not .npy, or an object array that needs pickle
                raise SystemExit(f"error: cannot read {path!r} as a numpy .npy array ({error})") from None
        elif args.random:
            inputs[info["name"]] = rng.standard_normal(info["shape"]).astype(to_numpy(info["dtype"]))
        else:
            raise SystemExit(f"error: input {info['name']!r} {info['shape']} {info['dtype']} not given; "
                             "pass --input NAME=file.npy or --random")
    outputs = lib.run(inputs)
    for name, array in inputs.items():  # the timed runs reuse inputs set once (the stateful API)
        lib.set_input(name, array)
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        lib.run()
        times.append(time.perf_counter() - start)
    for index, out in enumerate(outputs):
        print(f"output {index}: shape {tuple(out.shape)} dtype {out.dtype} mean {float(np.mean(out)):.6g}")
        if args.save:
            np.save(f"{args.save}{index}.npy", out, allow_pickle=False)
    if times:
        print(f"latency over {len(times)} runs: median {1e3 * float(np.median(times)):.3f} ms, "
              f"min {1e3 * min(times):.3f} ms")
    if args.profile:
        from .runtime.profiler import profile
        report = profile(lib, inputs, repeat=max(args.repeat, 1))
        print(report.table())
        report.write_chrome_trace(args.profile)
        print(f"wrote Chrome trace {args.profile} (chrome://tracing or ui.perfetto.dev)")
    return 0


def _cmd_viz(args) -> int:
    from .frontend import from_onnx
    from .sdk.plugin_manager import registry
    from .viz import draw, module_after

    mod = from_onnx(args.model, shape=parse_shapes(args.shape))
    target = registry().target(args.target)
    mod = module_after(mod, args.after, target=target, opt_level=args.opt_level)
    picture = draw(mod, title=f"{Path(args.model).name} after {args.after}", show_constants=args.show_constants)
    output = Path(args.output or Path(args.model).with_suffix(".svg"))
    if output.suffix == ".dot":
        output.write_text(picture.source)
    else:
        import graphviz
        try:
            picture.render(outfile=str(output), format=output.suffix.lstrip(".") or "svg", cleanup=True)
        except graphviz.ExecutableNotFound:
            raise SystemExit("error: the graphviz 'dot' program is not installed (apt install graphviz); "
                             "write a .dot file instead with -o graph.dot")
    print(f"wrote {output}")
    return 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tensorkiln", description="tensorkiln deep-learning compiler")
    parser.add_argument("--version", action="version", version=f"tensorkiln {__version__} (SDK API {SDK_API_VERSION})")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    targets = commands.add_parser("targets", help="list installed target plugins and load errors")
    targets.add_argument("--json", action="store_true", help="machine-readable output")
    targets.set_defaults(run=_cmd_targets)

    compile_cmd = commands.add_parser("compile", help="compile an ONNX model into a .tkpkg package")
    compile_cmd.add_argument("model", help="path to an .onnx file")
    compile_cmd.add_argument("--target", default="cpu_llvm", help="target string, e.g. 'llvm -num_threads=2'")
    compile_cmd.add_argument("-o", "--output", help="package path (default: MODEL.tkpkg)")
    compile_cmd.add_argument("--shape", action="append",
                             help="bind an input shape: NAME=1,3,224,224, or with symbolic dimensions and "
                                  "bounds: NAME=?x3x224x224, NAME=batch:1..64x3x224x224")
    compile_cmd.add_argument("--specialize", action="append", metavar="NAME=DIMS",
                             help="for a model with symbolic dimensions: the concrete shape to package "
                                  "(default: each symbol at its lower and upper bound)")
    compile_cmd.add_argument("--opt-level", type=int, default=2)
    compile_cmd.add_argument("--disable-pass", action="append", metavar="NAME")
    compile_cmd.add_argument("--print-ir-after", action="append", metavar="NAME", help="NAME or '*'")
    compile_cmd.add_argument("--time-passes", action="store_true")
    compile_cmd.add_argument("--explain", action="store_true",
                             help="show, per kernel, the strategy each target chose and its knob values")
    compile_cmd.add_argument("--strict", action="store_true", help="refuse to fall back to another target")
    compile_cmd.set_defaults(run=_cmd_compile)

    run_cmd = commands.add_parser("run", help="run a compiled .tkpkg package")
    run_cmd.add_argument("package")
    run_cmd.add_argument("--input", action="append", metavar="[NAME=]FILE.npy")
    run_cmd.add_argument("--random", action="store_true", help="random inputs for those not given")
    run_cmd.add_argument("--repeat", type=int, default=10, help="timed runs after the first")
    run_cmd.add_argument("--save", metavar="PREFIX", help="write outputs to PREFIX<i>.npy")
    run_cmd.add_argument("--profile", nargs="?", const="trace.json", metavar="TRACE.json",
                         help="print a per-kernel time table and write a Chrome trace (default trace.json)")
    run_cmd.add_argument("--key-file", metavar="FILE", help="the package must be signed with this key")
    run_cmd.set_defaults(run=_cmd_run)

    viz_cmd = commands.add_parser("viz", help="draw an ONNX model's graph after a compile stage (graphviz)")
    viz_cmd.add_argument("model", help="path to an .onnx file")
    viz_cmd.add_argument("--after", default="fuse",
                         help="'import', a pass name (the pipeline up to it) or 'fuse' (fused groups as clusters)")
    viz_cmd.add_argument("-o", "--output", help="picture path; the suffix picks the format (.svg, .png, .pdf, .dot)")
    viz_cmd.add_argument("--target", default="cpu_llvm", help="target whose layout preferences the passes honour")
    viz_cmd.add_argument("--opt-level", type=int, default=3)
    viz_cmd.add_argument("--shape", action="append", help="bind an input shape: NAME=1,3,224,224")
    viz_cmd.add_argument("--show-constants", action="store_true", help="draw weights and other constants too")
    viz_cmd.set_defaults(run=_cmd_viz)

    from .conformance.cli import add_subcommands as add_conformance_commands
    add_conformance_commands(commands)   # conformance, debug bisect, new-plugin (tensorkiln.conformance.cli)
    from .tune.cli import add_subcommands as add_tune_command
    add_tune_command(commands)   # tune (tensorkiln.tune.cli)
    from .quantize.cli import add_subcommands as add_quantize_command
    add_quantize_command(commands)   # quantize (tensorkiln.quantize.cli)
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
