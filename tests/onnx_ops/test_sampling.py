"""image.grid_sample (ONNX GridSample): the numpy reference matches onnxruntime for every mode, padding
mode and align_corners, with grid points inside and far outside [-1, 1]; the te compute matches the
reference through the tir interpreter for each combination and through cpu_llvm end to end from ONNX."""
from __future__ import annotations

import itertools

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln.graph.ops.sampling import GridSampleAttrs
from tensorkiln.graph.registry import get_op

from ..ops.harness import run_op

# cubic with reflection builds the largest kernels (16 taps, each reflected): run by --runslow
COMBINATIONS = [pytest.param(*c, marks=pytest.mark.slow) if c[:2] == ("cubic", "reflection") else c
                for c in itertools.product(["nearest", "linear", "cubic"], ["zeros", "border", "reflection"], [0, 1])]


def _model(mode: str, padding: str, align: int, data_shape, grid_shape):
    from onnx import TensorProto, helper
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    out = [data_shape[0], data_shape[1], *grid_shape[1:-1]]
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, data_shape),
                                            helper.make_tensor_value_info("grid", TensorProto.FLOAT, grid_shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, out)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 20)])


def _inputs(seed: int, data_shape, grid_shape):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(data_shape).astype("float32")
    grid = rng.uniform(-3.2, 3.2, grid_shape).astype("float32")   # well past the borders too
    grid.reshape(-1)[:4] = [-1.0, 1.0, 0.0, -0.999]                 # and exactly on them
    return x, grid


def _onnxruntime(model, x, grid):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {"x": x, "grid": grid})[0]


@pytest.mark.parametrize("mode, padding, align", COMBINATIONS)
def test_reference_and_te_compute_match_onnxruntime(mode, padding, align):
    data_shape, grid_shape = (1, 2, 5, 4), (1, 3, 4, 2)
    x, grid = _inputs(len(mode) + len(padding) + align, data_shape, grid_shape)
    want = _onnxruntime(_model(mode, padding, align, data_shape, grid_shape), x, grid)
    attrs = GridSampleAttrs(mode=mode, padding_mode=padding, align_corners=bool(align))
    op = get_op("image.grid_sample")
    np.testing.assert_allclose(op.reference(x, grid, attrs), want, rtol=1e-5, atol=1e-5)
    (got,) = run_op(op, [x, grid], attrs, "interpret")
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode, padding, align, data_shape, grid_shape", [
    ("cubic", "border", 0, (1, 2, 7, 6), (1, 4, 5, 2)),
    ("linear", "border", 1, (2, 2, 3, 4, 5), (2, 2, 3, 2, 3)),     # volumetric
    ("nearest", "zeros", 0, (1, 3, 4, 4, 4), (1, 3, 2, 2, 3)),
])
def test_cpu_llvm_matches_onnxruntime(mode, padding, align, data_shape, grid_shape):
    model = _model(mode, padding, align, data_shape, grid_shape)
    x, grid = _inputs(7, data_shape, grid_shape)
    lib = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm")
    np.testing.assert_allclose(lib.run({"x": x, "grid": grid})[0], _onnxruntime(model, x, grid),
                               rtol=1e-5, atol=1e-5)


def test_bad_grid_shape_and_cubic_3d_are_refused_with_the_shapes():
    from tensorkiln.ir.errors import ShapeError
    model = _model("linear", "zeros", 0, (1, 2, 4, 4), (1, 3, 3, 3))
    with pytest.raises(ShapeError, match=r"needs a grid of shape \(N, H1..Hk, k\) with k = 2"):
        tk.frontend.from_onnx(model)
    with pytest.raises(ShapeError, match="cubic mode samples 2-D data only"):
        tk.frontend.from_onnx(_model("cubic", "zeros", 0, (1, 2, 4, 4, 4), (1, 3, 3, 3, 3)))
