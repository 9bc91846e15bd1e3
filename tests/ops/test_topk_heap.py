"""topk as an extern stage per row (ops/sort.py), a bounded heap or, for long rows of which much is kept,
a merge sort: against a stable-sort reference written here (Python's sorted with explicit keys, not the
op's registered reference), on cpu_llvm and the tir interpreter, with ties, NaNs, every axis, k in
[0, n], int and float dtypes, each algorithm forced in turn; the heap's loop work is O(n log k), the
merge sort's O(n log n); rows run in a parallel loop, one per thread on GPUs."""
from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.graph.ops.tensor import TopKAttrs
from tensorkiln.graph.registry import get_op
from tensorkiln.graph.types import TensorType
from tensorkiln.ops import naive_schedule
import tensorkiln.ops.sort as sort
from tensorkiln.ops.sort import HEAP_ARITY, topk, topk_network
from tensorkiln.tir.visit import post_order_visit

from .harness import run_op, static_work

DTYPES = ["float32", "float64", "float16", "int32", "int64", "int8", "uint8"]


def _sort_key(value, index: int, largest: bool):
    """Output order: better value first, NaN above every number, ties by the lower index."""
    value = value.item()
    is_nan = isinstance(value, float) and math.isnan(value)
    if largest:
        return (0 if is_nan else 1, 0 if is_nan else -value, index)
    return (1 if is_nan else 0, 0 if is_nan else value, index)


def _reference(x: np.ndarray, k: int, axis: int, largest: bool):
    moved = np.moveaxis(x, axis, -1)
    rows = moved.reshape(math.prod(moved.shape[:-1]), moved.shape[-1])
    order = np.array([sorted(range(rows.shape[1]), key=lambda i: _sort_key(row[i], i, largest))[:k]
                      for row in rows], dtype=np.int64).reshape(*moved.shape[:-1], k)
    values = np.take_along_axis(moved, order, axis=-1)
    return np.moveaxis(values, -1, axis), np.moveaxis(order, -1, axis)


@st.composite
def _cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    shape = draw(hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=7))
    axis = draw(st.integers(-len(shape), len(shape) - 1))
    if draw(st.booleans()):   # a longer axis: heaps several levels deep
        shape = tuple(draw(st.integers(8, 70)) if d == axis % len(shape) else s for d, s in enumerate(shape))
    if dtype.startswith("float"):
        elements = st.one_of(st.sampled_from([-1.5, -0.0, 0.0, 1.0, 2.5, float("inf"), -float("inf")]),
                             st.just(float("nan")), st.floats(-4, 4, width=16))
    else:
        elements = st.integers(0, 5) if dtype.startswith("u") else st.integers(-3, 3)   # many ties
    x = draw(hnp.arrays(dtype, shape, elements=elements))
    k = draw(st.integers(0, shape[axis]))
    return x, axis, k, draw(st.booleans())


def _assert_same(got, want, message):
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, message
        # bit patterns: NaN equals NaN, and -0.0 is told from 0.0
        np.testing.assert_array_equal(g.view(f"u{g.itemsize}"), w.view(f"u{w.itemsize}"), err_msg=message)


class _Forced:
    """Make topk use one algorithm whatever the shape (module thresholds, restored on exit)."""

    def __init__(self, algorithm: str):
        self.values = {"heap": (10 ** 12, 1), "merge": (0, 10 ** 12)}[algorithm]

    def __enter__(self):
        self.saved = sort.MERGE_MIN_LENGTH, sort.MERGE_MIN_FRACTION
        sort.MERGE_MIN_LENGTH, sort.MERGE_MIN_FRACTION = self.values

    def __exit__(self, *exc):
        sort.MERGE_MIN_LENGTH, sort.MERGE_MIN_FRACTION = self.saved


@settings(max_examples=20, deadline=None, derandomize=True)
@given(case=_cases())
def test_topk_heap_matches_a_stable_sort(case):
    _check_against_stable_sort("heap", case)


@settings(max_examples=8, deadline=None, derandomize=True)   # each pass is its own loop: slower to compile
@given(case=_cases())
def test_topk_merge_sort_matches_a_stable_sort(case):
    _check_against_stable_sort("merge", case)


def _check_against_stable_sort(algorithm, case):
    x, axis, k, largest = case
    want = _reference(x, k, axis, largest)
    with _Forced(algorithm):
        for sorted_ in (True, False):   # the output is sorted either way
            attrs = TopKAttrs(k=k, axis=axis, largest=largest, sorted=sorted_)
            got = run_op(get_op("topk"), [x], attrs, "llvm")
            _assert_same(got, want, f"{algorithm} llvm {x.dtype}{x.shape} axis={axis} k={k} largest={largest}")
        got = run_op(get_op("topk"), [x], attrs, "interpret")
    _assert_same(got, want, f"{algorithm} interpret {x.dtype}{x.shape} axis={axis} k={k} largest={largest}")


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("length", [500, 5000])   # the heap; the merge sort (long rows, k >= n / 8)
def test_topk_full_sort_of_many_ties_and_nans_matches_numpy(largest, length):
    x = np.random.default_rng(7).integers(0, 20, (3, length)).astype("float32")
    x[x == 19] = np.nan
    assert sort._sorts_whole_rows(length, length) == (length > 4096)
    got = run_op(get_op("topk"), [x], TopKAttrs(k=length, axis=1, largest=largest), "llvm")
    keys = np.where(np.isnan(x), -np.inf if largest else np.inf, -x if largest else x)
    order = np.argsort(keys, axis=1, kind="stable")
    np.testing.assert_array_equal(got[1], order)
    np.testing.assert_array_equal(got[0], np.take_along_axis(x, order, axis=1))


def _work(compute, n: int, k: int) -> int:
    """Store executions of the lowered kernel if every loop ran in full and every branch were taken."""
    x = te.placeholder((n,), "float32", name="x")
    attrs = TopKAttrs(k=k, axis=0)
    return static_work([x], compute([x], attrs, get_op("topk").type_rule((TensorType((n,), "float32"),), attrs)))


@pytest.mark.parametrize("k", [1, 8, 1 << 12])
def test_topk_heap_does_n_log_k_work(k):
    n = 1 << 12
    levels = math.ceil(math.log(k, HEAP_ARITY))
    heap = _work(topk, n, k)
    # each element: at most `levels` steps of four stores (two moved, the hole twice), plus its own
    # three; the sort phase sifts every element a second time
    assert heap <= (n + 2 * k) * (4 * levels + 3)
    # the network's stages grow as log^2 k: a full sort of n = 2^12 is 81 n there, 74 n here at most
    assert heap <= _work(topk_network, n, k)


def _stores_executed(n: int, k: int) -> int:
    """Stores the tir interpreter executes for topk of n random floats (each Store also counts itself)."""
    from tensorkiln.tir.visit import rewrite
    x = te.placeholder((n,), "float32", name="x")
    attrs = TopKAttrs(k=k, axis=0)
    outputs = topk([x], attrs, get_op("topk").type_rule((TensorType((n,), "float32"),), attrs))
    func = tk.lower(naive_schedule(outputs), [x, *outputs])
    counter = tir.Buffer("counter", (tir.IntImm("int32", 1),), "int64")
    zero = tir.IntImm("int32", 0)
    count = tir.Store(counter, tir.Add(tir.Load(counter, zero), tir.IntImm("int64", 1)), zero)
    body = rewrite(func.body, post=lambda s: tir.SeqStmt((s, count)) if isinstance(s, tir.Store) else None)
    func = tir.PrimFunc(func.name, (*func.params, counter), body, func.attrs)
    data = np.random.default_rng(n).standard_normal(n).astype("float32")
    values, indices, total = np.zeros(k, "float32"), np.zeros(k, "int64"), np.zeros(1, "int64")
    tir.interpret(func, data, values, indices, total)
    np.testing.assert_array_equal(indices, np.argsort(-data, kind="stable")[:k])
    return int(total[0])


def test_topk_merge_sort_of_long_rows_does_n_log_n_work():
    n = 4097   # the shortest row that is merge-sorted: 13 passes, the last pair of each pass shorter
    assert sort._sorts_whole_rows(n, -(-n // 8)) and not sort._sorts_whole_rows(n, n // 8 - 1)
    assert not sort._sorts_whole_rows(n - 1, n - 1)
    # in: two stores per element; each of the 13 passes: two per element, two cursor moves per element
    # and four cursor stores per pair (4n over all passes); out: two per element
    assert _stores_executed(n, n) <= n * (2 + 4 * 13 + 4 + 2) + 64


def _loops(func):
    found = []
    post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, tir.For) else None)
    return found


@pytest.mark.parametrize("shape, axis, parallel", [((6, 50), 1, True), ((50, 6), 0, True), ((50,), 0, False)])
def test_heap_topk_rows_run_in_a_parallel_loop(shape, axis, parallel):
    x = te.placeholder(shape, "float32", name="x")
    attrs = TopKAttrs(k=5, axis=axis)
    outputs = topk([x], attrs, get_op("topk").type_rule((TensorType(shape, "float32"),), attrs))
    func = tk.lower(naive_schedule(outputs), [x, *outputs])
    parallel_loops = [loop for loop in _loops(func) if loop.kind is tir.ForKind.PARALLEL]
    if parallel:
        assert [loop.loop_var.name for loop in parallel_loops] == ["row"]
        assert parallel_loops[0].extent.value == math.prod(shape) // shape[axis]
    else:   # one row: no loop at all
        assert not parallel_loops


def test_heap_topk_of_ten_from_a_million_matches_numpy_through_onnx():
    from onnx import TensorProto, helper
    n, k = 10 ** 6, 10
    x = np.random.default_rng(11).integers(0, 10 ** 4, n).astype("float32")   # ties
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=0, largest=0)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [n])],
                              [helper.make_tensor_value_info("v", TensorProto.FLOAT, [k]),
                               helper.make_tensor_value_info("i", TensorProto.INT64, [k])],
                              [helper.make_tensor("k", TensorProto.INT64, [1], [k])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    values, indices = tk.compile(model, target="cpu_llvm").run({"x": x})
    order = np.argsort(x, kind="stable")[:k]
    np.testing.assert_array_equal(indices, order)
    np.testing.assert_array_equal(values, x[order])


@pytest.mark.parametrize("target", ["opencl", "cuda"])
def test_heap_topk_runs_one_row_per_gpu_thread(target):
    """The GPU library binds the heap's row loop to blockIdx.x x threadIdx.x (cuda runs on its CPU shim
    without a GPU); a row longer than the plugins' serial limit goes to the CPU, with the reason."""
    from tensorkiln import graph
    from tensorkiln.graph import Module
    for shape, axis, k, where in (((300, 40), 1, 7, target), ((5, 33, 4), 1, 33, target),
                                  ((2, 5000), 1, 3, "cpu_llvm")):
        x = np.random.default_rng(k).integers(0, 6, shape).astype("float32")
        x[x == 5] = np.nan
        var = graph.var("x", shape=shape)
        lib = tk.compile(Module.from_expr(graph.call("topk", var, k=k, axis=axis, largest=False)), target=target)
        got = lib.run({"x": x})
        _assert_same(got, _reference(x, k, axis, False), f"{target} {shape} k={k}")
        (step,) = lib.placement()
        assert step["target"].split()[0] == where
        if where == "cpu_llvm":
            assert "5000_elements_per_row>4096" in step["fallback_reason"]


def test_topk_merge_sort_rows_in_parallel_with_heap_scratch_and_a_strided_axis():
    """Rows of 20000 need 80 KB scratch buffers each, past cpu_llvm's stack limit, allocated inside the
    parallel row loop; along axis 0 a row's elements are 3 apart."""
    x = np.random.default_rng(0).integers(0, 1000, (4, 20000)).astype("float32")
    got = run_op(get_op("topk"), [x], TopKAttrs(k=20000, axis=1, largest=False), "llvm")
    np.testing.assert_array_equal(got[1], np.argsort(x, axis=1, kind="stable"))
    y = np.random.default_rng(1).integers(0, 1000, (20000, 3)).astype("int32")
    got = run_op(get_op("topk"), [y], TopKAttrs(k=5000, axis=0, largest=True), "llvm")
    order = np.argsort(-y.astype(np.int64), axis=0, kind="stable")[:5000]
    np.testing.assert_array_equal(got[1], order)
    np.testing.assert_array_equal(got[0], np.take_along_axis(y, order, axis=0))
