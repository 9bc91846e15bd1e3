"""test_cuda_mma.py: mma.sync m16n8k16: the per-lane layout checked by its numpy emulation, the intrinsic
on the CPU shim vs numpy, and LDSM + HMMA in its sm_80 SASS."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
from tensorkiln import te

from tensorkiln_cuda.mma import MMA_NT, distribute, emulate_mma, gather, lane_elements
from test_cuda_wmma import _sass


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


def test_mma_gemm_on_the_shim_and_its_sass(tmp_path):
    m, n, k = 32, 16, 32
    X = te.placeholder((m, k), dtype="float16", name="X")
    W = te.placeholder((n, k), dtype="float16", name="W")
    r = te.reduce_axis((0, k), name="r")
    Y = te.compute((m, n), lambda i, j: te.sum(te.cast(X[i, r], "float32") * te.cast(W[j, r], "float32"), axis=r),
                   name="Y")
    s = te.create_schedule(Y.op)
    caches = [s.cache_read(X, "shared", [Y]), s.cache_read(W, "shared", [Y])]
    io, ii = s[Y].split(Y.op.axis[0], factor=16)
    jo, ji = s[Y].split(Y.op.axis[1], factor=8)
    ro, ri = s[Y].split(r, factor=16)
    s[Y].reorder(io, jo, ro, ii, ji, ri)
    s[Y].bind(io, te.thread_axis("blockIdx.y"))
    s[Y].bind(jo, te.thread_axis("blockIdx.x"))
    for cache in caches:
        s[cache].compute_at(s[Y], ro)
        _, lane = s[cache].split(s[cache].fuse(*s[cache].op.axis), factor=32)
        s[cache].bind(lane, te.thread_axis("threadIdx.x"))
    s[Y].tensorize(ii, tk.intrinsic(MMA_NT, "cuda"))
    f = tk.build(s, [X, W, Y], target="cuda -arch=sm_80 -device=cpu_shim", name="mma_gemm")
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((m, k)).astype("float16"), rng.standard_normal((n, k)).astype("float16")
    y = np.full((m, n), np.nan, "float32")
    f(x, w, y)
    np.testing.assert_allclose(y, x.astype("float32") @ w.astype("float32").T, rtol=1e-4, atol=1e-4)
    sass = _sass(f.artifact.binary, tmp_path)
    assert "HMMA.16816.F32" in sass and "LDSM.16.M88.4" in sass and "LDSM.16.M88.2" in sass
