"""benchmarks/gemm_threading.py: cpu_llvm's parallel loops: fork/join cost per region, and 2 threads against 1.

    python benchmarks/gemm_threading.py [--repeat 41]

1. Fork/join overhead per parallel region: one kernel with `regions` parallel loops of
   two iterations each (almost no work), timed per call with num_threads=2 (each region
   is a GOMP_parallel) and with num_threads=1 (each region is a plain call), divided by
   the number of regions.
2. 2 threads against 1, interleaved in one process (load from other processes hits both
   alike): the whole-GEMM call at 512^3 and 1000^3 (work items taken dynamically, sgemm.py),
   an elementwise kernel over 4M floats and a row-parallel reduction (parallel loops with
   dynamically claimed chunks, stmts.py). On a loaded machine the 2-thread median should
   never be slower than the 1-thread median by more than noise.

Prints the machine load (os.getloadavg) before and after.
"""
import argparse
import os
import statistics
import time

import numpy as np

import tensorkiln as tk
from tensorkiln import te


def regions_kernel(regions: int):
    """`regions` stages, each a parallel loop of 2 iterations over 16 floats."""
    a = te.placeholder((2, 16), name="a")
    stages, current = [], a
    def plus_one(source, index):
        return te.compute((2, 16), lambda i, j: source[i, j] + 1.0, name=f"s{index}")
    for index in range(regions):
        current = plus_one(current, index)
        stages.append(current)
    s = te.create_schedule(current.op)
    for stage in stages:
        s[stage].parallel(s[stage].op.axis[0])
    return tk.build(s, [a, current], target="llvm", name=f"regions{regions}"), (2, 16)


def elementwise_kernel(n: int):
    a = te.placeholder((n // 1024, 1024), name="a")
    b = te.compute(a.shape, lambda i, j: te.exp(a[i, j]) * 0.5 + a[i, j], name="b")
    s = te.create_schedule(b.op)
    i, j = s[b].op.axis
    s[b].parallel(i)
    s[b].vectorize(j)
    return tk.build(s, [a, b], target="llvm", name="elementwise")


def row_sum_kernel(rows: int, columns: int):
    a = te.placeholder((rows, columns), name="a")
    k = te.reduce_axis((0, columns), name="k")
    b = te.compute((rows,), lambda i: te.sum(a[i, k] * a[i, k], axis=k), name="b")
    s = te.create_schedule(b.op)
    s[b].parallel(s[b].op.axis[0])
    return tk.build(s, [a, b], target="llvm", name="row_sum")


def gemm_kernel(size: int):
    from gemm_sweep import build_best
    return build_best(size, size, size, "llvm")[0]


def per_call(run, number: int) -> float:
    start = time.perf_counter()
    for _ in range(number):
        run()
    return (time.perf_counter() - start) / number


def fork_join(repeat: int) -> None:
    regions = 64
    module, shape = regions_kernel(regions)
    a, out = np.zeros(shape, np.float32), np.zeros(shape, np.float32)
    kernel = module.get_function(module.entry_name)
    samples = {1: [], 2: []}
    for _ in range(repeat):
        for threads in (1, 2):
            tk.runtime.set_num_threads(threads)
            samples[threads].append(per_call(lambda: kernel(a, out), 50))
    one, two = (statistics.median(samples[t]) for t in (1, 2))
    print(f"fork/join per parallel region ({regions} regions per call, medians of {repeat}): "
          f"{(two - one) / regions * 1e6:.2f} us  (call: {one * 1e6:.1f} us at 1 thread, "
          f"{two * 1e6:.1f} us at 2; best-of: {(min(samples[2]) - min(samples[1])) / regions * 1e6:.2f} us)")


def two_against_one(repeat: int) -> None:
    rng = np.random.default_rng(0)
    cases = []
    for size in (512, 1000):
        a, b = rng.random((size, size), dtype=np.float32), rng.random((size, size), dtype=np.float32)
        c = np.empty((size, size), np.float32)
        kernel = gemm_kernel(size)
        cases.append((f"GEMM {size}^3 (sgemm, dynamic items)", lambda k=kernel, a=a, b=b, c=c: k(a, b, c)))
    n = 4 << 20
    x, y = rng.random((n // 1024, 1024), dtype=np.float32), np.empty((n // 1024, 1024), np.float32)
    module = elementwise_kernel(n)
    cases.append(("elementwise exp over 4M floats", lambda k=module.get_function(module.entry_name): k(x, y)))
    rows, columns = 4096, 1024
    m, r = rng.random((rows, columns), dtype=np.float32), np.empty((rows,), np.float32)
    module = row_sum_kernel(rows, columns)
    cases.append(("row sums 4096 x 1024", lambda k=module.get_function(module.entry_name): k(m, r)))
    print(f"\n2 threads against 1 (interleaved, medians of {repeat}; <1.00 means 2 threads are faster):")
    for label, run in cases:
        run()
        once = per_call(run, 1)
        number = max(1, int(0.01 / max(once, 1e-6)))
        samples = {1: [], 2: []}
        for _ in range(repeat):
            for threads in (1, 2):
                tk.runtime.set_num_threads(threads)
                samples[threads].append(per_call(run, number))
        one, two = (statistics.median(samples[t]) for t in (1, 2))
        print(f"  {label:40s} 1 thread {one * 1e3:8.3f} ms  2 threads {two * 1e3:8.3f} ms  "
              f"2/1 = {two / one:5.2f}  (best-of {min(samples[2]) / min(samples[1]):5.2f})")
    tk.runtime.set_num_threads(0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=41)
    args = parser.parse_args()
    print(f"cores: {os.cpu_count()}; load average before: {os.getloadavg()}")
    fork_join(args.repeat)
    two_against_one(args.repeat)
    print(f"\nload average after: {os.getloadavg()}")


if __name__ == "__main__":
    import sys
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
