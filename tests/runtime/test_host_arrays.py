"""sdk/host_arrays: 64-byte aligned host arrays, and the graph executor's arenas and weights use them."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.sdk.host_arrays import ALIGNMENT, aligned_copy, aligned_empty, is_aligned


@pytest.mark.parametrize("shape,dtype", [((3, 5), "float32"), ((), "float64"), ((0, 4), "int64"), (7, "uint8"),
                                         ((2, 3, 4), "float16")])
def test_aligned_empty_shape_dtype_alignment(shape, dtype):
    array = aligned_empty(shape, dtype)
    assert array.shape == ((shape,) if isinstance(shape, int) else shape)
    assert array.dtype == np.dtype(dtype) and array.flags.c_contiguous and array.flags.writeable
    assert array.size == 0 or array.ctypes.data % ALIGNMENT == 0


def test_aligned_copy_keeps_values_and_returns_aligned_arrays_as_they_are():
    rng = np.random.default_rng(0)
    source = rng.standard_normal(101).astype("float32")[1:]       # 4 bytes past an allocation: not aligned
    assert not is_aligned(source)
    copy = aligned_copy(source)
    assert is_aligned(copy) and np.array_equal(copy, source)
    assert aligned_copy(copy) is copy
    strided = rng.standard_normal((6, 8))[:, ::2]
    assert np.array_equal(aligned_copy(strided), strided) and aligned_copy(strided).flags.c_contiguous


def test_executor_arena_and_weights_are_aligned_whatever_numpy_returned():
    rng = np.random.default_rng(1)
    # a weight 4 bytes past a 64-byte boundary, as numpy or onnx's numpy_helper may place one
    base = aligned_empty(16 * 8 + 1, "float32")
    base[:] = rng.standard_normal(16 * 8 + 1)
    weight = base[1:].reshape(16, 8)
    assert not is_aligned(weight)
    x = graph.var("x", shape=(4, 8), dtype="float32")
    mod = graph.Module.from_expr(graph.nn.relu(graph.nn.dense(x, graph.const(weight)) + graph.const(1.0)))
    lib = tk.compile(mod, target="cpu_llvm")
    executor = lib.executor
    assert executor.constants and all(is_aligned(c) for c in executor.constants.values())
    state = executor._acquire_state()
    try:
        assert state.arenas and all(is_aligned(a) for a in state.arenas.values())
    finally:
        executor._free_states.append(state)
    data = rng.standard_normal((4, 8)).astype("float32")
    np.testing.assert_allclose(lib.run({"x": data})[0], np.maximum(data @ weight.T + 1.0, 0), rtol=1e-5, atol=1e-5)
