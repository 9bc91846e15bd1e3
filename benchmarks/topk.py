"""benchmarks/topk.py: TopK on cpu_llvm against numpy, time vs n and k, and the fitted growth exponent.

    python benchmarks/topk.py [--sizes 1000,10000,100000,1000000] [--ks 1,16,n/16,n] [--repeat 5] [--threads N]

Each row compiles an ONNX TopK over a float32 vector of n elements (largest=1, sorted=1, k an
initializer) with tk.compile, checks values and indices against numpy's stable order (ties: the lower
index first), then times `run` and numpy in interleaved blocks (medians of `repeat`): numpy's best
top-k is `argpartition` then a stable sort of the k winners, its full sort is a stable `argsort`.
tensorkiln's TopK is a bitonic top-k network (core ops/sort.py): O(n log^2 k) compare-exchanges, so
for fixed k the time should grow linearly in n and for k = n as n log^2 n. The last lines fit the
exponent of time vs n per k column (log-log slope). Compile time is reported apart. Numbers on a
shared machine are noisy: the load average is printed; read the ratios and slopes.

Measured (2 shared cores, load average 4.7, `--ks 1,n --repeat 5`; run ms, numpy ms, ratio):

    n=1e3  k=1 0.02 / 0.01 (1.6x)   k=n   0.08 /   0.01 (7.0x)
    n=1e4  k=1 0.06 / 0.02 (2.7x)   k=n   8.42 /   0.52 (16x)
    n=1e5  k=1 0.52 / 0.17 (3.1x)   k=n  53.8  /  10.9  (4.9x)
    n=1e6  k=1 2.91 / 2.34 (1.2x)   k=n 894    / 176    (5.1x)

k=1 grows linearly or below (n^0.75 from 1e3 to 1e6: fixed costs dominate small n); k=n grows as
n^1.35 over 1e3..1e6 and n^1.22 from 1e5 to 1e6, where n log^2 n predicts n^1.14: the bitonic
network's O(n log^2 k), not the old O(n^2) (n^2 would be 100x per decade, not 17x).
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import time

import numpy as np
from onnx import TensorProto, helper

import tensorkiln as tk


def _model(n: int, k: int):
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"], axis=-1, largest=1, sorted=1)
    graph = helper.make_graph([node], "topk", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("values", TensorProto.FLOAT, [k]),
                               helper.make_tensor_value_info("indices", TensorProto.INT64, [k])],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def _numpy_topk(x: np.ndarray, k: int) -> np.ndarray:
    if k == x.size:
        return np.argsort(-x, kind="stable")
    # argpartition picks any of the values tied with the k-th: ONNX wants the lowest indices among them
    threshold = x[np.argpartition(-x, k - 1)[k - 1]]
    above = np.flatnonzero(x > threshold)
    chosen = np.concatenate([above, np.flatnonzero(x == threshold)[:k - above.size]])
    return chosen[np.lexsort((chosen, -x[chosen]))]


def _k_values(spec: str, n: int) -> list[int]:
    out = []
    for item in spec.split(","):
        k = n if item == "n" else n // int(item[2:]) if item.startswith("n/") else int(item)
        if 1 <= k <= n and k not in out:
            out.append(k)
    return out


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000,1000000")
    parser.add_argument("--ks", default="1,16,n/16,n", help="k values: integers, 'n', or 'n/D'")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args(argv)
    target = "cpu_llvm" if args.threads is None else f"cpu_llvm -num_threads={args.threads}"
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cpus; target {target}")
    print(f"{'n':>8} {'k':>8} {'compile s':>10} {'tensorkiln ms':>14} {'numpy ms':>10} {'ratio':>7}")
    rng = np.random.default_rng(0)
    columns: dict[str, list[tuple[int, float]]] = {}
    for n in (int(float(s)) for s in args.sizes.split(",")):
        x = rng.integers(0, n // 2 + 1, n).astype(np.float32)   # many ties: the index order is checked
        for column, k in zip(args.ks.split(","), _k_values(args.ks, n)):
            start = time.perf_counter()
            compiled = tk.compile(_model(n, k), target=target)
            compile_s = time.perf_counter() - start
            values, indices = compiled.run({"x": x})
            want = _numpy_topk(x, k)
            if not (np.array_equal(indices, want) and np.array_equal(values, x[want])):
                raise SystemExit(f"TopK n={n} k={k}: tensorkiln's result differs from numpy's stable order")
            ours, theirs = [], []
            for _ in range(2):   # interleaved blocks
                ours.append(_median_time(lambda: compiled.run({"x": x}), args.repeat))
                theirs.append(_median_time(lambda: _numpy_topk(x, k), args.repeat))
            ours_s, theirs_s = min(ours), min(theirs)
            columns.setdefault(column, []).append((n, ours_s))
            print(f"{n:>8} {k:>8} {compile_s:>10.1f} {ours_s * 1e3:>14.2f} {theirs_s * 1e3:>10.2f} "
                  f"{ours_s / theirs_s:>7.1f}", flush=True)
    for column, points in columns.items():
        if len(points) >= 2:
            (n0, t0), (n1, t1) = points[0], points[-1]
            print(f"k={column}: time grows as n^{math.log(t1 / t0) / math.log(n1 / n0):.2f} from n={n0} to n={n1}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
