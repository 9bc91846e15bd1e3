"""Structural equality and hashing (tensorkiln.ir.structural) on graph IR."""
import numpy as np
import pytest

from tensorkiln import graph
from tensorkiln.graph import Function, Module, Var, TensorType
from tensorkiln.ir.structural import assert_structural_equal, structural_equal, structural_hash


def _chain(x, depth):
    out = x
    for _ in range(depth):
        out = graph.nn.relu(out + graph.const(1.0))
    return out


def test_same_structure_is_equal_and_hashes_equal():
    x = graph.var("x", shape=(4,))
    a, b = _chain(x, 3), _chain(x, 3)
    assert a is not b
    assert a == b and structural_equal(a, b)
    assert hash(a) == hash(b) == structural_hash(a)


def test_different_constant_or_attr_is_not_equal():
    x = graph.var("x", shape=(1, 2, 4, 4))
    assert x + graph.const(1.0) != x + graph.const(2.0)
    assert graph.nn.max_pool2d(x, (2, 2)) != graph.nn.max_pool2d(x, (2, 2), strides=(2, 2))


def test_free_vars_compare_by_identity_unless_mapped():
    x1, x2 = graph.var("x", shape=(4,)), graph.var("x", shape=(4,))
    assert not structural_equal(x1 + x1, x2 + x2)
    assert structural_equal(x1 + x1, x2 + x2, map_free_vars=True)
    assert not structural_equal(x1 + x1, x2 + graph.var("y", shape=(4,)), map_free_vars=True)


def test_function_params_are_alpha_equivalent():
    x, y = graph.var("x", shape=(4,)), graph.var("y", shape=(4,))
    f, g = Function((x,), graph.exp(x)), Function((y,), graph.exp(y))
    assert f == g and hash(f) == hash(g)
    assert Module.from_expr(graph.exp(x)) == Module.from_expr(graph.exp(y))


def test_deep_graph_needs_no_recursion():
    x = graph.var("x", shape=(2,))
    a, b = _chain(x, 5000), _chain(x, 5000)
    assert a == b


def test_shared_subgraphs_are_compared_in_linear_time():
    x = graph.var("x", shape=(2,))
    a, b = x, x
    for _ in range(200):  # a diamond at each level: 2**200 paths
        a, b = a + a, b + b
    assert a == b


def test_assert_structural_equal_prints_both_irs():
    x = graph.var("x", shape=(4,))
    with pytest.raises(AssertionError, match=r"(?s)lhs node.*--- lhs ---.*exp.*--- rhs ---.*log"):
        assert_structural_equal(Module.from_expr(graph.exp(x)), Module.from_expr(graph.log(x)))


def test_nodes_work_as_dict_keys():
    x = graph.var("x", shape=(3,))
    seen = {graph.exp(x): 1}
    assert seen[graph.exp(x)] == 1
    assert graph.const(np.arange(3.0, dtype="float32")) == graph.const([0.0, 1.0, 2.0])


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "int64", "uint16", "bool"])
def test_equal_constants_are_equal_contiguous_or_not_and_changed_ones_are_not(dtype):
    """Equal constants are equal whether contiguous or not, NaNs included (compared by their bits first,
    structural._same_bytes); a changed element makes them unequal."""
    rng = np.random.default_rng(0)
    # 1000 elements: the hash reads a sample of 64, so a change at [0, 1] leaves it equal and the values decide
    kind = np.dtype(dtype).kind
    value = (rng.standard_normal((20, 50)) > 0 if kind == "b" else
             (rng.standard_normal((20, 50)) * 10).astype(dtype) if kind == "f" else
             rng.integers(0, 100, (20, 50)).astype(dtype))
    assert structural_equal(graph.const(value), graph.const(value.copy()))
    assert structural_equal(graph.const(value.T), graph.const(np.ascontiguousarray(value.T)))
    other = value.copy()
    other[0, 1] = not other[0, 1] if dtype == "bool" else other[0, 1] + 1
    assert structural_hash(graph.const(value)) == structural_hash(graph.const(other))
    assert not structural_equal(graph.const(value), graph.const(other))
    if kind == "f":
        with_nan = value.copy()
        with_nan[0, 2] = np.nan
        assert structural_equal(graph.const(with_nan), graph.const(with_nan.copy()))
