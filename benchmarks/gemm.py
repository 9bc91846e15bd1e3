"""benchmarks/gemm.py: fp32 1024x1024x1024 matmul, GFLOP/s of numpy (OpenBLAS) and tensorkiln schedules.

    python benchmarks/gemm.py [--size 1024] [--repeat 7]

Rows: numpy; tensorkiln naive (default schedule); the seed's schedule (split i, j by
32, reorder, tensorize onto gemm_accelerator); the best hand schedule
(tensorkiln_cpu_llvm.schedules.schedule_dense: packed B, mc/kc blocking, 8x32 FMA
micro-kernel, parallel rows). Each single-threaded (numpy limited to 1 thread with
threadpoolctl, tensorkiln num_threads=1) and with all cores; medians of `repeat`
timings, each ratio relative to numpy in the same thread setting.
"""
import os

# The numpy baseline must use OpenBLAS's own choice of kernel and cache sizes: drop
# overrides before numpy (and OpenBLAS) is loaded.
for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln import te  # noqa: E402


def matmul(size: int):
    a = te.placeholder((size, size), name="A")
    b = te.placeholder((size, size), name="B")
    k = te.reduce_axis((0, size), name="k")
    c = te.compute((size, size), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return a, b, c


def naive(size: int):
    a, b, c = matmul(size)
    return te.create_schedule(c.op), [a, b, c]


def seed(size: int):
    a, b, c = matmul(size)
    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    i_outer, i_inner = s[c].split(i, factor=32)
    j_outer, j_inner = s[c].split(j, factor=32)
    s[c].reorder(i_outer, j_outer, i_inner, j_inner)
    s[c].tensorize(i_inner, tk.intrinsic("gemm_accelerator", target="llvm"))
    return s, [a, b, c]


def best(size: int):
    from tensorkiln_cpu_llvm.schedules import matmul_packed, schedule_dense

    a = te.placeholder((size, size), name="A")
    b = te.placeholder((size, size), name="B")
    c = matmul_packed(a, b, target="llvm")
    return schedule_dense(c, target="llvm"), [a, b, c]


def median_seconds(run, repeat: int, number: int) -> float:
    """Median over `repeat` batches of seconds per call (batches of `number` calls)."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            run()
        times.append((time.perf_counter() - start) / number)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    size, flops = args.size, 2.0 * args.size ** 3
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    for info in blas:
        print(f"numpy BLAS: {info['internal_api']} {info.get('version')} kernel={info.get('architecture')} "
              f"threads={info['num_threads']} ({os.path.basename(info['filepath'])})")
    print(f"cpu_llvm target: {tk.target('llvm')}; cores: {os.cpu_count()}; load average: {os.getloadavg()}")

    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    reference = a @ b
    modules = {}
    for label, make in (("naive", naive), ("seed", seed), ("best", best)):
        s, tensors = make(size)
        started = time.perf_counter()
        modules[label] = tk.build(s, tensors, target="llvm", name=f"gemm_{label}")
        c = np.zeros((size, size), np.float32)
        modules[label](a, b, c)
        np.testing.assert_allclose(c, reference, rtol=1e-3, atol=1e-3)
        print(f"built {label:6s} in {time.perf_counter() - started:.2f} s (result matches numpy)")

    c = np.empty((size, size), np.float32)
    for setting, threads in (("1 thread", 1), (f"all cores ({os.cpu_count()})", 0)):
        tk.runtime.set_num_threads(threads)
        kernels = {label: module.get_function(module.entry_name) for label, module in modules.items()}
        runs = {"numpy (OpenBLAS)": lambda: np.matmul(a, b, out=c),
                **{f"tensorkiln {label}": (lambda k=kernel: k(a, b, c)) for label, kernel in kernels.items()}}
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        with threadpool_limits(limits=threads or None, user_api="blas"):
            for name, run in runs.items():
                if not name.endswith("naive"):
                    run()  # warm up: thread pools start, pages fault in
            # interleave the rows, so that load from other processes hits all of them alike
            for _ in range(args.repeat):
                for name, run in runs.items():
                    if name.endswith("naive") and len(seconds[name]) >= 3:
                        continue  # seconds per call: three repeats are enough
                    seconds[name].append(median_seconds(run, 1, 1 if name.endswith("naive") else 3))
        numpy_s = statistics.median(seconds["numpy (OpenBLAS)"])
        print(f"\n{setting}: median of {args.repeat} interleaved repeats (naive: 3)")
        for name, times in seconds.items():
            median = statistics.median(times)
            print(f"  {name:28s} {flops / median / 1e9:8.1f} GFLOP/s  {numpy_s / median:5.2f}x")
    tk.runtime.set_num_threads(0)


if __name__ == "__main__":
    main()
