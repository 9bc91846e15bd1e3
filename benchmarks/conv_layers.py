"""benchmarks/conv_layers.py MODEL [THREADS] [TARGET]: every distinct conv of a light model as a single
Conv + Relu layer, tensorkiln against onnxruntime's Conv in the same process (alternating runs, medians
of 15), with the strategy tensorkiln picked, its GFLOP/s and the max error against onnxruntime.

    python benchmarks/conv_layers.py shufflenet 1 "cpu_llvm -mcpu=haswell"

Rows are sorted by the time they lose (count x (tk - ort)); the last line sums over all convs. The
times include each side's per-run overhead (one kernel launch through the Python executor here).
"""
import os, sys, time, statistics, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import numpy as np, onnx
from onnx import helper, numpy_helper, shape_inference
import models as M
from ort_baseline import ort_session
import tensorkiln as tk
name = sys.argv[1]; threads = int(sys.argv[2]) if len(sys.argv) > 2 else 1
target = sys.argv[3] if len(sys.argv) > 3 else "cpu_llvm"
model, inputs = M.light_model(name)
model = shape_inference.infer_shapes(model)
shapes = {vi.name: [d.dim_value for d in vi.type.tensor_type.shape.dim] for vi in list(model.graph.value_info) + list(model.graph.input)}
inits = {t.name: t for t in model.graph.initializer}
configs = collections.Counter()
info = {}
for node in model.graph.node:
    if node.op_type != "Conv": continue
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    x = shapes[node.input[0]]
    class _W: dims = shapes[node.input[1]]
    w = _W
    key = (tuple(x), tuple(w.dims), attrs.get("group", 1), tuple(attrs.get("strides", [1, 1])), tuple(attrs.get("pads", [0]*4)), tuple(attrs.get("dilations", [1, 1])))
    configs[key] += 1
tk.runtime.set_num_threads(threads)
total_tk = total_ort = 0
rows = []
for key, count in configs.items():
    x, wd, g, st, pads, dil = key
    rng = np.random.default_rng(0)
    W = numpy_helper.from_array(rng.uniform(-1, 1, wd).astype("float32"), "w")
    B = numpy_helper.from_array(rng.uniform(-1, 1, wd[0]).astype("float32"), "b")
    node = helper.make_node("Conv", ["x", "w", "b"], ["c"], group=g, strides=list(st), pads=list(pads), dilations=list(dil), kernel_shape=list(wd[2:]))
    relu = helper.make_node("Relu", ["c"], ["y"])
    gr = helper.make_graph([node, relu], "c", [helper.make_tensor_value_info("x", 1, list(x))], [helper.make_tensor_value_info("y", 1, None)], [W, B])
    m = helper.make_model(gr, opset_imports=[helper.make_opsetid("", 13)])
    lib = tk.compile(m, target=target)
    strat = [v["strategy"] for v in lib.summary()["strategies"].values()]
    s = ort_session(m, threads)
    data = rng.uniform(-1, 1, x).astype("float32")
    feed = {"x": data}
    ref = s.run(None, feed)[0]; out = lib.run(feed)[0]
    err = float(np.max(np.abs(out - ref)))
    tt, ot = [], []
    for _ in range(3): lib.run(feed); s.run(None, feed)
    for _ in range(15):
        a = time.perf_counter(); s.run(None, feed); b = time.perf_counter(); lib.run(feed); c = time.perf_counter()
        ot.append(b - a); tt.append(c - b)
    t, o = statistics.median(tt) * 1e3, statistics.median(ot) * 1e3
    oh, ow = ref.shape[2], ref.shape[3]
    flops = 2 * ref.size * (wd[1] * wd[2] * wd[3])
    total_tk += t * count; total_ort += o * count
    rows.append((t * count - o * count, f"x{list(x)} w{list(wd)} g{g} s{st[0]} x{count}: tk {t:.3f} ort {o:.3f} ratio {t/o:.2f} tkGF {flops/t/1e6:.1f} err {err:.1e} {','.join(strat)}"))
for _, r in sorted(rows, reverse=True): print(r)
print(f"total conv tk {total_tk:.2f} ms ort {total_ort:.2f} ms")
