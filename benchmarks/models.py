"""benchmarks/models.py: latency of real models on tensorkiln cpu_llvm against onnxruntime, in one run.

    python benchmarks/models.py                        # all nine light models + six real-world graphs
    python benchmarks/models.py --models resnet50,tcn --threads 1,2 --isa native,avx2 --repeat 20
    python benchmarks/models.py --models light --opt-levels 0,3 --out /tmp/bench

Models: the onnx light model zoo (onnx/backend/test/data/light/light_<name>.onnx, input
arange(n)/n like the onnx runner) and the small real-world graphs of benchmarks/real_graphs.py
(transformer encoder, GPT decoder block, depthwise-separable CNN, dilated TCN, UNet, shape ops).

Each model is compiled once per ISA column and opt level; each thread count is set at run time
(`tk.runtime.set_num_threads`) and onnxruntime gets a session with the same intra-op thread count
(sequential execution, all graph optimisations, no spinning between runs: ort_baseline.py says why;
without it the 2-thread column measured onnxruntime's idle threads taking tensorkiln's cores). Timed runs alternate tensorkiln and onnxruntime,
and the ratio is the median of the per-round ratios, so a load change on this shared machine hits
both sides. Columns:

    native   cpu_llvm for the host CPU
    avx2     cpu_llvm with -mcpu=haswell (AVX2 + FMA, 16 vector registers): what a user without
             AVX-512 gets, against what onnxruntime gives that user. On an AVX-512 host this column
             runs in a child process that imports a copy of onnxruntime held to its AVX2 kernels
             (ort_isa.py says how) and has OPENBLAS_CORETYPE=Haswell; --ort-isa native keeps
             onnxruntime's AVX-512 kernels instead (pessimistic for tensorkiln). The environment
             line says which onnxruntime each column measured.

Per model and configuration: median ms of both, the ratio, compile seconds, kernel launches,
the time outside kernels per launch (1 thread; kernel times from tk.runtime.profiler) of the Python
executor ("outside") and of the native entry that runs the whole plan in one call ("native", the
default where the plan has one, so "tk ms" is measured with it), and the max abs difference from
onnxruntime's output. At the end: geometric means per column over the light
models and over the real-world graphs; a markdown table (models.md) and a bar chart of the ratios
(models.png) under --out.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.ir.errors import TensorkilnError

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import real_graphs  # noqa: E402
from ort_baseline import ort_session  # noqa: E402,F401  (executor_overhead.py imports it from here)
import ort_isa  # noqa: E402

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
LIGHT_MODELS = ("resnet50", "squeezenet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
                "bvlc_alexnet", "zfnet512", "vgg19")
ISA_OPTIONS = {"native": "", "avx2": " -mcpu=haswell"}


@dataclass
class Result:
    model: str
    kind: str                  # "light" or "graph"
    column: str                # e.g. "native 1t" or "avx2 opt0 2t"
    tk_ms: float
    ort_ms: float
    ratio: float
    compile_s: float
    launches: int
    outside_us: float | None   # executor time outside kernels per launch (1 thread only)
    error: float
    native_us: float | None = None   # the same with the native entry (one call per run), 1 thread only


@dataclass
class Suite:
    results: list[Result] = field(default_factory=list)

    def columns(self) -> list[str]:
        return list(dict.fromkeys(r.column for r in self.results))

    def geomean(self, column: str, kind: str) -> float | None:
        ratios = [r.ratio for r in self.results if r.column == column and r.kind == kind]
        return math.exp(statistics.fmean(math.log(x) for x in ratios)) if ratios else None


def light_model(name: str):
    model = onnx.load(os.path.join(LIGHT, f"light_{name}.onnx"))
    (graph_input,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in graph_input.type.tensor_type.shape.dim]
    size = int(np.prod(shape))
    data = (np.arange(size).reshape(shape) / size).astype(np.float32)
    return model, {graph_input.name: data}


def models_to_run(spec: str) -> list[tuple[str, str]]:
    """[(name, kind)] from 'all', 'light', 'graphs' or a comma-separated list of names."""
    chosen = []
    for item in [s.strip() for s in spec.split(",") if s.strip()]:
        if item in ("all", "light"):
            chosen += [(m, "light") for m in LIGHT_MODELS]
        if item in ("all", "graphs"):
            chosen += [(m, "graph") for m in real_graphs.NAMES]
        if item in LIGHT_MODELS:
            chosen.append((item, "light"))
        elif item in real_graphs.NAMES:
            chosen.append((item, "graph"))
        elif item not in ("all", "light", "graphs"):
            raise SystemExit(f"unknown model {item!r}: light models {', '.join(LIGHT_MODELS)}; "
                             f"graphs {', '.join(real_graphs.NAMES)}")
    return list(dict.fromkeys(chosen))


def interleaved(run_tk, run_ort, repeat: int) -> tuple[float, float, float]:
    """(tk median s, ort median s, median of per-round tk/ort) over `repeat` alternating rounds."""
    for _ in range(2):
        run_tk()
        run_ort()
    tk_times, ort_times, ratios = [], [], []
    for _ in range(repeat):
        start = time.perf_counter()
        run_ort()
        middle = time.perf_counter()
        run_tk()
        end = time.perf_counter()
        ort_times.append(middle - start)
        tk_times.append(end - middle)
        ratios.append((end - middle) / (middle - start))
    return statistics.median(tk_times), statistics.median(ort_times), statistics.median(ratios)


def run_tensorkiln(lib, inputs):
    """One run through set_input / run / get_output (the API every version has, so this script
    also measures older checkouts for before/after tables)."""
    for name, value in inputs.items():
        lib.set_input(name, value)
    lib.run()
    return lib.get_output(0)


def outside_kernels_us(lib, inputs, repeat: int) -> tuple[float | None, float | None]:
    """Time outside kernel calls per launch, in microseconds, of the Python executor and of the native
    entry: (median run - sum of the profiler's step medians) / launches, with Python and native runs
    in interleaved blocks so that a load change hits both. None on a checkout older than the profiler
    (both) or the native entry (the second), or when the model has no native entry."""
    try:
        from tensorkiln.runtime.profiler import profile
    except ImportError:
        return None, None
    report = profile(lib, inputs, repeat=repeat)
    kernel_seconds = sum(step.seconds for step in report.steps)
    launches = max(1, len(report.steps))
    python_us = 1e6 * max(0.0, report.run_seconds - kernel_seconds) / launches
    executor = lib.executor
    if getattr(executor, "native_entry", None) is None:
        return python_us, None
    python, native = [], []
    for _ in range(max(5, repeat)):
        start = time.perf_counter()
        executor.run_with(inputs, native=False)
        middle = time.perf_counter()
        executor.run_with(inputs)
        native.append(time.perf_counter() - middle)
        python.append(middle - start)
    python_us = 1e6 * max(0.0, statistics.median(python) - kernel_seconds) / launches
    native_us = 1e6 * max(0.0, statistics.median(native) - kernel_seconds) / launches
    return python_us, native_us


def bench_model(name: str, kind: str, args, suite: Suite) -> None:
    if kind == "light":
        model, inputs = light_model(name)
    else:
        _, model, inputs = real_graphs.build(name)
    sessions = {threads: ort_session(model, threads) for threads in args.threads}
    reference = sessions[args.threads[0]].run(None, inputs)[0]
    for isa in args.isa:
        for level in args.opt_levels:
            target = f"cpu_llvm{ISA_OPTIONS[isa]}"
            start = time.perf_counter()
            try:
                lib = tk.compile(model, target=target, opt_level=level)
            except TensorkilnError as error:
                print(f"{name:20s} {isa} opt {level}: {type(error).__name__}: {str(error).splitlines()[0]}")
                continue
            compile_s = time.perf_counter() - start
            output = run_tensorkiln(lib, inputs)
            error = float(np.max(np.abs(np.asarray(output, dtype=np.float64) - reference)))
            launches = lib.summary()["kernel_launches"]
            for threads in args.threads:
                tk.runtime.set_num_threads(threads)
                session = sessions[threads]
                tk_s, ort_s, ratio = interleaved(lambda: run_tensorkiln(lib, inputs),
                                                 lambda: session.run(None, inputs),
                                                 args.repeat)
                outside, native = outside_kernels_us(lib, inputs, max(5, args.repeat // 2)) if threads == 1 \
                    else (None, None)
                level_text = "" if args.opt_levels == [3] else f" opt{level}"
                result = Result(name, kind, f"{isa}{level_text} {threads}t", 1e3 * tk_s, 1e3 * ort_s, ratio,
                                compile_s, launches, outside, error, native)
                suite.results.append(result)
                print_row(result)


HEADER = (f"{'model':20s} {'column':14s} {'tk ms':>9s} {'ort ms':>9s} {'tk/ort':>7s} {'compile s':>9s} "
          f"{'launches':>8s} {'outside us/launch':>17s} {'native us/launch':>16s} {'max|err|':>9s}")


def print_row(r: Result) -> None:
    outside = f"{r.outside_us:17.1f}" if r.outside_us is not None else f"{'-':>17s}"
    native = f"{r.native_us:16.1f}" if r.native_us is not None else f"{'-':>16s}"
    print(f"{r.model:20s} {r.column:14s} {r.tk_ms:9.2f} {r.ort_ms:9.2f} {r.ratio:7.2f} {r.compile_s:9.2f} "
          f"{r.launches:8d} {outside} {native} {r.error:9.2e}", flush=True)


def environment_line(args) -> str:
    import onnxruntime as ort
    blas = ""
    try:
        from threadpoolctl import threadpool_info
        blas = ", ".join(f"{i.get('internal_api')} {i.get('architecture', '')}".strip() for i in threadpool_info()
                         if i.get("user_api") == "blas")
    except ImportError:
        pass
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    held = ort_isa.held_sites(os.path.dirname(ort.__file__))
    ort_isa_text = f"held to AVX2: {held}" if held else "native ISA"
    return (f"tensorkiln {tk.__version__}, onnxruntime {ort.__version__} ({ort_isa_text}), "
            f"numpy {np.__version__} ({blas}); "
            f"{os.cpu_count()} cores, load {load:.1f}; host CPU {tk.target('cpu_llvm').capabilities.vector_width_bits}-bit "
            f"vectors; median of {args.repeat} alternating runs, batch 1")


def markdown(suite: Suite, env: str) -> str:
    columns = suite.columns()
    lines = [f"# tensorkiln cpu_llvm vs onnxruntime (latency ratio, lower is better)", "", env, "",
             "| model | " + " | ".join(columns) + " |", "|---|" + "---:|" * len(columns)]
    models = list(dict.fromkeys((r.model, r.kind) for r in suite.results))
    for model, _ in models:
        cells = []
        for column in columns:
            match = [r for r in suite.results if r.model == model and r.column == column]
            cells.append(f"{match[0].ratio:.2f} ({match[0].tk_ms:.2f} / {match[0].ort_ms:.2f} ms)" if match else "-")
        lines.append(f"| {model} | " + " | ".join(cells) + " |")
    for kind, label in (("light", "geomean, light models"), ("graph", "geomean, real-world graphs")):
        means = [suite.geomean(c, kind) for c in columns]
        if any(m is not None for m in means):
            lines.append(f"| **{label}** | " + " | ".join(f"**{m:.2f}**" if m else "-" for m in means) + " |")
    overheads = [r for r in suite.results if r.outside_us is not None]
    if overheads:
        lines += ["", "Time outside kernels per launch, 1 thread (us): Python executor vs native entry", "",
                  "| model | column | launches | python | native |", "|---|---|---:|---:|---:|"]
        for r in overheads:
            native = f"{r.native_us:.1f}" if r.native_us is not None else "-"
            lines.append(f"| {r.model} | {r.column} | {r.launches} | {r.outside_us:.1f} | {native} |")
    return "\n".join(lines) + "\n"


def bar_chart(suite: Suite, path: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    columns = suite.columns()
    models = list(dict.fromkeys(r.model for r in suite.results))
    width = 0.8 / max(1, len(columns))
    figure, axes = plt.subplots(figsize=(max(8, 0.9 * len(models) * max(1, len(columns)) / 2), 4.5))
    for k, column in enumerate(columns):
        ratios = [next((r.ratio for r in suite.results if r.model == m and r.column == column), 0.0) for m in models]
        axes.bar(np.arange(len(models)) + k * width, ratios, width, label=column)
    axes.axhline(1.0, color="black", linewidth=0.8)
    axes.set_xticks(np.arange(len(models)) + width * (len(columns) - 1) / 2, models, rotation=40, ha="right")
    axes.set_ylabel("tensorkiln / onnxruntime latency")
    axes.set_title("cpu_llvm vs onnxruntime, same run (lower is better)")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    plt.close(figure)


def held_avx2_child_wanted(args) -> bool:
    """Whether the avx2 column runs in a child with onnxruntime held to AVX2 (AVX-512 host, not asked
    otherwise, and not already that child)."""
    return ("avx2" in args.isa and args.ort_isa == "held" and not args.results_json
            and ort_isa.host_has_avx512())


def held_onnxruntime_root() -> tuple[str | None, str]:
    """(folder of the onnxruntime copy held to AVX2, "") or, when this build cannot be held, (None, why)."""
    try:
        return ort_isa.avx2_onnxruntime(), ""
    except RuntimeError as error:
        print(f"avx2 column against onnxruntime's native kernels: {error}")
        return None, f"avx2 column against onnxruntime's native kernels: {error}"


def run_avx2_child(argv: list[str] | None, suite: Suite, held_root: str) -> str:
    """Run the avx2 column in a child process whose onnxruntime is the copy at `held_root` (held to
    AVX2) and whose OpenBLAS uses its Haswell kernels; add its rows to `suite` and return its
    environment line."""
    argv = list(sys.argv[1:] if argv is None else argv)
    with tempfile.TemporaryDirectory() as scratch:
        results = os.path.join(scratch, "avx2.json")
        env = dict(os.environ, OPENBLAS_CORETYPE="Haswell",
                   PYTHONPATH=os.pathsep.join(p for p in (held_root, os.environ.get("PYTHONPATH")) if p))
        env.pop("OPENBLAS_L2_SIZE", None)
        command = [sys.executable, os.path.abspath(__file__), *argv, "--isa", "avx2", "--no-plot",
                   "--out", scratch, "--results-json", results]
        subprocess.run(command, env=env, check=True)
        with open(results) as handle:
            child = json.load(handle)
    suite.results += [Result(**row) for row in child["results"]]
    return "avx2 column (child process): " + child["env"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="all", help="all, light, graphs, or comma-separated names")
    parser.add_argument("--threads", default="1,2", help="comma-separated thread counts (default 1,2)")
    parser.add_argument("--isa", default="native,avx2", help="columns: native and/or avx2 (-mcpu=haswell)")
    parser.add_argument("--opt-levels", default="3", help="tensorkiln opt levels (default 3)")
    parser.add_argument("--repeat", type=int, default=15, help="alternating timed rounds per configuration")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "results"),
                        help="folder for models.md and models.png")
    parser.add_argument("--no-plot", action="store_true", help="skip the PNG")
    parser.add_argument("--ort-isa", choices=("held", "native"), default="held",
                        help="onnxruntime in the avx2 column on an AVX-512 host: held to its AVX2 kernels "
                             "(default; a child process, see ort_isa.py) or its native AVX-512 kernels")
    parser.add_argument("--results-json", help=argparse.SUPPRESS)   # the avx2 child writes its rows here
    args = parser.parse_args(argv)
    args.threads = [int(t) for t in args.threads.split(",")]
    args.isa = [i.strip() for i in args.isa.split(",") if i.strip()]
    args.opt_levels = [int(level) for level in args.opt_levels.split(",")]
    unknown = [i for i in args.isa if i not in ISA_OPTIONS]
    if unknown:
        raise SystemExit(f"unknown --isa {unknown}: choose from {', '.join(ISA_OPTIONS)}")

    env = environment_line(args)
    print(env)
    print(HEADER)
    print("-" * len(HEADER))
    suite = Suite()
    start = time.perf_counter()
    held_root, why_not = held_onnxruntime_root() if held_avx2_child_wanted(args) else (None, "")
    if why_not:   # measured here, against onnxruntime's own kernels, and said so
        env += "\n\n" + why_not
    in_process = dict(vars(args), isa=[i for i in args.isa if not (i == "avx2" and held_root)])
    for name, kind in models_to_run(args.models):
        bench_model(name, kind, argparse.Namespace(**in_process), suite)
    if held_root:
        env += "\n\n" + run_avx2_child(argv, suite, held_root)
    if args.results_json:
        with open(args.results_json, "w") as handle:
            json.dump({"env": env, "results": [dataclasses.asdict(r) for r in suite.results]}, handle)
        return 0
    print()
    for column in suite.columns():
        for kind, label in (("light", "light models"), ("graph", "real-world graphs")):
            mean = suite.geomean(column, kind)
            if mean is not None:
                print(f"geomean tk/ort {column:14s} {label:18s} {mean:.2f}")
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "models.md"), "w") as handle:
        handle.write(markdown(suite, env))
    if not args.no_plot and suite.results:
        bar_chart(suite, os.path.join(args.out, "models.png"))
    print(f"wrote {args.out}/models.md{'' if args.no_plot else ' and models.png'} "
          f"({time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
