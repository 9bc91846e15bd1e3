"""Run time of a Loop of 100 iterations over a small body: control flow in the native entry vs in Python.

    python3 benchmarks/native_control_flow.py [--iterations 100] [--blocks 7] [--runs 50]

The same compiled model runs both ways (`run_with(..., native=False)` runs the plan step by step in
Python, the Loop's host program calling its body's own native entry once per iteration), in
interleaved blocks of `runs` calls in one process; prints the median per-run time of each and the
load average, since the machine may be shared.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

import numpy as np
from onnx import TensorProto as T
from onnx import helper as h

import tensorkiln as tk
from tensorkiln.frontend import from_onnx


def loop_model(iterations: int):
    """y = tanh(y * 0.9 + x) for `iterations` steps (a static trip count), plus a scan output of each y."""
    body = h.make_graph([
        h.make_node("Constant", [], ["k"], value=h.make_tensor("k", T.FLOAT, [], [0.9])),
        h.make_node("Mul", ["y_in", "k"], ["scaled"]), h.make_node("Add", ["scaled", "x"], ["summed"]),
        h.make_node("Tanh", ["summed"], ["y_out"]), h.make_node("Identity", ["cond"], ["cond_out"]),
        h.make_node("Identity", ["y_out"], ["scan"]),
    ], "body", [h.make_tensor_value_info("i", T.INT64, []), h.make_tensor_value_info("cond", T.BOOL, []),
                h.make_tensor_value_info("y_in", T.FLOAT, [4, 8])],
        [h.make_tensor_value_info("cond_out", T.BOOL, []), h.make_tensor_value_info("y_out", T.FLOAT, [4, 8]),
         h.make_tensor_value_info("scan", T.FLOAT, [4, 8])])
    nodes = [h.make_node("Constant", [], ["M"], value=h.make_tensor("M", T.INT64, [], [iterations])),
             h.make_node("Constant", [], ["c"], value=h.make_tensor("c", T.BOOL, [], [True])),
             h.make_node("Loop", ["M", "c", "y0"], ["y", "s"], body=body)]
    graph = h.make_graph(nodes, "g", [h.make_tensor_value_info("x", T.FLOAT, [4, 8]),
                                      h.make_tensor_value_info("y0", T.FLOAT, [4, 8])],
                         [h.make_tensor_value_info("y", T.FLOAT, [4, 8]),
                          h.make_tensor_value_info("s", T.FLOAT, [iterations, 4, 8])])
    return h.make_model(graph, opset_imports=[h.make_opsetid("", 17)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args()
    lib = tk.compile(from_onnx(loop_model(args.iterations)), "cpu_llvm")
    print("executor:", lib.summary()["executor"])
    rng = np.random.default_rng(0)
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32), "y0": rng.standard_normal((4, 8)).astype(np.float32)}
    native, python = (lib.executor.run_with(feeds, native=flag) for flag in (True, False))
    assert all(np.array_equal(a, b) for a, b in zip(native, python)), "native and Python runs differ"
    times: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.blocks):
        for flag in (True, False):
            start = time.perf_counter()
            for _ in range(args.runs):
                lib.executor.run_with(feeds, native=flag)
            times[flag].append((time.perf_counter() - start) / args.runs)
    fast, slow = statistics.median(times[True]), statistics.median(times[False])
    print(f"loop of {args.iterations} iterations, body 4x8 float32 (mul, add, tanh): "
          f"native entry {fast * 1e6:.1f} us/run, Python path {slow * 1e6:.1f} us/run, {slow / fast:.1f}x "
          f"(median of {args.blocks} interleaved blocks of {args.runs} runs; load average "
          f"{', '.join(f'{v:.2f}' for v in os.getloadavg())})")


if __name__ == "__main__":
    main()
