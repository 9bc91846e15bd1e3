"""benchmarks/gemm_sweep.py: fp32 GEMM at awkward shapes, tensorkiln's best schedule against numpy (OpenBLAS).

    python benchmarks/gemm_sweep.py [--isa native,avx2] [--threads 1,2] [--repeat 21] [--sizes 1024x1024x1024,...]
                                    [--weights runtime|constant]

Sizes are M x N x K (C[M, N] = A[M, K] @ B[K, N]). "best" is what `tk.compile` runs for an
nn.matmul (the implementation cpu_llvm's strategies choose, default knobs; for the GEMM:
strategies/ukernel.py on sgemm.py). Each column is measured in its own process:

- native: the host's ISA (`llvm`), numpy with OpenBLAS's own kernel (OPENBLAS_CORETYPE
  and OPENBLAS_L2_SIZE unset);
- avx2: `llvm -mcpu=haswell`, numpy forced to OpenBLAS's Haswell (AVX2) kernel with
  OPENBLAS_CORETYPE=Haswell in that process's environment alone.

and each thread count too (worker threads that OpenBLAS or libgomp leave spinning after a
2-thread call would slow the next 1-thread call). Each ratio is numpy's median seconds
over ours (>1: faster than numpy), timed interleaved (numpy, ours, numpy, ...; at 2 threads with a
pause before each sample, QUIESCE_SECONDS) in one
process so machine load hits both alike; "best-of" is the same with the fastest sample of
each, and "CPU time" the ratio of median process CPU seconds per call (what a call costs
when other processes take the cores away; with 2 threads it also counts spin-waiting),
steadier readings on a loaded machine. The last line is the sweep's worst case (of the
wall-clock medians).

`--weights constant` times what a model with a constant weight runs instead: `tk.compile` of
nn.matmul(x, const(B)) (B packed at compile time into the micro-kernel's slivers, nn.dense_pack:
cpu_llvm_pack_dense_weights), called through `lib.run` (its output allocated per call), against
numpy's `matmul(a, b, out=...)` on the same B; numpy has no way to keep its packed B between calls.
"""
import os
import sys

if __name__ == "__main__" and os.environ.get("TK_SWEEP_CHILD") is None:
    # the parent only spawns one child per ISA, each with its own BLAS environment
    for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
        os.environ.pop(_name, None)

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

SIZES = ("1024x1024x1024", "1000x1000x1000", "1024x1000x2048", "49x512x4608", "3072x768x768", "960x960x960",
         "196x256x2304", "64x4096x1024")
TARGETS = {"native": "llvm", "avx2": "llvm -mcpu=haswell"}


def build_best(m: int, n: int, k: int, target_text: str):
    """As compiler/lower_groups.py builds a one-op nn.matmul group: the strategies' choice, default knobs."""
    import tensorkiln as tk
    from tensorkiln import graph, te
    from tensorkiln.compiler.strategy import select

    target = tk.target(target_text)
    call = graph.nn.matmul(graph.var("A", shape=(m, k)), graph.var("B", shape=(k, n)))
    a, b = te.placeholder((m, k), name="A"), te.placeholder((k, n), name="B")
    r = te.reduce_axis((0, k), name="k")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    choice = select([call], [c], target)
    if choice.implementation is not None and choice.implementation.compute is not None:
        c = choice.implementation.compute([a, b], call.attrs, call.checked_type, target, dict(choice.config))
    module = tk.build(choice.schedule([c], target), [a, b, c], target=target, name="gemm_best")
    return module.get_function(module.entry_name), choice, module


def build_constant(b, m: int, target_text: str):
    """What tk.compile runs for nn.matmul(x[m, K], const(b)): the compiled model and its GEMM's strategy row."""
    import tensorkiln as tk
    from tensorkiln import graph

    x = graph.var("x", shape=(m, b.shape[0]))
    lib = tk.compile(graph.Module.from_expr(graph.Function([x], graph.nn.matmul(x, graph.const(b)))), target_text)
    (strategy,) = lib.summary()["strategies"].values()
    return lib, strategy


def _sample(run, number: int) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) per call over `number` calls."""
    start, cpu = time.perf_counter(), time.process_time()
    for _ in range(number):
        run()
    return (time.perf_counter() - start) / number, (time.process_time() - cpu) / number


QUIESCE_SECONDS = 0.15
"""Pause before each multi-threaded sample: after a call, OpenBLAS's idle threads spin for up to 2^28
cycles (~0.1 s) and libgomp's for GOMP_SPINCOUNT, taking the cores the other side's threads need next.
Without it, at 2 threads both sides measured about their 1-thread speed (the 1024^3 GEMM: 222 GFLOP/s
interleaved vs 364 alone on the 2-core host)."""


def _pool_counts() -> dict[str, int]:
    """The cpu_llvm thread pool's region counts (thread_pool.pool_counts): pooled, alone, backoffs."""
    from tensorkiln_cpu_llvm import thread_pool
    return thread_pool.pool_counts()


def _pool_note(before: dict[str, int]) -> str:
    """Regions a row ran on the caller alone because the pool backed off from a loaded machine (if any): a
    2-thread ratio near the 1-thread one with many of them measured the back-off, not the GEMM."""
    after = _pool_counts()
    alone = after["alone"] - before["alone"]
    if not alone:
        return ""
    return (f"  [pool: {after['pooled'] - before['pooled']} regions pooled, {alone} alone after "
            f"{after['backoffs'] - before['backoffs']} back-off(s)]")


def measure(isa: str, sizes, threads_list, repeat: int, weights: str = "runtime") -> list[tuple]:
    import numpy as np
    from threadpoolctl import threadpool_info, threadpool_limits

    import tensorkiln as tk

    for info in threadpool_info():
        if info["user_api"] == "blas":
            print(f"[{isa}] numpy BLAS: {info['internal_api']} {info.get('version')} "
                  f"kernel={info.get('architecture')} ({os.path.basename(info['filepath'])}); "
                  f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
    rows = []
    rng = np.random.default_rng(0)
    for size in sizes:
        m, n, k = (int(x) for x in size.split("x"))
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        ours, theirs = np.empty((m, n), np.float32), np.empty((m, n), np.float32)
        if weights == "constant":
            lib, strategy = build_constant(b, m, TARGETS[isa])
            inputs = {"x": a}
            name, config, module = strategy["strategy"], strategy["config"], None
            ours[...] = lib.run(inputs)[0]

            def call():
                return lib.run(inputs)
        else:
            kernel, choice, module = build_best(m, n, k, TARGETS[isa])
            name, config = choice.name, dict(choice.config)

            def call():
                return kernel(a, b, ours)
            call()
        np.matmul(a, b, out=theirs)
        np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-3 * np.sqrt(k))
        flops = 2.0 * m * n * k
        for threads in threads_list:
            pool_before = _pool_counts()
            tk.runtime.set_num_threads(threads)
            if module is not None:
                module.loaded.set_num_threads(threads)   # this module for sure, whatever else is live
            with threadpool_limits(limits=threads, user_api="blas"):
                pause = QUIESCE_SECONDS if threads > 1 else 0.0
                np.matmul(a, b, out=theirs)
                time.sleep(pause)   # OpenBLAS's spinning threads would make our pool back off (thread_pool.c)
                call()
                once = min(_sample(call, 1)[0] for _ in range(3))
                number = max(1, int(0.02 / max(once, 1e-6)))   # samples of about 20 ms
                numpy_s, ours_s = [], []
                for _ in range(repeat):
                    time.sleep(pause)
                    numpy_s.append(_sample(lambda: np.matmul(a, b, out=theirs), number))
                    time.sleep(pause)
                    ours_s.append(_sample(call, number))
            t_numpy, t_ours = (statistics.median(w for w, _ in times) for times in (numpy_s, ours_s))
            cpu_numpy, cpu_ours = (statistics.median(c for _, c in times) for times in (numpy_s, ours_s))
            rows.append((isa, size, threads, flops / t_numpy / 1e9, flops / t_ours / 1e9, t_numpy / t_ours,
                         min(numpy_s)[0] / min(ours_s)[0], cpu_numpy / cpu_ours))
            print(f"[{isa}] {size:>16s} {threads} thr: numpy {rows[-1][3]:7.1f} GFLOP/s  tensorkiln "
                  f"{rows[-1][4]:7.1f} GFLOP/s  ratio {rows[-1][5]:5.2f}x (best-of {rows[-1][6]:5.2f}x, "
                  f"CPU time {rows[-1][7]:5.2f}x)  {name} {config}{_pool_note(pool_before)}",
                  flush=True)
    tk.runtime.set_num_threads(0)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--isa", default="native,avx2", help="comma list of native, avx2")
    parser.add_argument("--threads", default="1,2")
    parser.add_argument("--repeat", type=int, default=21)
    parser.add_argument("--sizes", default=",".join(SIZES), help="comma list of MxNxK")
    parser.add_argument("--weights", choices=("runtime", "constant"), default="runtime",
                        help="B an input of the call (the sweep), or a constant of the model (packed at compile time)")
    args = parser.parse_args()
    threads = [int(t) for t in args.threads.split(",")]
    sizes = args.sizes.split(",")
    if os.environ.get("TK_SWEEP_CHILD"):
        for row in measure(os.environ["TK_SWEEP_CHILD"], sizes, threads, args.repeat, args.weights):
            print("ROW\t" + "\t".join(str(x) for x in row), flush=True)
        return
    print(f"cores: {os.cpu_count()}; B: {args.weights}; load average before: {os.getloadavg()}")
    rows = []
    for isa in args.isa.split(","):
        for thread_count in threads:
            env = dict(os.environ, TK_SWEEP_CHILD=isa)
            if isa == "avx2":
                env["OPENBLAS_CORETYPE"] = "Haswell"
            command = [sys.executable, __file__, "--sizes", args.sizes, "--threads", str(thread_count),
                       "--repeat", str(args.repeat), "--weights", args.weights]
            child = subprocess.run(command, env=env, capture_output=True, text=True)
            for line in child.stdout.splitlines():
                if line.startswith("ROW\t"):
                    isa_, size, thr, *numbers = line.split("\t")[1:]
                    rows.append((isa_, size, int(thr), *(float(x) for x in numbers)))
                else:
                    print(line)
            if child.returncode:
                print(child.stderr[-4000:])
                raise SystemExit(f"the {isa} column ({thread_count} threads) failed")
    print(f"\nload average after: {os.getloadavg()}\n")
    print("| ISA | M x N x K | threads | numpy GFLOP/s | tensorkiln GFLOP/s | ratio (medians) | ratio (best-of) "
          "| ratio (CPU time) |")
    print("|---|---|---|---|---|---|---|---|")
    for isa, size, thr, g_numpy, g_ours, ratio, best, cpu in rows:
        print(f"| {isa} | {size} | {thr} | {g_numpy:.1f} | {g_ours:.1f} | {ratio:.2f}x | {best:.2f}x | {cpu:.2f}x |")
    worst = min(rows, key=lambda r: r[5])
    print(f"\nworst case: {worst[1]} ({worst[0]}, {worst[2]} thread(s)): {worst[5]:.2f}x numpy")


if __name__ == "__main__":
    main()
