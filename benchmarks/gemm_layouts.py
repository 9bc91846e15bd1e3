"""benchmarks/gemm_layouts.py: tensorkiln's best GEMM against numpy over random memory layouts of A, B and C.

    python benchmarks/gemm_layouts.py [--sizes 64x4096x1024,1024x1000x2048] [--isa native,avx2] [--threads 1]
                                      [--layouts 8] [--seed 1] [--repeat 5]

gemm_sweep.py times one layout per process: numpy's arrays, wherever its allocator put them. A GEMM whose rows
are a multiple of a cache way apart (B of N = 4096 floats: 16 KB) fills only some of L2's sets, and which
sets A, B and C share then depends on where each lies (in huge pages, the virtual address decides the set).
Measured on Zen 4 (L2 1 MB, 8 ways), AVX2 64x4096x1024 at 1 thread, one kernel read 0.85-1.03x numpy over
layouts, while numpy's own speed did not depend on them. An A/B of two versions of the kernel, each measured
on numpy's arrays in its own process, once picked the worse one: over layouts it lost 0.02-0.04x.

Each layout puts A, B and C in regions of their own (huge pages asked for with madvise) at random 64-byte
offsets, 16 bytes past the boundary as numpy's allocator leaves them. Per layout, numpy and tensorkiln run
interleaved on the same arrays (`--repeat` samples each, medians). The script prints each layout's ratio
(numpy's time over ours: > 1 is faster than numpy) and the geometric mean over layouts. The same `--seed`
gives the same offsets, so two checkouts can be compared layout by layout.

Each ISA column runs in its own process, as in gemm_sweep.py. The avx2 column sets OPENBLAS_CORETYPE=Haswell
in that process alone.
"""
import os
import sys

if __name__ == "__main__" and os.environ.get("TK_LAYOUTS_CHILD") is None:
    for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):   # the parent sets each child's BLAS environment
        os.environ.pop(_name, None)

import argparse  # noqa: E402
import math  # noqa: E402
import mmap  # noqa: E402
import random  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gemm_sweep import QUIESCE_SECONDS, TARGETS, _sample, build_best  # noqa: E402

HUGE_PAGE = 2 << 20
ALLOCATOR_OFFSET = 16
"""Bytes past a 64-byte boundary where numpy's allocator leaves a large array's data."""


def placed(shape: tuple[int, ...], offset: int, keep: list):
    """A float32 array of `shape` at `offset` bytes past the start of a fresh huge-page-aligned region."""
    import numpy as np

    nbytes = math.prod(shape) * 4
    region = mmap.mmap(-1, nbytes + offset + 2 * HUGE_PAGE)
    if hasattr(mmap, "MADV_HUGEPAGE"):
        region.madvise(mmap.MADV_HUGEPAGE)
    keep.append(region)
    raw = np.frombuffer(region, dtype=np.uint8)
    start = (-raw.ctypes.data) % HUGE_PAGE + offset
    return raw[start:start + nbytes].view(np.float32).reshape(shape)


def measure(isa: str, size: str, threads: int, layouts: int, seed: int, repeat: int) -> list[float]:
    """numpy's median time over tensorkiln's, one ratio per layout."""
    import numpy as np
    from threadpoolctl import threadpool_limits

    import tensorkiln as tk

    m, n, k = (int(x) for x in size.split("x"))
    rng = np.random.default_rng(0)
    a0, b0 = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    kernel, _, module = build_best(m, n, k, TARGETS[isa])
    module.loaded.set_num_threads(threads)
    tk.runtime.set_num_threads(threads)
    offsets = random.Random(seed)
    keep: list = []
    ratios = []
    pause = QUIESCE_SECONDS if threads > 1 else 0.0
    with threadpool_limits(limits=threads, user_api="blas"):
        for _ in range(layouts):
            a, b, c = (placed(shape, offsets.randrange(0, HUGE_PAGE, 64) + ALLOCATOR_OFFSET, keep)
                       for shape in ((m, k), (k, n), (m, n)))
            a[...], b[...] = a0, b0
            kernel(a, b, c)
            np.testing.assert_allclose(c, a0 @ b0, rtol=1e-3, atol=1e-3 * np.sqrt(k))
            number = max(1, int(0.02 / max(_sample(lambda: kernel(a, b, c), 1)[0], 1e-6)))
            ours, theirs = [], []
            for _ in range(repeat):
                time.sleep(pause)
                theirs.append(_sample(lambda: np.matmul(a, b, out=c), number)[0])
                time.sleep(pause)
                ours.append(_sample(lambda: kernel(a, b, c), number)[0])
            ratios.append(statistics.median(theirs) / statistics.median(ours))
    tk.runtime.set_num_threads(0)
    return ratios


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="64x4096x1024,1024x1000x2048", help="comma list of MxNxK")
    parser.add_argument("--isa", default="native,avx2", help="comma list of native, avx2")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--layouts", type=int, default=8)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if os.environ.get("TK_LAYOUTS_CHILD"):
        from threadpoolctl import threadpool_info
        for info in threadpool_info():
            if info["user_api"] == "blas":
                print(f"[{os.environ['TK_LAYOUTS_CHILD']}] numpy BLAS: {info['internal_api']} {info.get('version')} "
                      f"kernel={info.get('architecture')}; OPENBLAS_CORETYPE="
                      f"{os.environ.get('OPENBLAS_CORETYPE', '(unset)')}", flush=True)
        for size in args.sizes.split(","):
            ratios = measure(os.environ["TK_LAYOUTS_CHILD"], size, args.threads, args.layouts, args.seed, args.repeat)
            print("ROW\t" + size + "\t" + "\t".join(f"{r:.4f}" for r in ratios), flush=True)
        return
    print(f"{args.layouts} layouts (seed {args.seed}), {args.threads} thread(s), {args.repeat} samples each; "
          f"ratio = numpy's time / tensorkiln's (> 1: faster than numpy)")
    for isa in args.isa.split(","):
        env = dict(os.environ, TK_LAYOUTS_CHILD=isa, **({"OPENBLAS_CORETYPE": "Haswell"} if isa == "avx2" else {}))
        child = subprocess.run([sys.executable, __file__, *sys.argv[1:]], env=env, capture_output=True, text=True)
        if child.returncode:
            print(child.stderr[-4000:])
            raise SystemExit(f"the {isa} column failed")
        for line in child.stdout.splitlines():
            if not line.startswith("ROW\t"):
                print(line)
                continue
            size, *numbers = line.split("\t")[1:]
            ratios = [float(x) for x in numbers]
            geomean = math.exp(sum(map(math.log, ratios)) / len(ratios))
            print(f"[{isa}] {size:>16s}: geomean {geomean:.3f}x  min {min(ratios):.3f}x  max {max(ratios):.3f}x  "
                  f"layouts: {' '.join(f'{r:.2f}' for r in ratios)}")


if __name__ == "__main__":
    main()
