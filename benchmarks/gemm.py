"""benchmarks/gemm.py: fp32 1024x1024x1024 matmul, GFLOP/s of numpy (OpenBLAS) and tensorkiln schedules.

    python benchmarks/gemm.py [--size 1024] [--repeat 7] [--targets cpu_llvm,opencl] [--avx2]

Rows: numpy; tensorkiln naive (the core's naive default schedule); the seed's schedule
(split i, j by 32, reorder, tensorize onto gemm_accelerator); tutorial: TVM's classic
"How to optimize GEMM on CPU" schedule written in te (B packed into 32-wide panels,
32x32 blocks, a cache_write accumulator computed at the block, k split by 4 and unrolled,
the columns vectorized, the blocks' rows and the packing parallel); best: what `tk.compile` runs
for nn.matmul on cpu_llvm, the implementation its strategies choose with default knobs
(cpu_llvm.matmul_ukernel, strategies/ukernel.py: packed B, mc/kc blocking, an FMA micro-kernel whose
register tile follows the CPU (strategies/gemm_blocking.register_tiles: 4x24 with AVX2, 6x16 or 8x32 or 6x64
with AVX-512), parallel rows). Each single-threaded (numpy limited to 1 thread with
threadpoolctl, tensorkiln num_threads=1) and with all cores; medians of `repeat`
timings, each ratio relative to numpy in the same thread setting.

The tutorial schedule at 1024 on AVX-512 is bound by A, not by the code: its 32 rows of a block
are 4 KB apart, so the broadcasts of A[row, k] all fall into one L1 set and miss (measured, 1
core, Zen 5: 0.54x numpy at 1024, 0.99x at --size 1056, whose rows are 4224 bytes apart; 0.87x
at 1024 with --avx2, where the FMAs are half as fast and the misses hide behind them). TVM 0.27 itself
runs the same schedule at 0.52-0.57x numpy on this host and 0.83-0.85x with -mcpu=haswell
(benchmarks/tvm_tutorial_gemm.py, in its own virtual environment).
"""
import os
import sys

# The numpy baseline must use OpenBLAS's own choice of kernel and cache sizes: drop
# overrides before numpy (and OpenBLAS) is loaded. --avx2 compares AVX2 code
# (-mcpu=haswell) with OpenBLAS's Haswell kernel, in this process alone.
for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)
if "--avx2" in sys.argv:
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"
TARGET = "llvm -mcpu=haswell" if "--avx2" in sys.argv else "llvm"

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

import tensorkiln as tk  # noqa: E402
from tensorkiln import te  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import QUIESCE_SECONDS  # noqa: E402  (OpenBLAS's idle threads spin ~0.1 s after a call)


def matmul(size: int):
    a = te.placeholder((size, size), name="A")
    b = te.placeholder((size, size), name="B")
    k = te.reduce_axis((0, size), name="k")
    c = te.compute((size, size), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return a, b, c


def naive(size: int):
    from tensorkiln.ops import naive_schedule

    a, b, c = matmul(size)
    return naive_schedule([c]), [a, b, c]


def seed(size: int):
    a, b, c = matmul(size)
    s = te.create_schedule(c.op)
    i, j = s[c].op.axis
    i_outer, i_inner = s[c].split(i, factor=32)
    j_outer, j_inner = s[c].split(j, factor=32)
    s[c].reorder(i_outer, j_outer, i_inner, j_inner)
    s[c].tensorize(i_inner, tk.intrinsic("gemm_accelerator", target=TARGET))
    return s, [a, b, c]


def tutorial(size: int, bn: int = 32, k_factor: int = 4):
    """TVM's tutorial schedule, its last step ("Parallel"): packed B, cache_write, vectorize, unroll, parallel."""
    a, b, _ = matmul(size)
    k = te.reduce_axis((0, size), name="k")
    packed = te.compute((size // bn, size, bn), lambda x, y, z: b[y, x * bn + z], name="packedB")
    c = te.compute((size, size), lambda x, y: te.sum(a[x, k] * packed[y // bn, k, y % bn], axis=k), name="C")
    s = te.create_schedule(c.op)
    cc = s.cache_write(c, "global")
    mo, no, _, _ = s[c].tile(c.op.axis[0], c.op.axis[1], bn, bn)
    s[cc].compute_at(s[c], no)
    mc, nc = s[cc].op.axis
    (k_axis,) = s[cc].op.reduce_axis
    ko, ki = s[cc].split(k_axis, factor=k_factor)
    s[cc].reorder(ko, mc, ki, nc)
    s[cc].vectorize(nc)
    s[cc].unroll(ki)
    x, _, z = s[packed].op.axis
    s[packed].vectorize(z)
    s[packed].parallel(x)
    s[c].parallel(mo)
    return s, [a, b, c]


def best(size: int):
    """As compiler/lower_groups.py builds a one-op nn.matmul group: the implementation the strategies
    select for it (rebuilt with its compute when it has one), at its default knob values."""
    from tensorkiln import graph
    from tensorkiln.compiler.strategy import select

    target = tk.target(TARGET)
    call = graph.nn.matmul(graph.var("A", shape=(size, size)), graph.var("B", shape=(size, size)))
    a, b, c = matmul(size)
    choice = select([call], [c], target)
    if choice.implementation is not None and choice.implementation.compute is not None:
        c = choice.implementation.compute([a, b], call.attrs, call.checked_type, target, dict(choice.config))
    print(f"best: {choice.name} {choice.config}")
    return choice.schedule([c], target), [a, b, c]


def gpu_tiled(size: int, tile: int = 16, k_tile: int = 16):
    """The classic GPU GEMM for targets with thread axes (opencl): block tiles of C, A and B
    k-tiles staged in shared (__local) memory, one output per work-item accumulated in a register."""
    a, b, c = matmul(size)
    s = te.create_schedule(c.op)
    aa = s.cache_read(a, "shared", [c])
    bb = s.cache_read(b, "shared", [c])
    cc = s.cache_write(c, "local")
    i, j = s[c].op.axis
    bi, ti = s[c].split(i, factor=tile)
    bj, tj = s[c].split(j, factor=tile)
    s[c].reorder(bi, bj, ti, tj)
    s[c].bind(bi, te.thread_axis("blockIdx.y"))
    s[c].bind(bj, te.thread_axis("blockIdx.x"))
    s[c].bind(ti, te.thread_axis("threadIdx.y"))
    s[c].bind(tj, te.thread_axis("threadIdx.x"))
    s[cc].compute_at(s[c], tj)
    (k,) = s[cc].op.reduce_axis
    ko, _ = s[cc].split(k, factor=k_tile)
    s[aa].compute_at(s[cc], ko)
    s[bb].compute_at(s[cc], ko)
    return s, [a, b, c]


def opencl_column(size: int, a, b, reference, best_seconds: float, repeat: int) -> None:
    """GFLOP/s of the GPU-style GEMM on the opencl target (PoCL on this CPU), as a ratio to cpu_llvm."""
    try:
        target = tk.target("opencl")
        target.spec.require_available()
    except tk.ir.TensorkilnError as error:
        print(f"\nopencl: not run ({error})")
        return
    s, tensors = gpu_tiled(size)
    started = time.perf_counter()
    module = tk.build(s, tensors, target="opencl", name="gemm_opencl")
    c = np.zeros((size, size), np.float32)
    module(a, b, c)
    np.testing.assert_allclose(c, reference, rtol=1e-3, atol=1e-3)
    print(f"\nopencl ({target.spec.loader.describe_device(target)}): built the tiled GEMM in "
          f"{time.perf_counter() - started:.2f} s (result matches numpy)")
    seconds = statistics.median(module.time_evaluator(number=1, repeat=repeat)(a, b, c).results)
    flops = 2.0 * size ** 3
    print(f"  opencl tiled (shared memory) {flops / seconds / 1e9:8.1f} GFLOP/s  "
          f"{best_seconds / seconds:5.2f}x cpu_llvm best (all cores)")


def seconds_per_call(run, number: int) -> tuple[float, float]:
    """(wall, process CPU) seconds per call over a batch of `number` calls."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        run()
    return (time.perf_counter() - start) / number, (time.process_time() - cpu) / number


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--targets", default="cpu_llvm", help="comma list; add opencl for its column")
    parser.add_argument("--avx2", action="store_true", help="AVX2 code (-mcpu=haswell) against OpenBLAS's "
                        "Haswell kernel")
    args = parser.parse_args()
    size, flops = args.size, 2.0 * args.size ** 3
    blas = [i for i in threadpool_info() if i["user_api"] == "blas"]
    for info in blas:
        print(f"numpy BLAS: {info['internal_api']} {info.get('version')} kernel={info.get('architecture')} "
              f"threads={info['num_threads']} ({os.path.basename(info['filepath'])})")
    print(f"cpu_llvm target: {tk.target(TARGET)}; cores: {os.cpu_count()}; load average: {os.getloadavg()}")

    rng = np.random.default_rng(0)
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    reference = a @ b
    modules = {}
    for label, make in (("naive", naive), ("seed", seed), ("tutorial", tutorial), ("best", best)):
        s, tensors = make(size)
        started = time.perf_counter()
        modules[label] = tk.build(s, tensors, target=TARGET, name=f"gemm_{label}")
        c = np.zeros((size, size), np.float32)
        modules[label](a, b, c)
        np.testing.assert_allclose(c, reference, rtol=1e-3, atol=1e-3)
        print(f"built {label:6s} in {time.perf_counter() - started:.2f} s (result matches numpy)")

    c = np.empty((size, size), np.float32)
    best_all_cores = None
    for setting, threads in (("1 thread", 1), (f"all cores ({os.cpu_count()})", 0)):
        tk.runtime.set_num_threads(threads)
        kernels = {label: module.get_function(module.entry_name) for label, module in modules.items()}
        runs = {"numpy (OpenBLAS)": lambda: np.matmul(a, b, out=c),
                **{f"tensorkiln {label}": (lambda k=kernel: k(a, b, c)) for label, kernel in kernels.items()}}
        seconds: dict[str, list[float]] = {name: [] for name in runs}
        cpu_seconds: dict[str, list[float]] = {name: [] for name in runs}
        with threadpool_limits(limits=threads or None, user_api="blas"):
            for name, run in runs.items():
                if not name.endswith("naive"):
                    # warm up: thread pools start, pages fault in (after a pause: OpenBLAS's spinning threads
                    # would make tensorkiln's pool back off, thread_pool.c)
                    time.sleep(QUIESCE_SECONDS if threads != 1 else 0.0)
                    run()
            # naive takes seconds per call: three calls, apart (run between the others, it slowed the
            # next rows by half, measured in CPU time)
            for name in [n for n in runs if n.endswith("naive")]:
                for _ in range(3):
                    wall, cpu = seconds_per_call(runs[name], 1)
                    seconds[name].append(wall)
                    cpu_seconds[name].append(cpu)
            # interleave the other rows, so that load from other processes hits all of them alike; with
            # several threads, after a pause: the row before's idle threads (OpenBLAS's spin ~0.1 s) would
            # take the cores this row's threads need, and be counted in its process CPU time
            for _ in range(args.repeat):
                for name, run in runs.items():
                    if not name.endswith("naive"):
                        time.sleep(QUIESCE_SECONDS if threads != 1 else 0.0)
                        wall, cpu = seconds_per_call(run, 3)
                        seconds[name].append(wall)
                        cpu_seconds[name].append(cpu)
        numpy_s = statistics.median(seconds["numpy (OpenBLAS)"])
        numpy_cpu = statistics.median(cpu_seconds["numpy (OpenBLAS)"])
        print(f"\n{setting}: median of {args.repeat} interleaved repeats (naive: 3); ratios to numpy in wall "
              f"time and in process CPU time (steadier on a loaded machine)")
        for name, times in seconds.items():
            median = statistics.median(times)
            print(f"  {name:28s} {flops / median / 1e9:8.1f} GFLOP/s  {numpy_s / median:5.2f}x  "
                  f"(CPU time {numpy_cpu / statistics.median(cpu_seconds[name]):5.2f}x)")
        best_all_cores = statistics.median(seconds["tensorkiln best"])
    tk.runtime.set_num_threads(0)
    if "opencl" in args.targets.split(","):
        opencl_column(size, a, b, reference, best_all_cores, args.repeat)


if __name__ == "__main__":
    main()
