"""benchmarks/threads_loaded.py: 1 against 2 threads beside busy processes, on the pool and on libgomp.

    python benchmarks/threads_loaded.py [--models squeezenet,shufflenet,resnet50] [--busy 1] [--runs 40]

Issue #11 asks that on a loaded machine 2 threads are never slower than 1 by more than noise.
This starts --busy processes that spin on a core each (what a neighbour's job does), then, for
each model and each backend of cpu_llvm's parallel regions (TENSORKILN_THREAD_POOL=pool, the
default, and libgomp), times whole runs at 1 and 2 threads alternately in one child process and
prints the medians and the ratio 2t / 1t (below 1: 2 threads help; above: they hurt), and for the
pool how many regions ran on the caller alone while it was backed off, and how often it backed off
(thread_pool.pool_counts()). The children of the two backends alternate too, so both see the same load.
"""
from __future__ import annotations

import argparse
import multiprocessing
import os
import subprocess
import sys

_CHILD = r"""
import sys, time, statistics
sys.path.insert(0, {benchmarks!r})
import models as M, tensorkiln as tk
from tensorkiln_cpu_llvm import thread_pool
model, inputs = M.light_model({model!r})
lib = tk.compile(model, target="cpu_llvm")
times = {{1: [], 2: []}}
for threads in (1, 2):
    tk.runtime.set_num_threads(threads); lib.run(inputs)
for _ in range({runs}):
    for threads in (1, 2):
        tk.runtime.set_num_threads(threads)
        start = time.perf_counter(); lib.run(inputs); times[threads].append(time.perf_counter() - start)
counts = thread_pool.pool_counts()
print(counts["alone"], counts["backoffs"], thread_pool.backend(), statistics.median(times[1]) * 1e3,
      statistics.median(times[2]) * 1e3)
"""


def _spin() -> None:
    while True:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="squeezenet,shufflenet,resnet50")
    parser.add_argument("--busy", type=int, default=1, help="spinning processes started beside the runs")
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2, help="alternations of the two backends per model")
    args = parser.parse_args()
    benchmarks = os.path.dirname(os.path.abspath(__file__))
    spinners = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for spinner in spinners:
        spinner.start()
    try:
        print(f"{os.cpu_count()} cores, {args.busy} busy process(es) beside the runs; medians of {args.runs} runs")
        print(f"{'model':12s} {'backend':8s} {'1 thread':>10s} {'2 threads':>10s} {'2t / 1t':>8s}  "
              f"(pool: regions run alone while backed off, back-offs)")
        for model in args.models.split(","):
            for _ in range(args.rounds):
                for backend in ("pool", "libgomp"):
                    code = _CHILD.format(benchmarks=benchmarks, model=model, runs=args.runs)
                    env = {**os.environ, "TENSORKILN_THREAD_POOL": backend}
                    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
                    if result.returncode != 0:
                        print(f"{model:12s} {backend:8s} failed: {result.stderr[-500:]}")
                        continue
                    alone, backoffs, name, one, two = result.stdout.split()[-5:]
                    counts = f"  ({alone} alone, {backoffs} back-offs)" if name == "pool" else ""
                    print(f"{model:12s} {name:8s} {float(one):8.2f} ms {float(two):8.2f} ms {float(two) / float(one):8.2f}"
                          f"{counts}", flush=True)
    finally:
        for spinner in spinners:
            spinner.terminate()


if __name__ == "__main__":
    main()
