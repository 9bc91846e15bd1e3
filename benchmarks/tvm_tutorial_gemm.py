"""benchmarks/tvm_tutorial_gemm.py: TVM's own run of its classic GEMM tutorial schedule, beside numpy.

    python -m venv /tmp/tvmenv && /tmp/tvmenv/bin/pip install apache-tvm==0.27.0.post1 numpy
    /tmp/tvmenv/bin/python benchmarks/tvm_tutorial_gemm.py [--size 1024] [--avx2] [--threads 1]

The reference for the "tutorial" row of benchmarks/gemm.py (the same schedule in tensorkiln te): the
last step ("Parallel") of "How to optimize GEMM on CPU", written in TVM 0.27's TensorIR (te and
s_tir.Schedule): B packed into 32-wide panels, 32x32 blocks of C with a cache_write accumulator
computed at the block, k split by 4 and unrolled, the block's columns vectorized, its rows and the
packing parallel. TVM is not a tensorkiln dependency (it is installed in its own virtual
environment); numpy runs in the same process, OpenBLAS on its own kernel choice (--avx2: Haswell,
and TVM built for -mcpu=haswell). Prints GFLOP/s of both and their ratio, medians of interleaved runs.

Measured on the 2-core AMD Zen 5 host (AVX-512, L1d 48 KB, 12 ways), 1 thread, 1024^3: TVM 0.55-0.56x
numpy (114-120 GFLOP/s) with AVX-512 and 0.85x with -mcpu=haswell; tensorkiln's row in gemm.py
reads 0.54-0.56x and 0.84-0.87x. The schedule's 32 rows of A, 4 KB apart, share one L1 set on
this host whoever compiles it.
"""
import os
import sys

for _name in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE"):
    os.environ.pop(_name, None)
if "--avx2" in sys.argv:
    os.environ["OPENBLAS_CORETYPE"] = "Haswell"

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402


def tutorial_module(size: int, target, bn: int = 32, k_factor: int = 4):
    import tvm
    from tvm import s_tir, te, tirx

    a = te.placeholder((size, size), name="A")
    b = te.placeholder((size, size), name="B")
    k = te.reduce_axis((0, size), "k")
    packed = te.compute((size // bn, size, bn), lambda x, y, z: b[y, x * bn + z], name="packedB")
    c = te.compute((size, size), lambda x, y: te.sum(a[x, k] * packed[y // bn, k, tirx.indexmod(y, bn)], axis=k),
                   name="C")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c]))
    block = sch.get_sblock("C")
    write_back = sch.cache_write(block, 0, "global")
    rows, columns = sch.get_loops(write_back)
    mo, mi = sch.split(rows, [None, bn])
    no, ni = sch.split(columns, [None, bn])
    sch.reorder(mo, no, mi, ni)
    sch.parallel(mo)
    sch.compute_at(block, no)
    ci, cj, ck = sch.get_loops(block)[-3:]
    ko, ki = sch.split(ck, [None, k_factor])
    sch.reorder(ko, ci, ki, cj)
    sch.vectorize(cj)
    sch.unroll(ki)
    sch.decompose_reduction(block, ko)
    x, _, z = sch.get_loops(sch.get_sblock("packedB"))
    sch.vectorize(z)
    sch.parallel(x)
    return tvm.compile(sch.mod, target=target)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--avx2", action="store_true", help="TVM for -mcpu=haswell, OpenBLAS on its Haswell kernel")
    args = parser.parse_args()
    os.environ["TVM_NUM_THREADS"] = str(args.threads)
    import tvm
    from threadpoolctl import threadpool_limits

    from tvm.target import codegen

    cpu = "haswell" if args.avx2 else codegen.llvm_get_system_cpu()   # the host CPU, as tensorkiln's native column
    target = tvm.target.Target({"kind": "llvm", "mcpu": cpu})
    lib = tutorial_module(args.size, target)
    device = tvm.cpu()
    rng = np.random.default_rng(0)
    a = rng.random((args.size, args.size), dtype=np.float32)
    b = rng.random((args.size, args.size), dtype=np.float32)
    ta, tb = tvm.runtime.tensor(a, device), tvm.runtime.tensor(b, device)
    tc = tvm.runtime.tensor(np.zeros((args.size, args.size), np.float32), device)
    lib(ta, tb, tc)
    np.testing.assert_allclose(tc.numpy(), a @ b, rtol=1e-3)

    def seconds(run) -> float:
        start = time.perf_counter()
        for _ in range(5):
            run()
        return (time.perf_counter() - start) / 5

    tvm_times, numpy_times = [], []
    with threadpool_limits(args.threads):
        for _ in range(args.repeat):
            tvm_times.append(seconds(lambda: lib(ta, tb, tc)))
            numpy_times.append(seconds(lambda: a @ b))
    flops = 2 * args.size ** 3
    tvm_s, numpy_s = statistics.median(tvm_times), statistics.median(numpy_times)
    print(f"TVM {tvm.__version__} tutorial schedule, {args.size}^3, {args.threads} thread(s), target {target}: "
          f"{flops / tvm_s / 1e9:.1f} GFLOP/s; numpy {flops / numpy_s / 1e9:.1f} GFLOP/s; "
          f"TVM / numpy {numpy_s / tvm_s:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
