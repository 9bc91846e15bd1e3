"""benchmarks/tune_gemm.py: tune fp32 GEMM on cpu_llvm and compare with numpy (OpenBLAS).

    python benchmarks/tune_gemm.py [--size 1024] [--trials 128] [--budget 120] [--strategy model]
                                   [--compare random --compare-trials 32 --seeds 2]

1. numpy's A @ B (all cores), median of `--repeat` runs;
2. `tune.tune` on `Task.from_op("gemm", (n, n, n))` within `--trials` and `--budget` seconds
   (trial 0 is the analytic default); its wall time includes building and measuring;
3. `tk.compile` of the matmul with the tuning database, timed against numpy alternately in one
   process (the ratio that counts: same moment, same load);
4. with --compare: each strategy (the main one and --compare) at equal trials, the best
   cost after 8, 16, ... trials, per seed (model-guided vs random);
5. with --replay N: measure every config of the N^3 GEMM's space once (a grid sweep), then run
   both strategies against that table for --seeds seeds: equal trials, the same costs for both,
   so the comparison is of the searches, not of the machine's load at the time.
Prints `uptime` before and after: the machine is shared.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):   # numpy uses OpenBLAS's own choices
    os.environ.pop(_name, None)

import numpy as np  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln import graph, tune  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import QUIESCE_SECONDS  # noqa: E402


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def alternate(runs: dict, repeat: int) -> dict:
    """Median seconds of each callable, run alternately `repeat` times after a warm-up, each run after
    QUIESCE_SECONDS: OpenBLAS's idle threads spin after a call and would take the cores tensorkiln's
    pool runs on next (1024^3 at 2 threads then read 41 ms against 29.5 alone on a 2-core host)."""
    times = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(repeat):
        for name, run in runs.items():
            time.sleep(QUIESCE_SECONDS)
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def curve(task, checkpoints) -> list:
    out, best = [], float("inf")
    for result in task.results:
        if result.valid:
            best = min(best, result.cost)
        if result.trial + 1 in checkpoints:
            out.append(best)
    return out


def run_and_compare(args) -> None:
    n = args.size
    db = tune.Database(args.db or ":memory:")
    task = tune.Task.from_op("gemm", (n, n, n), args.target)
    print(f"task {task.name}: {task.implementation_name}, space {task.space.size} configs, "
          f"knobs {[k.name for k in task.space.knobs]}")
    start = time.perf_counter()
    result = tune.tune(task, trials=args.trials, strategy=args.strategy, db=db, time_budget=args.budget)
    wall = time.perf_counter() - start
    flops = 2.0 * n ** 3
    row = result.summary()[0]
    print(f"tuned {row['trials']} trials in {wall:.1f} s: default {row['default_ms']:.2f} ms, best {row['best_ms']:.2f} ms "
          f"({flops / row['best_ms'] / 1e6:.1f} GFLOP/s) {row['best_config']}; failed/stopped {row['failed']}")
    a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((n, n)).astype(np.float32)
    model = graph.nn.matmul(graph.var("A", shape=(n, n)), graph.var("B", shape=(n, n)))
    tuned = tk.compile(model, args.target, tuning_db=db)
    default = tk.compile(model, args.target)
    np.testing.assert_allclose(tuned.run([a, b])[0], a @ b, rtol=1e-3, atol=1e-2)
    out = np.empty((n, n), np.float32)
    times = alternate({"numpy": lambda: np.matmul(a, b, out=out), "tensorkiln tuned": lambda: tuned.run([a, b]),
                       "tensorkiln default": lambda: default.run([a, b])}, args.repeat)
    for name, seconds in times.items():
        print(f"  {name:20s} {seconds * 1e3:8.2f} ms  {flops / seconds / 1e9:7.1f} GFLOP/s  "
              f"{times['numpy'] / seconds:5.2f}x numpy")
    print(f"RESULT gemm {n}^3: tuned/numpy speed ratio {times['numpy'] / times['tensorkiln tuned']:.2f} "
          f"(>= 0.9 wanted), tuning {wall:.0f} s, {row['trials']} trials")


def replay(args) -> None:
    from tensorkiln.tune.measure import MeasureOptions
    from tensorkiln.tune.session import tuner_for

    n = args.replay
    task = tune.Task.from_op("gemm", (n, n, n), args.target)
    start = time.perf_counter()
    tune.tune(task, trials=task.space.size, strategy="grid", confirm=False, batch=16,
              options=MeasureOptions(early_stop=1e9))
    table = {json.dumps(r.config, sort_keys=True): r.score for r in task.results}
    finite = sorted(v for v in table.values() if v < float("inf"))
    optimum, default_cost = finite[0], task.results[0].score
    print(f"swept {len(table)} configs of gemm {n}^3 in {time.perf_counter() - start:.0f} s: optimum "
          f"{optimum * 1e3:.3f} ms, default {default_cost * 1e3:.3f} ms, median {finite[len(finite) // 2] * 1e3:.3f} ms, "
          f"{len(table) - len(finite)} failed")
    checkpoints = [c for c in (8, 16, 24, 32, 48, 64) if c <= args.compare_trials]
    print(f"best/optimum after {checkpoints} trials (mean over {args.seeds} seeds), share of seeds at the optimum:")
    for strategy in (args.strategy, args.compare or "random"):
        ratios = {c: [] for c in checkpoints}
        for seed in range(args.seeds):
            tuner = tuner_for(task, strategy, seed)
            tuner.tell([(task.space.default_config(), default_cost)])   # trial 0, as tune() does
            best, used = default_cost, 1
            while used < max(checkpoints):
                configs = tuner.ask(8)
                if not configs:
                    break
                scores = [table[json.dumps(c, sort_keys=True)] for c in configs]
                tuner.tell(list(zip(configs, scores)))
                for score in scores:
                    used += 1
                    best = min(best, score)
                    if used in ratios:
                        ratios[used].append(best / optimum)
        print(f"  {strategy:12s} " + "  ".join(
            f"{c}: {statistics.fmean(v):.3f} ({sum(x <= 1.0 for x in v)}/{len(v)})" for c, v in ratios.items() if v))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--trials", type=int, default=128)
    parser.add_argument("--budget", type=float, default=120.0)
    parser.add_argument("--strategy", default="model")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--db", default="")
    parser.add_argument("--compare", default="", help="a second strategy to compare at equal trials")
    parser.add_argument("--compare-trials", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--compare-only", action="store_true", help="skip the tuning run and the numpy comparison")
    parser.add_argument("--replay", type=int, default=0, metavar="N", help="sweep the N^3 GEMM's space, then replay")
    args = parser.parse_args()
    n = args.size
    print("uptime before:", uptime())
    if args.replay:
        replay(args)
    elif not args.compare_only:
        run_and_compare(args)
    if args.compare and not args.replay:
        checkpoints = [c for c in (4, 8, 16, 24, 32, 48, 64, 96, 128) if c <= args.compare_trials]
        print(f"best cost (ms) after {checkpoints} trials, equal trials per strategy:")
        for seed in range(args.seeds):          # alternately: both strategies see the same load
            for strategy in (args.strategy, args.compare):
                fresh = tune.Task.from_op("gemm", (n, n, n), args.target)
                tune.tune(fresh, trials=args.compare_trials, strategy=strategy, seed=seed + 10, confirm=False)
                print(f"  {strategy:12s} seed {seed}: " + " ".join(f"{c * 1e3:7.2f}" for c in curve(fresh, checkpoints)))
    print("uptime after:", uptime())


if __name__ == "__main__":
    main()
