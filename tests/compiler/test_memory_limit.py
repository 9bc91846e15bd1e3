"""compiler/memory_limit.py: tk.compile refuses, before allocating, a model that cannot fit memory_limit."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.compiler.memory_limit import check_tensor_sizes
from tensorkiln.graph import Module
from tensorkiln.ir.errors import MemoryLimitError
from tensorkiln.ir.memory import physical_memory_bytes, tensor_bytes

pytestmark = pytest.mark.skipif(not tk.target("cpu_llvm").spec.is_available, reason="cpu_llvm codegen not available")


def _relu_exp(shape):
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"), helper.make_node("Exp", ["r"], ["y"], name="exp")]
    g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, list(shape))])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])


def test_planned_memory_over_the_limit_names_the_largest_tensor_and_the_limit():
    # 1000x1000 float32: 4 MB input + 4 MB output; each tensor fits 6 MB, the plan does not.
    with pytest.raises(MemoryLimitError, match=r"needs 8000000 bytes .*more than the memory limit of 6000000 "
                                               r"bytes.*largest tensor is the .*\(1000, 1000\) \(float32\), 4000000"):
        tk.compile(_relu_exp((1000, 1000)), target="cpu_llvm", memory_limit=6_000_000)


def test_a_model_within_the_limit_compiles_and_runs():
    lib = tk.compile(_relu_exp((100, 100)), target="cpu_llvm", memory_limit=1_000_000)
    x = np.random.default_rng(0).standard_normal((100, 100)).astype(np.float32)
    np.testing.assert_allclose(lib.run(x=x)[0], np.exp(np.maximum(x, 0)), rtol=1e-5)


def test_a_graph_module_with_a_huge_tensor_fails_before_lowering():
    x = graph.var("x", shape=(10**6, 10**6), dtype="float32")
    mod = Module.from_expr(graph.nn.relu(x))
    with pytest.raises(MemoryLimitError, match=r"model input 'x' has shape \(1000000, 1000000\) \(float32\), "
                                               r"4000000000000 bytes .*memory limit"):
        check_tensor_sizes(mod, physical_memory_bytes())
    with pytest.raises(MemoryLimitError, match="memory limit"):
        tk.compile(mod, target="cpu_llvm")


def test_an_onnx_model_declaring_10_to_the_12_elements_fails_at_compile_time():
    with pytest.raises(MemoryLimitError, match=r"\(1000000, 1000000\) \(float32\).*memory limit"):
        tk.compile(_relu_exp((10**6, 10**6)), target="cpu_llvm")


def test_tensor_bytes_is_exact_where_int64_would_wrap():
    assert tensor_bytes((2**32, 2**32, 2**32), "float32") == 2**98
    assert physical_memory_bytes() > 0
