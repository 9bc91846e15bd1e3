"""cpu_llvm's float32 erf (a vectorized rational approximation, math_calls._erf_f32) vs math.erf."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te


def _erf_kernel(n: int, vector: bool, dtype: str = "float32"):
    a = te.placeholder((n,), dtype=dtype, name="a")
    b = te.compute((n,), lambda i: te.erf(a[i]), name="b")
    s = te.create_schedule(b.op)
    if vector:
        _, inner = s[b].split(b.op.axis[0], factor=16)
        s[b].vectorize(inner)
    return tk.build(s, [a, b], target="llvm", name=f"erf_{dtype}_{n}_{vector}")


@pytest.mark.parametrize("vector", [False, True])
def test_erf_within_a_few_ulp_of_libm_everywhere(vector):
    x = np.concatenate([np.linspace(-6, 6, 200_001), [0.0, -0.0, 1e-30, -1e-30, 1e-8, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    out = np.full_like(x, 7.0)
    _erf_kernel(x.size, vector)(x, out)
    ref = np.array([math.erf(v) for v in x[:-1].astype(np.float64)])
    np.testing.assert_allclose(out[:-1], ref, rtol=1e-6, atol=1e-37)
    assert np.isnan(out[-1])
    assert np.signbit(out[200_002]) and not np.signbit(out[200_001])   # erf(-0) = -0
    assert out[-3] == 1.0 and out[-2] == -1.0


def test_float64_erf_stays_exact():
    x = np.linspace(-3, 3, 1001)
    out = np.zeros_like(x)
    _erf_kernel(x.size, False, "float64")(x, out)
    np.testing.assert_allclose(out, [math.erf(v) for v in x], rtol=1e-15, atol=1e-300)
