"""A GEMM call (sgemm.py) run in place inside a whole-plan entry's concurrent level must not deadlock.

At one thread per kernel on two or more cores, the native entry runs the steps of a concurrent level
on a libgomp team; a GEMM that packs B then met "its" team at a GOMP_barrier although it ran in place
on one thread of the entry's team, whose other thread met it at a different barrier: squeezenet (its
fire modules' 1x1 convs as GEMMs) hung at the first run. The model runs in a child process with a time
limit, so a regression fails instead of hanging the suite.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

_FIRE = textwrap.dedent("""
    import numpy as np, onnx, onnxruntime as ort, tensorkiln as tk
    from onnx import helper, numpy_helper
    rng = np.random.default_rng(0)
    def conv(name, x, cin, cout, k):
        w = numpy_helper.from_array(rng.uniform(-0.5, 0.5, (cout, cin, k, k)).astype("float32"), name + "_w")
        b = numpy_helper.from_array(rng.uniform(-0.5, 0.5, cout).astype("float32"), name + "_b")
        node = helper.make_node("Conv", [x, w.name, b.name], [name], pads=[k // 2] * 4)
        return [node, helper.make_node("Relu", [name], [name + "_r"])], [w, b]
    nodes, inits = [], []
    for name, x, cin, cout, k in (("s", "x", 64, 16, 1), ("e1", "s_r", 16, 64, 1), ("e3", "s_r", 16, 64, 3),
                                  ("f", "y0", 128, 32, 1), ("g1", "f_r", 32, 128, 1), ("g3", "f_r", 32, 128, 1)):
        n, i = conv(name, x, cin, cout, k)
        nodes += n
        inits += i
        if name == "e3":
            nodes.append(helper.make_node("Concat", ["e1_r", "e3_r"], ["y0"], axis=1))
    nodes.append(helper.make_node("Concat", ["g1_r", "g3_r"], ["y"], axis=1))
    graph = helper.make_graph(nodes, "fire", [helper.make_tensor_value_info("x", 1, [1, 64, 55, 55])],
                              [helper.make_tensor_value_info("y", 1, None)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    x = rng.uniform(-1, 1, (1, 64, 55, 55)).astype("float32")
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    # NCHW kept (alter_layout may find NHWC pays off here), so the 1x1 convs are GEMM calls
    with tk.passes.PassContext(opt_level=3, config={"alter_layout": {"nn.conv2d": "NCHW"}}):
        lib = tk.compile(model, target="cpu_llvm")
    tk.runtime.set_num_threads(1)
    assert lib.summary()["executor"].startswith("native"), lib.summary()["executor"]
    gemms = [k for k, v in lib.summary()["strategies"].items() if v["strategy"] == "cpu_llvm.matmul_ukernel"]
    assert len(gemms) >= 4, lib.summary()["strategies"]
    for _ in range(20):
        np.testing.assert_allclose(lib.run({"x": x})[0], expected, rtol=1e-4, atol=1e-4)
    print("ok")
""")


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="concurrent levels overlap only with two or more cores")
def test_gemm_in_a_concurrent_level_finishes():
    try:
        result = subprocess.run([sys.executable, "-c", _FIRE], capture_output=True, text=True, timeout=120,
                                encoding="utf-8")
    except subprocess.TimeoutExpired:
        pytest.fail("the fire-module model did not finish in 120 s: a GEMM in a concurrent level deadlocked")
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stdout + result.stderr
