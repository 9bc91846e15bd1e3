"""cpu_llvm_flatten_matmul: matmuls of rank >= 3 on the GEMM micro-kernel, the epilogue fused, vs numpy."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph
from tensorkiln.ir.pass_infra import PassContext

RNG = np.random.default_rng(11)


def _random(*shape):
    return RNG.uniform(-1, 1, shape).astype("float32")


def _strategies(lib):
    return [row["strategy"] for row in lib.summary()["strategies"].values()]


@pytest.mark.parametrize("shape", [(1, 64, 96), (2, 7, 40), (3, 2, 5, 48)])
def test_activations_times_a_weight_matrix_with_bias_relu_and_residual(shape):
    x, w, b, r = _random(*shape), _random(shape[-1], 80), _random(80), _random(*shape[:-1], 80)
    model = graph.add(graph.nn.relu(graph.nn.bias_add(graph.nn.matmul(graph.var("x", shape=x.shape), graph.const(w)),
                                                      graph.const(b), axis=-1)),
                      graph.var("r", shape=r.shape))
    lib = tk.compile(model, "llvm")
    # flattened to 2-D, the constant weight is then packed at compile time (test_dense_pack.py)
    assert _strategies(lib) == ["cpu_llvm.dense_pack_ukernel"]
    assert lib.summary()["kernel_launches"] == 1
    np.testing.assert_allclose(lib(x, r), np.maximum(x @ w + b, 0) + r, rtol=1e-4, atol=1e-4)


def test_attention_scores_are_a_batch_of_gemms():
    q, k = _random(2, 4, 16, 32), _random(2, 4, 32, 16)
    scale = np.float32(0.125)
    model = graph.multiply(graph.nn.matmul(graph.var("q", shape=q.shape), graph.var("k", shape=k.shape)),
                           graph.const(scale))
    lib = tk.compile(model, "llvm")
    assert _strategies(lib) == ["cpu_llvm.matmul_ukernel"]
    np.testing.assert_allclose(lib(q, k), (q @ k) * scale, rtol=1e-4, atol=1e-4)


def test_broadcast_batches_keep_the_generic_schedule():
    a, b = _random(2, 1, 4, 8), _random(1, 3, 8, 20)
    lib = tk.compile(graph.nn.matmul(graph.var("a", shape=a.shape), graph.var("b", shape=b.shape)), "llvm")
    assert "cpu_llvm.matmul_ukernel" not in _strategies(lib)
    np.testing.assert_allclose(lib(a, b), a @ b, rtol=1e-4, atol=1e-4)


def test_a_row_broadcast_over_the_tokens_stays_correct():
    # an operand that varies along the tokens but not the batch cannot ride the flattened rows
    x, w, t = _random(2, 6, 24), _random(24, 32), _random(6, 1)
    model = graph.add(graph.nn.matmul(graph.var("x", shape=x.shape), graph.const(w)), graph.const(t))
    lib = tk.compile(model, "llvm")
    np.testing.assert_allclose(lib(x), x @ w + t, rtol=1e-4, atol=1e-4)
    with PassContext(opt_level=3, disabled={"cpu_llvm_flatten_matmul"}):
        plain = tk.compile(graph.add(graph.nn.matmul(graph.var("x", shape=x.shape), graph.const(w)), graph.const(t)),
                           "llvm")
    assert not {"cpu_llvm.matmul_ukernel", "cpu_llvm.dense_pack_ukernel"} & set(_strategies(plain))
    np.testing.assert_allclose(plain(x), x @ w + t, rtol=1e-4, atol=1e-4)


def test_a_3d_times_4d_matmul_is_not_taken_for_a_batch_of_gemms():
    a, b = _random(3, 4, 8), _random(2, 3, 8, 5)   # broadcasts a over b's leading axis
    lib = tk.compile(graph.nn.matmul(graph.var("a", shape=a.shape), graph.var("b", shape=b.shape)), "llvm")
    np.testing.assert_allclose(lib(a, b), a @ b, rtol=1e-4, atol=1e-4)
