"""examples/main_job.py: the README's main job — compile a bundled ONNX model, run it, check it.

Compiles models/small_cnn.onnx for a target (default cpu_llvm), exports and reloads the
package, runs it on a fixed random batch and compares with the numpy reference
interpreter and, when installed, onnxruntime. Exit status 0 only when both match.
    python3 examples/main_job.py [--target opencl] [--batch 4]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

import tensorkiln as tk

MODEL = Path(__file__).parent / "models" / "small_cnn.onnx"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--batch", type=int, default=4)
    args = parser.parse_args()

    shape = {"input": (args.batch, 3, 32, 32)}
    mod = tk.frontend.from_onnx(str(MODEL), shape=shape)
    start = time.perf_counter()
    lib = tk.compile(mod, target=args.target)
    print(f"compiled {MODEL.name} for {args.target} in {time.perf_counter() - start:.2f} s")
    summary = lib.summary()
    print(f"  {summary['ops']} graph ops -> {summary['kernels']} kernels; planned activations "
          f"{summary['peak_activation_bytes']} B (no reuse {summary['unplanned_activation_bytes']} B)")
    with tempfile.TemporaryDirectory() as folder:
        package = Path(folder) / "small_cnn.tkpkg"
        lib.export(package)
        lib = tk.runtime.load(package)
        print(f"  exported and reloaded {package.name} ({package.stat().st_size} bytes)")

    x = np.random.default_rng(0).standard_normal(shape["input"]).astype(np.float32)
    out = lib(x)
    times = []
    for _ in range(20):
        begin = time.perf_counter()
        lib(x)
        times.append(time.perf_counter() - begin)
    print(f"  output {out.shape}, median latency {1e3 * float(np.median(times)):.3f} ms")

    ok = True
    reference = tk.graph.evaluate(mod, {"input": x})
    error = float(np.max(np.abs(out - reference)))
    match = np.allclose(out, reference, rtol=1e-4, atol=1e-5)
    print(f"  vs numpy reference interpreter: max abs error {error:.2e} -> {'MATCH' if match else 'MISMATCH'}")
    ok &= match
    try:
        import onnxruntime as ort
    except ImportError:
        print("  onnxruntime not installed: skipped that comparison")
    else:
        session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
        expected = session.run(None, {"input": x})[0]
        error = float(np.max(np.abs(out - expected)))
        match = np.allclose(out, expected, rtol=1e-4, atol=1e-5)
        print(f"  vs onnxruntime: max abs error {error:.2e} -> {'MATCH' if match else 'MISMATCH'}")
        ok &= match
    print("main job:", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
