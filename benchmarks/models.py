"""benchmarks/models.py: latency of onnx light models on tensorkiln and onnxruntime, batch 1.

    python benchmarks/models.py [--models resnet50,squeezenet,densenet121] [--threads N]
                                [--repeat 20] [--targets cpu_llvm[,opencl]]

For each model (onnx/backend/test/data/light/light_<name>.onnx, input arange(n)/n like
the onnx runner) prints one row per configuration:
  - tensorkiln cpu_llvm at opt level 0 (one kernel per op, no memory reuse) and at the
    highest opt level (3), with `-num_threads=N` and tk.runtime.set_num_threads(N);
  - onnxruntime (CPUExecutionProvider, all graph optimisations, intra_op_num_threads=N,
    inter_op_num_threads=1, sequential execution);
  - with --targets ...,opencl: tensorkiln opencl (PoCL on a CPU host) at the highest level.
Columns: median latency over `repeat` runs (after 2 warm-up runs), its ratio to onnxruntime,
compile seconds, kernels / ops, planned peak activation memory vs one buffer per value
(no reuse), and max abs error vs onnxruntime. Each opencl row also gives its ratio to cpu_llvm
at the same opt level. Numbers on a shared or 2-core machine are noisy: read ratios, not ms.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
import onnx
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.ir.errors import TensorkilnError

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MAX_OPT_LEVEL = 3
DEFAULT_MODELS = ("resnet50", "squeezenet", "densenet121")


def light_model(name: str):
    path = os.path.join(LIGHT, f"light_{name}.onnx")
    model = onnx.load(path)
    mod = tk.frontend.from_onnx(model)
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
    return model, mod, param.name, data, expected


def median_ms(run, repeat: int) -> float:
    for _ in range(2):
        run()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def bench_onnxruntime(model, input_name: str, data, threads: int, repeat: int) -> dict:
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    start = time.perf_counter()
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    compile_s = time.perf_counter() - start
    feed = {session.get_inputs()[0].name: data}
    output = session.run(None, feed)[0]
    return {"ms": median_ms(lambda: session.run(None, feed), repeat), "compile_s": compile_s, "output": output}


def bench_tensorkiln(mod, input_name: str, data, target: str, opt_level: int, threads: int, repeat: int) -> dict:
    target_text = f"{target} -num_threads={threads}" if target == "cpu_llvm" else target
    lib = tk.compile(mod, target=target_text, opt_level=opt_level)
    summary = lib.summary()
    lib.set_input(input_name, data)
    lib.run()
    output = lib.get_output(0)
    return {"ms": median_ms(lib.run, repeat), "compile_s": summary["compile_seconds"], "output": output,
            "kernels": summary["kernel_launches"], "ops": summary["ops"],
            "peak_mb": summary["peak_activation_bytes"] / 1e6,
            "unplanned_mb": summary["unplanned_activation_bytes"] / 1e6}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated light model names (resnet50, squeezenet, densenet121, vgg19, ...)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="threads for both tensorkiln and onnxruntime (default: all cores)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per configuration (median)")
    parser.add_argument("--targets", default="cpu_llvm", help="cpu_llvm, optionally followed by opencl")
    parser.add_argument("--opt-levels", default=f"0,{MAX_OPT_LEVEL}", help="tensorkiln opt levels for cpu_llvm")
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    opt_levels = [int(level) for level in args.opt_levels.split(",")]
    if "cpu_llvm" not in targets:
        targets.insert(0, "cpu_llvm")
    tk.runtime.set_num_threads(args.threads)

    import onnxruntime as ort
    print(f"tensorkiln {tk.__version__}, onnxruntime {ort.__version__}, numpy {np.__version__}; "
          f"{os.cpu_count()} cores, {args.threads} threads; median of {args.repeat} runs, batch 1")
    header = (f"{'model':12s} {'config':24s} {'ms':>9s} {'/ort':>6s} {'/llvm':>6s} {'compile s':>9s} "
              f"{'kernels/ops':>11s} {'act MB':>7s} {'no-reuse MB':>11s} {'max|err|':>9s}")
    print(header)
    print("-" * len(header))
    worst = 0.0

    def row(name: str, config: str, r: dict, ref: dict) -> None:
        error = float(np.max(np.abs(r["output"] - ref["output"])))
        kernels = f"{r['kernels']}/{r['ops']}" if "kernels" in r else "-"
        peak = f"{r['peak_mb']:7.2f}" if "peak_mb" in r else f"{'-':>7s}"
        unplanned = f"{r['unplanned_mb']:11.2f}" if "unplanned_mb" in r else f"{'-':>11s}"
        vs_llvm = f"{r['vs_llvm']:6.2f}" if "vs_llvm" in r else f"{'-':>6s}"
        print(f"{name:12s} {config:24s} {r['ms']:9.2f} {r['ms'] / ref['ms']:6.2f} {vs_llvm} "
              f"{r['compile_s']:9.2f} {kernels:>11s} {peak} {unplanned} {error:9.2e}", flush=True)

    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        model, mod, input_name, data, expected = light_model(name)
        ref = bench_onnxruntime(model, input_name, data, args.threads, args.repeat)
        row(name, "onnxruntime", ref, ref)
        llvm_ms: dict[int, float] = {}
        for target in targets:
            levels = opt_levels if target == "cpu_llvm" else [MAX_OPT_LEVEL]
            for level in levels:
                try:
                    result = bench_tensorkiln(mod, input_name, data, target, level, args.threads, args.repeat)
                except TensorkilnError as error:
                    print(f"{name:12s} {target} opt {level}: {type(error).__name__}: {str(error).splitlines()[0]}")
                    continue
                if target == "cpu_llvm":
                    llvm_ms[level] = result["ms"]
                elif level in llvm_ms:
                    result["vs_llvm"] = result["ms"] / llvm_ms[level]
                worst = max(worst, float(np.max(np.abs(result["output"] - expected))))
                row(name, f"tk {target} opt {level}", result, ref)
    print(f"largest tensorkiln error vs the stored outputs: {worst:.2e}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
