"""benchmarks/conv2d.py: GFLOP/s of conv2d + bias + relu groups (resnet50's layers) on cpu_llvm.

    python benchmarks/conv2d.py [--threads 2] [--repeat 7] [--layers all|0,3,5]

Rows: each layer built as `tk.compile` builds it on cpu_llvm (the implementation its strategies
choose, tensorkiln.compiler.strategy, with default knobs: strategies/anchors.py's conv schedules,
or the GEMM micro-kernel for 1x1 NHWC convs) with NCHW data / OIHW weights (what opt levels
below 3 run) and with NHWC data / HWIO weights (what alter_layout makes for a target that
prefers NHWC, as cpu_llvm does), and onnxruntime's Conv (+ Relu) on the same NCHW shape with
the same intra-op thread count when onnxruntime is installed. Medians of `repeat` timings, the
three variants interleaved; ratios against onnxruntime; the last column names the strategies.
"""
import argparse
import statistics
import time

import numpy as np

import tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln.compiler.strategy import select
from tensorkiln.graph import get_op
from tensorkiln.graph.ops.nn import BiasAddAttrs, Conv2DAttrs
from tensorkiln.graph.types import TensorType

# (name, data NCHW, weight OIHW, stride, padding): resnet50's distinct convolutions, batch 1
LAYERS = [
    ("conv1 7x7/2", (1, 3, 224, 224), (64, 3, 7, 7), 2, 3),
    ("res2 3x3", (1, 64, 56, 56), (64, 64, 3, 3), 1, 1),
    ("res2 1x1 expand", (1, 64, 56, 56), (256, 64, 1, 1), 1, 0),
    ("res3 1x1/2 down", (1, 256, 56, 56), (512, 256, 1, 1), 2, 0),
    ("res3 3x3/2", (1, 128, 56, 56), (128, 128, 3, 3), 2, 1),
    ("res4 3x3", (1, 256, 14, 14), (256, 256, 3, 3), 1, 1),
    ("res5 1x1/2 down", (1, 1024, 14, 14), (2048, 1024, 1, 1), 2, 0),
    ("res5 3x3", (1, 512, 7, 7), (512, 512, 3, 3), 1, 1),
]


def _permute(array, logical, layout):
    return np.ascontiguousarray(array.transpose([logical.index(axis) for axis in layout]))


def build_group(data_shape, weight_shape, stride, padding, data_layout, kernel_layout):
    """(kernel, arrays, output array, strategy name) of relu(conv2d + bias) in the given layouts."""
    attrs = Conv2DAttrs(strides=(stride, stride), padding=(padding,) * 4, data_layout=data_layout,
                        kernel_layout=kernel_layout)
    op = get_op("nn.conv2d")
    data_type = TensorType(tuple(data_shape[("NCHW").index(a)] for a in data_layout), "float32")
    weight_type = TensorType(tuple(weight_shape[("OIHW").index(a)] for a in kernel_layout), "float32")
    out_type = op.type_rule((data_type, weight_type), attrs)
    target = tk.target("cpu_llvm")
    x = te.placeholder(data_type.shape, "float32", name="x")
    w = te.placeholder(weight_type.shape, "float32", name="w")
    b = te.placeholder((weight_shape[0],), "float32", name="b")

    def epilogue(conv):
        biased = get_op("nn.bias_add").compute([conv, b], BiasAddAttrs(axis=data_layout.index("C")), out_type)
        return get_op("nn.relu").compute([biased], None, out_type)

    # as compiler/lower_groups.py does: select with the ops' own computes, then rebuild the conv with the
    # chosen implementation's compute when it has one
    conv_call = graph.call("nn.conv2d", graph.var("x", shape=data_type.shape), graph.var("w", shape=weight_type.shape),
                           **{name: getattr(attrs, name) for name in ("strides", "padding", "data_layout",
                                                                      "kernel_layout")})
    bias_call = graph.nn.bias_add(conv_call, graph.var("b", shape=(weight_shape[0],)), axis=data_layout.index("C"))
    out = epilogue(op.compute([x, w], attrs, out_type))
    choice = select([conv_call, bias_call, graph.nn.relu(bias_call)], [out], target)
    if choice.implementation is not None and choice.implementation.compute is not None:
        out = epilogue(choice.implementation.compute([x, w], attrs, out_type, target, dict(choice.config)))
    kernel = tk.build(choice.schedule([out], target), [x, w, b, out], target=target, name="conv")
    rng = np.random.default_rng(0)
    data = rng.uniform(-1, 1, data_shape).astype("float32")
    weight = rng.uniform(-1, 1, weight_shape).astype("float32")
    bias = rng.uniform(-1, 1, weight_shape[0]).astype("float32")
    arrays = [_permute(data, "NCHW", data_layout), _permute(weight, "OIHW", kernel_layout), bias]
    return kernel, arrays, np.zeros(out_type.shape, "float32"), choice.name


def onnxruntime_conv(data_shape, weight_shape, stride, padding, threads):
    """A callable running Conv + Relu in onnxruntime, or None without onnxruntime."""
    try:
        import onnx
        import onnxruntime  # noqa: F401  (None without it)
        from onnx import helper, numpy_helper

        from ort_baseline import ort_session
    except ImportError:
        return None
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.uniform(-1, 1, weight_shape).astype("float32"), "w")
    bias = numpy_helper.from_array(rng.uniform(-1, 1, weight_shape[0]).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[stride] * 2, pads=[padding] * 4,
                              kernel_shape=list(weight_shape[2:])),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(nodes, "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, data_shape)],
                              [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    session = ort_session(model, threads)
    data = rng.uniform(-1, 1, data_shape).astype("float32")
    return lambda: session.run(None, {"x": data})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=0, help="threads (0: all cores)")
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--layers", default="all", help="comma-separated layer indices, or all")
    args = parser.parse_args()
    import os
    threads = args.threads or os.cpu_count() or 1
    tk.runtime.set_num_threads(threads)
    chosen = LAYERS if args.layers == "all" else [LAYERS[int(i)] for i in args.layers.split(",")]
    print(f"threads={threads}; GFLOP/s (ms); ratio = time / onnxruntime time")
    print(f"{'layer':18} {'NCHW/OIHW':>18} {'NHWC/HWIO':>18} {'onnxruntime':>18}  NCHW/ort NHWC/ort  strategies")
    for name, data_shape, weight_shape, stride, padding in chosen:
        runs, strategies = {}, []
        for layouts in (("NCHW", "OIHW"), ("NHWC", "HWIO")):
            kernel, arrays, out, strategy = build_group(data_shape, weight_shape, stride, padding, *layouts)
            runs[layouts[0]] = lambda kernel=kernel, arrays=arrays, out=out: kernel(*arrays, out)
            strategies.append(strategy)
        ort = onnxruntime_conv(data_shape, weight_shape, stride, padding, threads)
        if ort is not None:
            runs["ort"] = ort
        times = {key: [] for key in runs}
        for fn in runs.values():
            fn()
        for _ in range(args.repeat):
            for key, fn in runs.items():
                start = time.perf_counter()
                fn()
                times[key].append(time.perf_counter() - start)
        out_h = (data_shape[2] + 2 * padding - weight_shape[2]) // stride + 1
        out_w = (data_shape[3] + 2 * padding - weight_shape[3]) // stride + 1
        flops = 2 * out_h * out_w * int(np.prod(weight_shape))
        median = {key: statistics.median(values) for key, values in times.items()}
        cells = [f"{flops / median[k] / 1e9:7.1f} ({median[k] * 1e3:6.2f})" if k in median else f"{'-':>18}"
                 for k in ("NCHW", "NHWC", "ort")]
        ratios = (f"{median['NCHW'] / median['ort']:8.2f} {median['NHWC'] / median['ort']:8.2f}"
                  if "ort" in median else "")
        print(f"{name:18} {cells[0]:>18} {cells[1]:>18} {cells[2]:>18}  {ratios}  {' / '.join(strategies)}",
              flush=True)


if __name__ == "__main__":
    main()
