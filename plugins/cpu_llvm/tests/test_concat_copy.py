"""cpu_llvm.concat_copy: concatenate as row-by-row contiguous copies (an extern stage), vs numpy."""
from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph


def _strategies(lib):
    return [row["strategy"] for row in lib.summary()["strategies"].values()]


@settings(max_examples=20, deadline=None)
@given(rank=st.integers(1, 4), data=st.data())
def test_any_axis_any_extents_match_numpy(rank, data):
    shape = data.draw(st.lists(st.integers(1, 5), min_size=rank, max_size=rank))
    axis = data.draw(st.integers(-rank, rank - 1))
    extents = data.draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))
    if not any(extents):
        extents[0] = 1
    dtype = data.draw(st.sampled_from(["float32", "int64", "uint8", "float16"]))
    rng = np.random.default_rng(len(extents) * 31 + rank)
    arrays = []
    for extent in extents:
        part = list(shape)
        part[axis] = extent
        arrays.append((rng.uniform(-50, 50, part)).astype(dtype))
    params = [graph.var(f"x{i}", shape=a.shape, dtype=dtype) for i, a in enumerate(arrays)]
    lib = tk.compile(graph.call("concatenate", *params, axis=axis), "llvm")
    assert _strategies(lib) == ["cpu_llvm.concat_copy"]
    np.testing.assert_array_equal(lib(*arrays), np.concatenate(arrays, axis))


def test_an_elementwise_epilogue_runs_after_the_copy():
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((1, 6, 6, 16), dtype=np.float32), rng.standard_normal((1, 6, 6, 8), dtype=np.float32)
    model = graph.nn.relu(graph.call("concatenate", graph.var("a", shape=a.shape), graph.var("b", shape=b.shape),
                                     axis=3))
    lib = tk.compile(model, "llvm")
    assert _strategies(lib) == ["cpu_llvm.concat_copy"]
    np.testing.assert_array_equal(lib(a, b), np.maximum(np.concatenate([a, b], 3), 0))


def test_large_rows_run_the_parallel_copy_at_two_threads():
    rng = np.random.default_rng(5)
    a, b = rng.standard_normal((1, 55, 55, 64), dtype=np.float32), rng.standard_normal((1, 55, 55, 64), dtype=np.float32)
    lib = tk.compile(graph.call("concatenate", graph.var("a", shape=a.shape), graph.var("b", shape=b.shape), axis=3),
                     "llvm -num_threads=2")
    for _ in range(3):
        np.testing.assert_array_equal(lib(a, b), np.concatenate([a, b], 3))


import pytest  # noqa: E402


@pytest.mark.parametrize("dtype", ["float32", "int8", "float16", "int64"])
@pytest.mark.parametrize("shapes, axis", [
    ([(1, 5, 5, 37), (1, 5, 5, 16), (1, 5, 5, 3)], 3),     # chunks of whole vectors, vectors and a tail, a tail alone
    ([(1, 37, 5, 5), (1, 16, 5, 5)], 1),                    # one row (NCHW batch 1): long chunks with a tail
    ([(2, 33), (2, 64), (2, 1)], 1),
])
def test_vector_copies_with_tails_match_numpy(dtype, shapes, axis):
    """Chunks copied as whole vectors plus an element-by-element rest (concat.py), for several element sizes."""
    rng = np.random.default_rng(11)
    arrays = [rng.uniform(-100, 100, shape).astype(dtype) for shape in shapes]
    params = [graph.var(f"x{i}", shape=a.shape, dtype=dtype) for i, a in enumerate(arrays)]
    for target in ("llvm", "llvm -mcpu=haswell"):
        lib = tk.compile(graph.call("concatenate", *params, axis=axis), target)
        assert _strategies(lib) == ["cpu_llvm.concat_copy"]
        np.testing.assert_array_equal(lib(*arrays), np.concatenate(arrays, axis))


def test_rows_are_memcpy_calls_the_light_pipeline_and_a_constant_part_stays_read_only():
    """Each chunk is one emitter.COPY_CALL (llvm.memcpy), which keeps the kernel on the light pipeline; a
    constant part of the concatenation is its source only, so it is not reported as written (the loader
    would refuse a read-only weight for it)."""
    from tensorkiln_cpu_llvm.emitter import COPY_CALL, _pipeline_class, written_buffers
    from tensorkiln.tir.visit import post_order_visit

    rng = np.random.default_rng(9)
    x = rng.standard_normal((1, 7, 7, 40), dtype=np.float32)
    weight = rng.standard_normal((1, 7, 7, 24), dtype=np.float32)
    model = graph.call("concatenate", graph.var("x", shape=x.shape), graph.const(weight), axis=3)
    emitted = []
    from tensorkiln_cpu_llvm import emitter

    original = emitter.LLVMEmitter.emit

    def emit(self, funcs, target):
        funcs = list(funcs)
        emitted.extend(funcs)
        return original(self, funcs, target)
    emitter.LLVMEmitter.emit = emit
    try:
        lib = tk.compile(model, "llvm -num_threads=1")
    finally:
        emitter.LLVMEmitter.emit = original
    np.testing.assert_array_equal(lib(x), np.concatenate([x, weight], 3))
    (func,) = [f for f in emitted if "concatenate" in f.name]
    calls, stores = [], []
    post_order_visit(func.body, lambda node: calls.append(node) if getattr(node, "name", None) == COPY_CALL else
                     stores.append(node) if type(node).__name__ == "Store" else None)
    assert len(calls) == 2 and not stores   # a chunk of each part per row, in the loop over the 49 rows
    assert _pipeline_class(func) == "light"
    output = func.params[-1].name
    assert written_buffers(func) == (output,)
