"""benchmarks/executor_overhead.py: per-step cost of the Python executor against the native whole-plan entry.

    python benchmarks/executor_overhead.py                       # the six real-world graphs
    python benchmarks/executor_overhead.py --models tcn,squeezenet --blocks 15

Each model is compiled once for cpu_llvm and run at 1 thread with concurrent levels off, so every
kernel runs in the calling thread; blocks of Python-executor runs (`run_with(..., native=False)`)
and native-entry runs (`run_with(...)`) alternate in the same process. The times are that thread's
CPU time (`time.thread_time`), which a shared machine's load inflates far less than wall time; the
medians of the blocks and their difference per step are printed with the load average. Both paths
run the same kernels on the same arena, so the difference is what the Python loop costs per step
(binding, timers, index and mirror checks, the call) over the native entry's loop.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import tensorkiln as tk

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import models  # noqa: E402
import real_graphs  # noqa: E402


def measure(name: str, blocks: int) -> str:
    if name in real_graphs.NAMES:
        _, model, inputs = real_graphs.build(name)
    else:
        model, inputs = models.light_model(name)
    lib = tk.compile(model, target="cpu_llvm")
    executor = lib.executor
    executor.concurrent = False
    steps = len(lib.plan.steps)
    if executor.native_entry is None:
        return f"{name:20s} {steps:6d}  no native entry: {executor.native_reason}"
    for _ in range(2):
        executor.run_with(inputs, native=False)
        executor.run_with(inputs)
    start = time.thread_time()
    executor.run_with(inputs)
    repeat = max(3, min(200, int(0.05 / max(time.thread_time() - start, 1e-6))))   # about 50 ms a block
    python, native = [], []
    for _ in range(blocks):
        start = time.thread_time()
        for _ in range(repeat):
            executor.run_with(inputs, native=False)
        middle = time.thread_time()
        for _ in range(repeat):
            executor.run_with(inputs)
        python.append((middle - start) / repeat)
        native.append((time.thread_time() - middle) / repeat)
    p, n = statistics.median(python), statistics.median(native)
    return (f"{name:20s} {steps:6d} {p * 1e3:11.3f} {n * 1e3:11.3f} {(p - n) / steps * 1e6:13.2f} "
            f"{os.getloadavg()[0]:6.1f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(real_graphs.NAMES),
                        help="comma-separated real-world graphs and light models")
    parser.add_argument("--blocks", type=int, default=9, help="alternating blocks per path (default 9)")
    args = parser.parse_args(argv)
    tk.runtime.set_num_threads(1)
    print(f"{'model':20s} {'steps':>6s} {'python ms':>11s} {'native ms':>11s} {'saved us/step':>13s} {'load':>6s}")
    for name in args.models.split(","):
        print(measure(name.strip(), args.blocks), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
