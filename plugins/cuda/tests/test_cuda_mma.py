"""test_cuda_mma.py: mma.sync m16n8k16: the per-lane layout checked by its numpy emulation, the intrinsic
on the CPU shim vs numpy, and LDSM + HMMA in its sm_80 SASS."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te

from tensorkiln_cuda.gemm import warp_tile_gemm
from tensorkiln_cuda.mma import MMA_NT, distribute, emulate_mma, gather, lane_elements
from cuda_helpers import sass as _sass


def test_layout_covers_every_element_once_per_operand():
    for operand, shape in (("a", (16, 16)), ("b", (16, 8)), ("c", (16, 8))):
        seen = [element for lane in range(32) for element in lane_elements(operand, lane)]
        assert sorted(seen) == [(r, c) for r in range(shape[0]) for c in range(shape[1])]
    assert lane_elements("a", 5) == [(1, 2), (1, 3), (9, 2), (9, 3), (1, 10), (1, 11), (9, 10), (9, 11)]


def test_emulated_warp_mma_is_the_matrix_product():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 16)).astype("float16"), rng.standard_normal((16, 8)).astype("float16")
    c = rng.standard_normal((16, 8)).astype("float32")
    fragments = emulate_mma(distribute("a", a), distribute("b", b), distribute("c", c))
    assert fragments.shape == (32, 4)
    np.testing.assert_allclose(gather("c", fragments), a.astype("float32") @ b.astype("float32") + c, rtol=1e-6)


@pytest.mark.slow
def test_mma_gemm_on_the_shim_and_its_sass(tmp_path):
    m, n, k = 32, 16, 32
    s, (X, W, Y) = warp_tile_gemm(m, n, k, tk.intrinsic(MMA_NT, "cuda"), tile_n=8, weight_rows=True)
    f = tk.build(s, [X, W, Y], target="cuda -arch=sm_80 -device=cpu_shim", name="mma_gemm")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    y = np.full((m, n), np.nan, "float32")
    f(x, w, y)
    np.testing.assert_allclose(y, x.astype("float32") @ w.astype("float32").T, rtol=1e-4, atol=1e-4)
    sass = _sass(f.artifact.binary, tmp_path)
    assert "HMMA.16816.F32" in sass and "LDSM.16.M88.4" in sass and "LDSM.16.M88.2" in sass


def test_mma_cubin_loads_operands_with_ldmatrix(emitter, tmp_path):
    """The warp path compiled for sm_90 (NVRTC only, no run): ldmatrix x4 / x2 feed HMMA.16816."""
    s, (X, W, Y) = warp_tile_gemm(16, 8, 32, tk.intrinsic(MMA_NT, "cuda"), tile_n=8, weight_rows=True)
    artifact = emitter.emit([te.lower(s, [X, W, Y], name="mma_tile")], tk.target("cuda -arch=sm_90"))
    sass = _sass(artifact.binary, tmp_path)
    assert "HMMA.16816.F32" in sass and "LDSM.16.M88.4" in sass
    assert artifact.metadata["resources"]["mma_tile"]["spill_stores"] == 0
