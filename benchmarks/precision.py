"""benchmarks/precision.py: float32 vs float16 / bfloat16 vs int8 latency and accuracy on cpu_llvm, one run.

    python benchmarks/precision.py [--models resnet50,squeezenet] [--precisions float32,float16,int8]
                                   [--calibration 32] [--held-out 20] [--method minmax] [--threads N]

For each light model zoo model (onnx/backend/test/data/light; its weights are all 0.02, which makes
every class score the same, so they are replaced by seeded random ones: tests/quantize/_models.py)
this quantizes to int8 on `--calibration` seeded random inputs and prints
`tensorkiln.quantize.precision_report`: per precision the median latency on cpu_llvm and its ratio
to float32, top-1 agreement and logits cosine on `--held-out` other inputs, and the worst int8 layers.
Numbers on a shared 2-core machine are noisy: read the ratios.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import tensorkiln as tk
from tensorkiln.quantize import QuantizeConfig, precision_report

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from tests.quantize._models import light_model_with_random_weights  # noqa: E402

DEFAULT_MODELS = ("resnet50", "squeezenet")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS))
    parser.add_argument("--precisions", default="float32,float16,int8")
    parser.add_argument("--calibration", type=int, default=32)
    parser.add_argument("--held-out", type=int, default=20)
    parser.add_argument("--method", default="minmax", choices=("minmax", "percentile", "entropy"))
    parser.add_argument("--activations", default="symmetric", choices=("symmetric", "asymmetric"))
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args(argv)
    tk.runtime.set_num_threads(args.threads)
    target = f"cpu_llvm -num_threads={args.threads}"
    print(f"tensorkiln {tk.__version__}; {os.cpu_count()} cores, {args.threads} threads; batch 1; "
          f"int8: {args.method} calibration on {args.calibration} inputs, {args.activations} activations")
    for name in [m.strip() for m in args.models.split(",") if m.strip()]:
        mod = tk.frontend.from_onnx(light_model_with_random_weights(name, seed=0))
        shape = mod.main.params[0].checked_type.shape
        rng = np.random.default_rng(0)
        calibration = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.calibration)]
        held_out = [rng.standard_normal(shape).astype(np.float32) for _ in range(args.held_out)]
        start = time.perf_counter()
        report = precision_report(mod, calibration, held_out, precisions=tuple(args.precisions.split(",")),
                                  target=target, repeat=args.repeat, layer_samples=2,
                                  config=QuantizeConfig(method=args.method, activations=args.activations,
                                                        target=target))
        print(f"\n== {name} ({time.perf_counter() - start:.0f} s to quantize, compile and measure)")
        print(report.render(), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
