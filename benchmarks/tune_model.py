"""benchmarks/tune_model.py: tune a light-zoo model on cpu_llvm and compare with onnxruntime.

    python benchmarks/tune_model.py [--model resnet50] [--threads 2] [--trials 300] [--budget 1200]
                                    [--strategy model] [--db resnet50.sqlite]

1. `tune.extract_tasks` on onnx's light_<model>.onnx (one task per distinct fused group);
2. `tune.tune` within --trials and --budget seconds (the 20 minutes the issue allows);
3. onnxruntime (intra-op threads = --threads, all graph optimisations), tensorkiln with the
   analytic defaults and tensorkiln with the tuning database, timed alternately in one process
   (same moment, same load), medians of --repeat runs; outputs checked against the model's
   reference output.
Prints `uptime` before and after: the machine is shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln import tune

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import LIGHT, light_model  # noqa: E402
from ort_baseline import ort_session  # noqa: E402

OPT_LEVEL = 3


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="resnet50")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--budget", type=float, default=1200.0)
    parser.add_argument("--strategy", default="model")
    parser.add_argument("--repeat", type=int, default=15)
    parser.add_argument("--db", default="")
    parser.add_argument("--skip-tuning", action="store_true", help="only compare, with the records already in --db")
    args = parser.parse_args()
    print("uptime before:", uptime(), flush=True)
    target = f"cpu_llvm -num_threads={args.threads}"
    tk.runtime.set_num_threads(args.threads)
    path = os.path.join(LIGHT, f"light_{args.model}.onnx")
    db = tune.Database(args.db or ":memory:")
    if not args.skip_tuning:
        tasks = tune.extract_tasks(path, target, opt_level=OPT_LEVEL)
        print(f"{len(tasks)} tasks, {sum(t.space.size for t in tasks)} configs in all", flush=True)
        start = time.perf_counter()
        result = tune.tune(tasks, trials=args.trials, strategy=args.strategy, db=db, time_budget=args.budget)
        print(f"tuning: {time.perf_counter() - start:.0f} s, {sum(len(s.results) for s in result.states)} trials")
        for row in result.summary():
            speedup = f"{row['speedup']:.2f}x" if row["speedup"] else row["skipped"]
            print(f"  {row['task'][:44]:44s} x{row['weight']} {row['implementation']:28s} trials {row['trials']:3d} "
                  f"default {row['default_ms'] or 0:8.3f} ms best {row['best_ms'] or 0:8.3f} ms {speedup}")
    model, feeds = light_model(args.model)
    ((input_name, data),) = feeds.items()
    mod = tk.frontend.from_onnx(model)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{args.model}_output_0.pb")))
    session = ort_session(model, args.threads)
    feed = {session.get_inputs()[0].name: data}
    default = tk.compile(mod, target, opt_level=OPT_LEVEL)
    tuned = tk.compile(mod, target, opt_level=OPT_LEVEL, tuning_db=db)
    used = sum(1 for row in tuned.summary()["strategies"].values() if row.get("tuning_record"))
    print(f"{used} of {len(tuned.summary()['strategies'])} kernels use a tuning record")
    for name, lib in (("default", default), ("tuned", tuned)):
        error = float(np.max(np.abs(lib.run({input_name: data})[0] - expected)))
        print(f"tensorkiln {name}: max |error| vs the model's reference output {error:.2e}")
    runs = {"onnxruntime": lambda: session.run(None, feed), "tensorkiln default": lambda: default.run({input_name: data}),
            "tensorkiln tuned": lambda: tuned.run({input_name: data})}
    times = {name: [] for name in runs}
    for run in runs.values():
        run()
    for _ in range(args.repeat):
        for name, run in runs.items():
            begin = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - begin)
    medians = {name: statistics.median(values) * 1e3 for name, values in times.items()}
    for name, ms in medians.items():
        print(f"  {name:20s} {ms:8.2f} ms  {ms / medians['onnxruntime']:5.2f}x onnxruntime")
    print(f"RESULT {args.model} at {args.threads} threads: tuned/onnxruntime latency "
          f"{medians['tensorkiln tuned'] / medians['onnxruntime']:.2f} (<= 0.9 wanted), default/onnxruntime "
          f"{medians['tensorkiln default'] / medians['onnxruntime']:.2f}")
    print("uptime after:", uptime())


if __name__ == "__main__":
    main()
