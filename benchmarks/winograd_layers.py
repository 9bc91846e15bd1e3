"""benchmarks/winograd_layers.py: 3x3 stride-1 NHWC convs, direct against Winograd, kernel times in one run.

    python benchmarks/winograd_layers.py                          # resnet50's and densenet121's 3x3 convs
    python benchmarks/winograd_layers.py 56x64x64 7x512x512 --threads 2 --isa native,avx2

Each shape HxCxK is one conv (H x H output, C -> K channels, padding 1) with bias and relu, as
cpu_llvm fuses them, compiled twice: `-winograd=off` (the direct NHWC register tile) and the
default (`cpu_llvm_winograd` picks F(4x4) or F(2x2) by output size). Times are the kernel's alone
(tk.runtime.profiler, medians of alternating runs); the direct conv is the baseline, run in the
same process. The avx2 column compiles with -mcpu=haswell. Also printed: the largest difference
from the direct result, relative to its largest magnitude (F(4x4) rounds about 1e-5 apart).
"""
from __future__ import annotations

import argparse
import os
import statistics

import numpy as np

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.driver import fused_groups
from tensorkiln.runtime.profiler import profile

SHAPES = ("56x64x64", "28x128x128", "14x256x256", "7x512x512",          # resnet50
          "56x128x32", "28x128x32", "14x128x32", "7x128x32")            # densenet121
ISAS = {"native": "cpu_llvm", "avx2": "cpu_llvm -mcpu=haswell"}


def conv_model(height: int, in_channels: int, out_channels: int):
    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(1, height, height, in_channels))
    w = (rng.standard_normal((3, 3, in_channels, out_channels)) / np.sqrt(9 * in_channels)).astype("float32")
    b = rng.standard_normal(out_channels).astype("float32")
    conv = graph.nn.conv2d(x, graph.const(w), padding=(1, 1, 1, 1), data_layout="NHWC", kernel_layout="HWIO")
    return graph.nn.relu(graph.nn.bias_add(conv, graph.const(b), axis=3))


def winograd_tile(model, target: str):
    """m of the F(m x m, 3 x 3) the compile uses, or "-" where the conv stays direct."""
    groups, _ = fused_groups(model, target)
    return next((node.attrs.tile_size for group in groups for node in graph.post_order(group.op.body)
                 if getattr(getattr(node, "op", None), "name", "") == "nn.conv2d_winograd"), "-")


def kernel_ms(lib, inputs, repeat: int) -> float:
    return sum(row[3] for row in profile(lib, inputs, repeat=repeat).by_kernel()) * 1e3


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="*", default=list(SHAPES), help="HxCxK: output size, in and out channels")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--isa", default="native,avx2")
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds (each a profile of --repeat runs)")
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    tk.runtime.set_num_threads(args.threads)
    print(f"tensorkiln {tk.__version__}; {os.cpu_count()} CPUs, {args.threads} thread(s); kernel ms, medians")
    print(f"{'shape':<12} {'isa':<7} {'tile':>4} {'direct':>8} {'winograd':>9} {'speedup':>8} {'rel diff':>9}")
    for shape in args.shapes:
        height, in_channels, out_channels = (int(v) for v in shape.split("x"))
        model = conv_model(height, in_channels, out_channels)
        data = {"x": np.random.default_rng(1).standard_normal((1, height, height, in_channels)).astype("float32")}
        for isa in args.isa.split(","):
            direct = tk.compile(model, f"{ISAS[isa]} -winograd=off")
            winograd = tk.compile(model, ISAS[isa])
            tile = winograd_tile(model, ISAS[isa])
            reference, out = direct.run(data)[0], winograd.run(data)[0]
            difference = float(np.abs(out - reference).max() / np.abs(reference).max())
            times = {"direct": [], "winograd": []}
            for _ in range(args.rounds):
                times["direct"].append(kernel_ms(direct, data, args.repeat))
                times["winograd"].append(kernel_ms(winograd, data, args.repeat))
            d, w = statistics.median(times["direct"]), statistics.median(times["winograd"])
            print(f"{shape:<12} {isa:<7} {tile!s:>4} {d:8.3f} {w:9.3f} {d / w:7.2f}x {difference:9.1e}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
