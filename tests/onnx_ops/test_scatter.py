"""ScatterElements / ScatterND (graph ops scatter_elements, scatter_nd) against onnxruntime on cpu_llvm,
with repeated and negative indices and every reduction; an index out of range is refused."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk


def _model(op_type: str, data, indices, updates, **attrs):
    from onnx import helper
    inputs = [helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
              for name, v in (("data", data), ("indices", indices), ("updates", updates))]
    node = helper.make_node(op_type, ["data", "indices", "updates"], ["y"], **attrs)
    out = helper.make_tensor_value_info("y", helper.np_dtype_to_tensor_dtype(data.dtype), data.shape)
    return helper.make_model(helper.make_graph([node], "g", inputs, [out]), opset_imports=[helper.make_opsetid("", 18)])


def _check(model, feeds):
    ort = pytest.importorskip("onnxruntime")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feeds)[0]
    got = tk.compile(tk.frontend.from_onnx(model), target="cpu_llvm").run(feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-6)


@pytest.mark.parametrize("reduction", ["add", "mul", "max", "min"])
def test_scatter_elements_reductions_with_repeated_negative_indices(reduction):
    rng = np.random.default_rng(0)
    data = rng.uniform(-2, 2, (5, 6)).astype("float32")
    indices = rng.integers(-5, 5, (4, 3)).astype("int64")
    updates = rng.uniform(-2, 2, (4, 3)).astype("float32")
    _check(_model("ScatterElements", data, indices, updates, axis=0, reduction=reduction),
           {"data": data, "indices": indices, "updates": updates})


def test_scatter_nd_slices_and_elements():
    rng = np.random.default_rng(1)
    data = rng.integers(-9, 9, (4, 3, 5)).astype("int32")
    indices = np.array([[[0, 2], [-1, 0]], [[2, 1], [1, -3]]], dtype="int64")   # unique after wrapping
    updates = rng.integers(-9, 9, (2, 2, 5)).astype("int32")
    _check(_model("ScatterND", data, indices, updates), {"data": data, "indices": indices, "updates": updates})
    _check(_model("ScatterND", data, indices[..., :1], rng.integers(-9, 9, (2, 2, 3, 5)).astype("int32"),
                  reduction="add"),
           {"data": data, "indices": indices[..., :1], "updates": rng.integers(-9, 9, (2, 2, 3, 5)).astype("int32")})


def test_an_index_out_of_range_is_refused_at_run_time():
    from tensorkiln.ir.errors import RuntimeLaunchError
    data = np.zeros((3, 4), "float32")
    indices, updates = np.array([[0, 3, 1, 1]], "int64"), np.ones((1, 4), "float32")
    lib = tk.compile(tk.frontend.from_onnx(_model("ScatterElements", data, indices, updates, axis=0)),
                     target="cpu_llvm")
    with pytest.raises(RuntimeLaunchError, match=r"scatter_elements"):
        lib.run({"data": data, "indices": indices, "updates": updates})
