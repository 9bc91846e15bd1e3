"""benchmarks/precision_latency.py: float32 vs float16 vs int8 latency on cpu_llvm, several CPUs and thread counts, one process.

    python benchmarks/precision_latency.py [--models resnet50,squeezenet] [--cpus native,haswell]
                                           [--threads 1,2] [--rounds 7] [--runs 5] [--calibration 8]

Each light model zoo model (seeded random weights: tests/quantize/_models.py) is quantized
once (minmax, symmetric, calibrated on `--calibration` seeded random inputs) and compiled for
every precision and every `-mcpu` of `--cpus` (haswell: AVX2, so the int8 GEMM runs its
vpmaddwd path; native: the host's, e.g. VNNI). The measurement is interleaved: each round
runs every (cpu, threads, precision) `--runs` times, so a change in the machine's load
touches all of them alike; the table gives the median over all runs of each and the ratio to
float32 of the same cpu and threads: of wall time, and of the process's CPU time (all its
threads; at 1 thread it is the latency without the time other processes took the core).
The load average is printed before and after: on a shared machine read the ratios.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import numpy as np

import tensorkiln as tk
from tensorkiln.passes.mixed_precision import to_mixed_precision
from tensorkiln.quantize import QuantizeConfig, quantize

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.quantize._models import light_model_with_random_weights  # noqa: E402

PRECISIONS = ("float32", "float16", "int8")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _target(cpu: str) -> str:
    return "cpu_llvm" if cpu == "native" else f"cpu_llvm -mcpu={cpu}"


def _compile_all(name: str, cpus, calibration: int):
    mod = tk.frontend.from_onnx(light_model_with_random_weights(name, seed=0))
    shape = mod.main.params[0].checked_type.shape
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal(shape).astype(np.float32) for _ in range(calibration + 1)]
    quantized = quantize(mod, samples[:calibration], QuantizeConfig(method="minmax", activations="symmetric"))
    modules = {"float32": quantized.float_module, "float16": to_mixed_precision(quantized.float_module, "float16"),
               "int8": quantized.module}
    libs = {(cpu, p): tk.compile(modules[p], _target(cpu)) for cpu in cpus for p in PRECISIONS}
    feed = samples[-1]
    reference = libs[(cpus[0], "float32")].run([feed])[0]
    for (cpu, precision), lib in libs.items():   # a wrong answer would make its time meaningless
        out = lib.run([feed])[0]
        agree = int(np.argmax(out) == np.argmax(reference))
        cos = float(np.dot(out.ravel(), reference.ravel()) /
                    (np.linalg.norm(out) * np.linalg.norm(reference) + 1e-30))
        print(f"  {name} {cpu:8s} {precision:8s} top-1 agrees {agree}, cosine {cos:.4f}")
    return libs, feed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="resnet50,squeezenet")
    parser.add_argument("--cpus", default="native,haswell")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--calibration", type=int, default=8)
    args = parser.parse_args(argv)
    cpus = [c.strip() for c in args.cpus.split(",") if c.strip()]
    threads = [int(t) for t in args.threads.split(",")]
    print(f"tensorkiln {tk.__version__}; {os.cpu_count()} cores; load average {_load()} before compiling")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        start = time.perf_counter()
        libs, feed = _compile_all(name, cpus, args.calibration)
        print(f"== {name}: quantized and compiled in {time.perf_counter() - start:.0f} s; load average {_load()}")
        times: dict[tuple, list[float]] = {}
        for _ in range(args.rounds):
            for count in threads:
                tk.runtime.set_num_threads(count)
                for cpu in cpus:
                    for precision in PRECISIONS:
                        lib = libs[(cpu, precision)]
                        lib.run([feed])   # warm: the thread team, the caches
                        for _ in range(args.runs):
                            began, cpu_began = time.perf_counter(), time.process_time()
                            lib.run([feed])
                            times.setdefault((cpu, count, precision), []).append(time.perf_counter() - began)
                            times.setdefault((cpu, count, precision, "cpu"), []).append(
                                time.process_time() - cpu_began)
        print(f"   measured; load average {_load()}")
        print(f"   {'cpu':8s} {'threads':>7s} " + " ".join(f"{p + ' ms':>11s}" for p in PRECISIONS) +
              "   fp16/fp32  int8/fp32 | CPU time: " + " ".join(f"{p + ' ms':>11s}" for p in PRECISIONS) +
              "   fp16/fp32  int8/fp32")
        for cpu in cpus:
            for count in threads:
                line = f"   {cpu:8s} {count:7d} "
                for kind in ((), ("cpu",)):
                    medians = {p: 1e3 * statistics.median(times[(cpu, count, p, *kind)]) for p in PRECISIONS}
                    line += " ".join(f"{medians[p]:11.2f}" for p in PRECISIONS)
                    line += (f"   {medians['float16'] / medians['float32']:9.2f}  "
                             f"{medians['int8'] / medians['float32']:9.2f}")
                    line += " | CPU time: " if not kind else ""
                print(line)
    tk.runtime.set_num_threads(0)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
