"""benchmarks/fpga_estimates.py: simulated cycles at the target clock and estimated resources of models on fpga_hls.

    python benchmarks/fpga_estimates.py                     # the light ONNX models of the test suite
    python benchmarks/fpga_estimates.py --check squeezenet  # also run C-simulation against the stored output

Cycles are the sum of each kernel launch's estimated BestLatency (kernels run one after another);
resources add up over distinct kernels (one compute unit each). See tensorkiln_fpga_hls/model_estimate.py.
"""
from __future__ import annotations

import argparse
import os
import time

import numpy as np
import onnx
from onnx import numpy_helper

import tensorkiln as tk
from tensorkiln.frontend import from_onnx
from tensorkiln_fpga_hls.model_estimate import model_estimate

LIGHT = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
MODELS = ["squeezenet", "resnet50", "bvlc_alexnet", "densenet121", "inception_v1", "inception_v2", "shufflenet",
          "vgg19", "zfnet512"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=MODELS)
    parser.add_argument("--target", default="fpga_hls", help="target string, e.g. 'fpga_hls -clock_mhz=250'")
    parser.add_argument("--check", action="store_true", help="run C-simulation and compare with the stored output")
    args = parser.parse_args()
    header = (f"{'model':14s} {'kernels':>7s} {'launches':>8s} {'cycles':>12s} {'ms@clk':>9s} {'DSP':>7s} "
              f"{'LUT':>9s} {'FF':>9s} {'BRAM_18K':>8s}  {'compile s':>9s}" + ("  csim max|err|" if args.check else ""))
    print(header)
    for name in args.models:
        mod = from_onnx(os.path.join(LIGHT, f"light_{name}.onnx"))
        start = time.perf_counter()
        lib = tk.compile(mod, target=args.target)
        seconds = time.perf_counter() - start
        e = model_estimate(lib)
        line = (f"{name:14s} {e['kernels']:7d} {e['launches']:8d} {e['cycles']:12d} {e['seconds'] * 1e3:9.3f} "
                f"{e['DSP']:7d} {e['LUT']:9d} {e['FF']:9d} {e['BRAM_18K']:8d}  {seconds:9.1f}")
        if args.check:
            (param,) = mod.main.params
            size = int(np.prod(param.shape))
            data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
            expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(LIGHT, f"light_{name}_output_0.pb")))
            line += f"  {float(np.abs(lib(data) - expected).max()):.2e}"
        print(line + (f"   (not estimated: {e['not_estimated']})" if e["not_estimated"] else ""), flush=True)
    print(f"clock: {e['clock_mhz']:.0f} MHz; cycles = sum of kernel BestLatency over launches; resources = sum over "
          "distinct kernels")


if __name__ == "__main__":
    main()
