"""benchmarks/layers_vs_ort.py: where a model's time goes, convolution by convolution, beside onnxruntime's own profile.

    python benchmarks/layers_vs_ort.py resnet50 [--threads 1] [--target "cpu_llvm -mcpu=haswell"] [--repeat 15]
    python benchmarks/layers_vs_ort.py depthwise_cnn         # or another real-world graph of models.py

tensorkiln's per-kernel profile (tk.runtime.profiler, the plan run step by step) and onnxruntime's
per-node profile (SessionOptions.enable_profiling) of the same model, in one process. The two
fuse differently and name nothing alike, so convolutions are paired by what they compute: input
size and channels, output size and channels, kernel size (a fused bias, residual or relu rides on
the conv's row on both sides; tensorkiln's Winograd convs count as convs). Rows are sorted by the
time tensorkiln loses (its total minus onnxruntime's, all layers of that shape); the last lines
give each side's conv total and its time in everything else, by op. A 1x1 conv that cpu_llvm
runs as a matrix product (cpu_llvm_conv1x1_as_matmul, or a dense after a flatten) is counted
under nn.matmul there, and its onnxruntime row shows "0/1" layers on tensorkiln's side.

This is how the NHWC conv's loop order was found (strategies/anchors.nhwc_loop_order): resnet50's
1x1 convs lost 1.2-1.6x each while its Winograd 3x3 convs won 0.5-0.6x. Profiles cost time on both
sides (onnxruntime's a few percent): compare rows with each other, and whole-model latency with
benchmarks/models.py.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import tensorkiln as tk  # noqa: E402
import real_graphs  # noqa: E402
from models import light_model  # noqa: E402
from ort_baseline import ort_session  # noqa: E402
from tensorkiln.runtime.profiler import profile  # noqa: E402

ConvKey = tuple   # (input size, input channels, output size, output channels, kernel size)


def tensorkiln_convs(lib, inputs, repeat: int) -> tuple[dict, dict]:
    """({ConvKey: [ms of each launch]}, {other kernel's first op: total ms}) from tensorkiln's profile."""
    plan = lib.executor.plan
    convs: dict = collections.defaultdict(list)
    others: dict = collections.defaultdict(float)
    for step in profile(lib, inputs, repeat=repeat).steps:
        kernel = plan.steps[step.index]
        if not any(op in ("nn.conv2d", "nn.conv2d_winograd") for op in kernel.ops):
            others[kernel.ops[0] if kernel.ops else kernel.kernel] += step.seconds * 1e3
            continue
        data = plan.values[kernel.inputs[0]].shape
        weight = plan.values[kernel.inputs[1]].shape
        out = plan.values[kernel.outputs[0]].shape
        nchw = _is_nchw(weight, out)
        if nchw:   # a conv alter_layout left NCHW (shufflenet's): rows read NHWC, its weight OIHW
            data, out, weight = _nhwc(data), _nhwc(out), (*weight[2:], weight[1], weight[0])
        # a Winograd weight is (a, a, K/nb, C, nb): its tile, not the 3x3 kernel, comes first
        size = 3 if "nn.conv2d_winograd" in kernel.ops else _kernel_size(weight, out[3])
        depthwise = len(weight) == 4 and weight[2] == 1 and weight[3] == out[3] == data[3] > 1   # HWIO, I = 1
        convs[(data[1], data[3], out[1], out[3], f"{size}{'dw' if depthwise else ''}")].append(step.seconds * 1e3)
    return convs, others


def _is_nchw(weight: tuple, out: tuple) -> bool:
    """Whether a conv runs NCHW (weight OIHW) rather than NHWC (weight HWIO, or a packed 5-D layout): its
    kernel sizes, small and equal, come last in OIHW and first in HWIO, next to the output channels."""
    def small_pair(a: int, b: int) -> bool:
        return a == b <= MAX_KERNEL_SIZE

    if len(weight) != 4 or len(out) != 4:
        return False
    oihw = small_pair(weight[2], weight[3]) and weight[0] == out[1]
    hwio = small_pair(weight[0], weight[1]) and weight[3] == out[3]
    return oihw and not hwio


MAX_KERNEL_SIZE = 11
"""The largest conv kernel `_is_nchw` expects (alexnet's first layer)."""


def _nhwc(shape: tuple) -> tuple:
    n, c, h, w = shape
    return (n, h, w, c)


def _kernel_size(weight: tuple, out_channels: int) -> int:
    """The kernel's height from a weight in HWIO (h, w, C/g, K), OHWI{n}o (K/n, h, w, C, n) or OIHW."""
    if len(weight) == 5:
        return int(weight[1])
    return int(weight[0]) if weight[3] == out_channels else int(weight[2])


def onnxruntime_convs(model, inputs, threads: int, repeat: int) -> tuple[dict, dict]:
    """The same from onnxruntime's profile (median of each node over `repeat` runs)."""
    session = ort_session(model, threads, profiling=True)
    warmup = 2
    for _ in range(warmup + repeat):
        session.run(None, inputs)
    path = session.end_profiling()
    with open(path) as handle:
        events = json.load(handle)
    os.remove(path)
    times: dict = collections.defaultdict(list)
    nodes: dict = {}
    for event in events:
        if event.get("cat") == "Node" and event["name"].endswith("_kernel_time"):
            times[event["name"]].append(event["dur"] / 1e3)
            nodes[event["name"]] = event["args"]
    convs: dict = collections.defaultdict(list)
    others: dict = collections.defaultdict(float)
    for name, durations in times.items():
        args, ms = nodes[name], statistics.median(durations[warmup:] or durations)
        if args.get("op_name") not in ("Conv", "FusedConv"):
            others[args.get("op_name", name)] += ms
            continue
        data, weight = (list(shape.values())[0] for shape in args["input_type_shape"][:2])
        out = list(args["output_type_shape"][0].values())[0]
        depthwise = weight[1] == 1 and weight[0] == data[1] == out[1] > 1   # OIHW with C/g = 1
        convs[(data[2], data[1], out[2], out[1], f"{weight[2]}{'dw' if depthwise else ''}")].append(ms)
    return convs, others


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help="a light model (resnet50, squeezenet, densenet121, inception_v1, ...) or a "
                                      f"real-world graph of benchmarks/models.py ({', '.join(real_graphs.NAMES)})")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--target", default="cpu_llvm")
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args(argv)

    if args.model in real_graphs.NAMES:
        _, model, inputs = real_graphs.build(args.model)
    else:
        model, inputs = light_model(args.model)
    lib = tk.compile(model, target=args.target)
    tk.runtime.set_num_threads(args.threads)
    ours, our_others = tensorkiln_convs(lib, inputs, args.repeat)
    theirs, their_others = onnxruntime_convs(model, inputs, args.threads, args.repeat)

    print(f"{args.model}, {args.threads} thread(s), {args.target}; ms per model run, summed over the layers of each shape")
    print(f"{'input':>12} {'output':>12} {'k':>3} {'layers':>7} {'tensorkiln':>11} {'onnxruntime':>12} {'ratio':>6}")
    rows = []
    for key in set(ours) | set(theirs):
        ms, reference = sum(ours.get(key, ())), sum(theirs.get(key, ()))
        rows.append((ms - reference, key, len(ours.get(key, ())), len(theirs.get(key, ())), ms, reference))
    for lost, (size, channels, out_size, out_channels, kernel), n, m, ms, reference in sorted(rows, reverse=True):
        ratio = f"{ms / reference:6.2f}" if reference else "     -"
        print(f"{size:>4}x{size:<3}x{channels:<4} {out_size:>4}x{out_size:<3}x{out_channels:<4} {kernel:>3} "
              f"{n:>3}/{m:<3} {ms:11.3f} {reference:12.3f} {ratio}")
    conv_ms, conv_reference = sum(r[4] for r in rows), sum(r[5] for r in rows)
    if conv_reference:
        print(f"convolutions: tensorkiln {conv_ms:.2f} ms, onnxruntime {conv_reference:.2f} ms "
              f"({conv_ms / conv_reference:.2f}x)")
    for side, others in (("tensorkiln", our_others), ("onnxruntime", their_others)):
        listed = ", ".join(f"{op} {ms:.2f}" for op, ms in sorted(others.items(), key=lambda kv: -kv[1])[:8])
        print(f"everything else, {side}: {sum(others.values()):.2f} ms ({listed})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
