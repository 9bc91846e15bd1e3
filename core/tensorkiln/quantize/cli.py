"""quantize/cli.py: `tensorkiln quantize`, registered by tensorkiln/cli.py.

    tensorkiln quantize model.onnx -o model.int8.tkpkg --calibration 32 --held-out 200 --method entropy
    tensorkiln quantize model.onnx --calibration-dir calib/ --report report.json --precisions float32,float16,int8

Calibrates on the .npy files of --calibration-dir (one sample per file; a file with a
leading batch axis of the model's batch size is one sample), else on N seeded standard
normal inputs; writes the int8 package, prints the precision report and writes it as JSON.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

__all__ = ["add_subcommands", "random_inputs"]


def add_subcommands(commands: argparse._SubParsersAction) -> None:
    cmd = commands.add_parser("quantize", help="int8 post-training quantization into a .tkpkg, with a precision report",
                              description="Calibrate activation ranges, quantize conv2d / dense to int8 (per-channel "
                                          "weights, per-tensor activations), compile, and compare every precision "
                                          "with float32.")
    cmd.add_argument("model", help="path to an .onnx file")
    cmd.add_argument("-o", "--output", help="package path (default: MODEL.int8.tkpkg)")
    cmd.add_argument("--target", default="cpu_llvm")
    cmd.add_argument("--method", default="minmax", choices=("minmax", "percentile", "entropy"))
    cmd.add_argument("--activations", default="symmetric", choices=("symmetric", "asymmetric"))
    cmd.add_argument("--percentile", type=float, default=99.99)
    cmd.add_argument("--calibration", type=int, default=32, help="random calibration inputs (without --calibration-dir)")
    cmd.add_argument("--calibration-dir", help="a folder of .npy calibration inputs")
    cmd.add_argument("--held-out", type=int, default=50, help="random held-out inputs for the report (0: no report)")
    cmd.add_argument("--precisions", default="float32,float16,int8", help="comma-separated, of float32, float16, "
                                                                         "bfloat16, int8")
    cmd.add_argument("--report", metavar="FILE.json", help="also write the report as JSON")
    cmd.add_argument("--seed", type=int, default=0)
    cmd.set_defaults(run=_cmd_quantize)


def random_inputs(mod, count: int, seed: int) -> list[dict[str, np.ndarray]]:
    """`count` seeded standard-normal samples for the float inputs of `mod` (zeros for integer ones)."""
    from ..ir.dtypes import to_numpy

    rng = np.random.default_rng(seed)
    samples = []
    for _ in range(count):
        sample = {}
        for param in mod.main.params:
            shape, dtype = param.checked_type.shape, to_numpy(param.checked_type.dtype)
            sample[param.name] = (rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                                  else np.zeros(shape, dtype))
        samples.append(sample)
    return samples


def _calibration(args, mod) -> list:
    if not args.calibration_dir:
        return random_inputs(mod, args.calibration, args.seed)
    files = sorted(Path(args.calibration_dir).glob("*.npy"))
    if not files:
        raise SystemExit(f"error: no .npy files in {args.calibration_dir}")
    return [np.load(f) for f in files]


def _cmd_quantize(args) -> int:
    from ..compiler import compile as compile_model
    from ..compiler.driver import as_module
    from .realize import QuantizeConfig, quantize
    from .report import precision_report

    mod = as_module(args.model)
    config = QuantizeConfig(method=args.method, activations=args.activations, percentile=args.percentile,
                            target=args.target)
    quantized = quantize(mod, _calibration(args, mod), config)
    lib = compile_model(quantized.module, args.target)
    output = args.output or str(Path(args.model).with_suffix(".int8.tkpkg"))
    lib.export(output)
    print(f"quantized {len(quantized.pairs)} layers to int8 ({args.method}, {args.activations} activations); "
          f"wrote {output}")
    if args.held_out > 0:
        held_out = random_inputs(mod, args.held_out, args.seed + 1)
        report = precision_report(mod, [], held_out, precisions=tuple(args.precisions.split(",")),
                                  target=args.target, quantized=quantized)
        print(report.render())
        if args.report:
            Path(args.report).write_text(json.dumps(report.to_json(), indent=2))
            print(f"wrote {args.report}")
    return 0
