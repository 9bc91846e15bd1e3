"""benchmarks/topk.py: TopK on cpu_llvm against numpy, time vs n and k, and the fitted growth exponent.

    python benchmarks/topk.py [--sizes 1000,10000,100000,1000000] [--ks 1,16,n/16,n] [--repeat 5] [--threads N]

Each row compiles an ONNX TopK over a float32 vector of n elements (largest=1, sorted=1, k an
initializer) with tk.compile, checks values and indices against numpy's stable order (ties: the lower
index first), then times `run` and numpy in interleaved blocks (medians of `repeat`): numpy's best
top-k is `argpartition` then a stable sort of the k winners, its full sort is a stable `argsort`.
tensorkiln's TopK (core ops/sort.py) is an extern stage per row: a 4-ary heap of the k best kept in the
outputs, O(n log k), so for fixed k the time should grow linearly in n; rows longer than 4096 of
which at least an eighth is kept (here k = n from n = 1e4) are merge-sorted instead, O(n log n) in
memory order, so k = n should grow as n log n (n^1.1 per decade around 1e5). The last lines fit the
exponent of time vs n per k column (log-log slope). Compile time is reported apart (the first row
includes importing the compiler). Numbers on a shared machine are noisy: the load average is printed;
read the ratios and slopes.

Measured (2 shared cores, load average 6.1, `--sizes 1000,10000,100000,1000000 --ks 1,16,n --repeat 3`;
run ms / numpy ms):

    n=1e3  k=1 0.02 / 0.01   k=16 0.02 / 0.01   k=n   0.06 /   0.01 (per-call overhead dominates)
    n=1e4  k=1 0.04 / 0.03   k=16 0.03 / 0.02   k=n   0.58 /   0.60
    n=1e5  k=1 0.12 / 0.18   k=16 0.14 / 0.19   k=n  20.5  /  20.2
    n=1e6  k=1 1.17 / 11.3   k=16 1.33 / 7.30   k=n 187    / 211

k=1 and k=16 grow as n^0.62 and n^0.64 from 1e3 to 1e6 (fixed costs dominate small n; linear from
1e5 to 1e6) and beat numpy's argpartition from 1e5 on; k=n grows as n^1.16 from 1e3 to 1e6 (n^0.96
from 1e5 to 1e6, where numpy's stable argsort grew as n^1.02 on the same run) and runs at 0.9-1.0x
numpy's time. The bitonic network this replaced (ops/sort.py's topk_network) took 894 ms for k=n at
1e6 (5.1x numpy, n^1.35), and a binary heap for every k 420 ms (3.3x).
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
