"""test_cuda_wmma.py: the wmma 16x16x16 intrinsics tensorize a te GEMM, match numpy on the CPU shim, and
their CUBIN holds tensor-core instructions (HMMA), read back with cuobjdump / nvdisasm."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln_cuda.gemm import warp_tile_gemm, wmma_gemm
from tensorkiln_cuda.intrinsics import WMMA_NN, WMMA_NT

from cuda_helpers import sass as _sass


def test_intrinsics_are_registered_for_cuda():
    names = {i.name for i in tk.intrinsics("cuda")}
    assert {WMMA_NN, WMMA_NT} <= names


def test_wmma_gemm_matches_numpy_on_the_shim_and_its_cubin_has_hmma(tmp_path):
    n = 64
    s, (A, B, C) = wmma_gemm(n, tk.intrinsic(WMMA_NN, "cuda"))
    f = tk.build(s, [A, B, C], target="cuda -arch=sm_90 -device=cpu_shim", name="wmma_gemm")
    assert "nvcuda::wmma::mma_sync" in f.get_source() and "__launch_bounds__(32)" in f.get_source()
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((n, n)).astype("float16"), rng.standard_normal((n, n)).astype("float16")
    c = np.full((n, n), np.nan, "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a.astype("float32") @ b.astype("float32"), rtol=1e-4, atol=1e-4)
    sass = _sass(f.artifact.binary, tmp_path)
    assert "HMMA.16816.F32" in sass


@pytest.mark.slow
def test_transposed_wmma_for_dense_weights(tmp_path):
    """C = A @ W^T (dense's layout) with the _nt intrinsic: B tiles are read as (j, k) rows."""
    m, n, k = 32, 48, 32
    s, (A, W, C) = warp_tile_gemm(m, n, k, tk.intrinsic(WMMA_NT, "cuda"), weight_rows=True)
    f = tk.build(s, [A, W, C], target="cuda -arch=sm_80 -device=cpu_shim", name="dense_wmma")
    rng = np.random.default_rng(1)
    a, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    c = np.zeros((m, n), "float32")
    f(a, w, c)
    np.testing.assert_allclose(c, a.astype("float32") @ w.astype("float32").T, rtol=1e-4, atol=1e-4)
    assert "HMMA" in _sass(f.artifact.binary, tmp_path)


def test_float16_dense_layers_take_the_tensor_core_strategy(tmp_path):
    """tk.compile picks cuda.dense_wmma for a float16 dense (+ bias + relu) with M, N, K multiples of 16;
    its kernel is one warp per 16x16 tile, and other shapes fall back with the reason."""
    from tensorkiln import graph
    m, n, k = 32, 48, 64
    x = graph.var("x", shape=(m, k), dtype="float16")
    w = graph.var("w", shape=(n, k), dtype="float16")
    b = graph.var("b", shape=(n,), dtype="float16")
    lib = tk.compile(graph.Module.from_expr(graph.nn.relu(graph.nn.bias_add(graph.nn.dense(x, w), b))),
                     "cuda -arch=sm_90 -device=cpu_shim")
    (choice,) = lib.summary()["strategies"].values()
    assert choice["strategy"] == "cuda.dense_wmma"
    (estimate,) = lib.summary()["estimates"].values()     # ptxas resources per kernel
    assert estimate["arch"] == "sm_90" and estimate["threads_per_block"] == 32 and estimate["registers"] > 0
    assert estimate["shared_bytes"] == 16 * 16 * 4 and estimate["spill_stores"] == 0
    rng = np.random.default_rng(2)
    xv, wv, bv = (rng.standard_normal(shape).astype("float16") for shape in ((m, k), (n, k), (n,)))
    reference = np.maximum(xv.astype("float32") @ wv.astype("float32").T + bv.astype("float32"), 0)
    np.testing.assert_allclose(lib(xv, wv, bv).astype("float32"), reference, rtol=2e-3, atol=2e-2)
    (artifact,) = lib.artifacts.values()
    assert "HMMA.16816.F32" in _sass(artifact.binary, tmp_path)
    odd = graph.var("odd", shape=(3, k), dtype="float16")
    other = tk.compile(graph.Module.from_expr(graph.nn.dense(odd, w)), "cuda -device=cpu_shim")
    (choice,) = other.summary()["strategies"].values()
    assert choice["strategy"] != "cuda.dense_wmma"
    assert any("M_N_K_3x48x64_not_multiples_of_16" in str(r) for r in choice["rejected"])
