"""cpu_llvm's float32 exp, sigmoid and erf (computed in vector instructions, math_calls.py) vs float64 references."""
from __future__ import annotations

import math

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te


def _kernel(function, n: int, vector: bool, dtype: str = "float32"):
    a = te.placeholder((n,), dtype=dtype, name="a")
    b = te.compute((n,), lambda i: function(a[i]), name="b")
    s = te.create_schedule(b.op)
    if vector:
        _, inner = s[b].split(b.op.axis[0], factor=16)
        s[b].vectorize(inner)
    return tk.build(s, [a, b], target="llvm", name=f"{function.__name__}_{dtype}_{n}_{vector}")


def _erf_kernel(n: int, vector: bool, dtype: str = "float32"):
    return _kernel(te.erf, n, vector, dtype)


@pytest.mark.parametrize("vector", [False, True])
def test_exp_within_one_ulp_with_inf_nan_and_gradual_underflow(vector):
    # (-1e9: a causal mask's entries, which vanish without computing an underflowing 2^n)
    x = np.concatenate([np.linspace(-110, 95, 400_001), [0.0, -0.0, 88.72, 88.73, -87.5, -103.9, -104.0, -104.1, -1e9,
                                                          np.inf, -np.inf, np.nan]]).astype(np.float32)
    out = np.full_like(x, 7.0)
    _kernel(te.exp, x.size, vector)(x, out)
    with np.errstate(over="ignore"):
        exact = np.exp(x[:-1].astype(np.float64))
        rounded = exact.astype(np.float32)
    normal = np.isfinite(rounded) & (rounded >= np.finfo(np.float32).tiny)
    np.testing.assert_allclose(out[:-1][normal], exact[normal], rtol=1.2e-7)
    tiny = np.isfinite(rounded) & ~normal
    np.testing.assert_allclose(out[:-1][tiny], exact[tiny], rtol=0, atol=1.5e-45)
    assert np.all(np.isinf(out[:-1][np.isinf(rounded)]))
    assert np.isnan(out[-1]) and out[-3] == np.inf and out[-2] == 0.0


@pytest.mark.parametrize("vector", [False, True])
def test_tanh_within_two_ulp(vector):
    x = np.concatenate([np.linspace(-12, 12, 400_001), [0.0, -0.0, 1e-30, 100.0, -100.0, np.inf, -np.inf, np.nan]])
    x = x.astype(np.float32)
    out = np.full_like(x, 7.0)
    _kernel(te.tanh, x.size, vector)(x, out)
    np.testing.assert_allclose(out[:-1], np.tanh(x[:-1].astype(np.float64)), rtol=2e-7, atol=1e-45)
    assert np.isnan(out[-1]) and np.signbit(out[400_002]) and out[-3] == 1.0 and out[-2] == -1.0


def test_sigmoid_matches_float64():
    x = np.linspace(-120, 120, 100_001).astype(np.float32)
    out = np.zeros_like(x)
    _kernel(te.sigmoid, x.size, True)(x, out)
    # below -87, e^-x overflows and 1 / (1 + inf) is 0 where the exact value is a denormal (as with libm)
    np.testing.assert_allclose(out, 1 / (1 + np.exp(-x.astype(np.float64))), rtol=3e-7, atol=1.2e-38)


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
