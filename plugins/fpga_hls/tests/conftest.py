"""Fixtures of the fpga_hls plugin's tests: a te matmul.

C-simulation libraries are cached by the hash of their full source, flags and headers, so
tests share the user's cache (~/.cache/tensorkiln/fpga_hls) and its precompiled header."""
from __future__ import annotations

import pytest

from tensorkiln import te


@pytest.fixture(scope="session")
def matmul():
    """matmul(n, m, k, dtype) -> te tensors A, B, C."""
    return make_matmul


def make_matmul(n: int, m: int | None = None, k: int | None = None, dtype: str = "float32"):
    """A[n, k] @ B[k, m] as te tensors (int8 inputs accumulate in int32)."""
    m, k = m or n, k or n
    a = te.placeholder((n, k), dtype=dtype, name="A")
    b = te.placeholder((k, m), dtype=dtype, name="B")
    r = te.reduce_axis((0, k), name="k")
    if dtype == "int8":
        c = te.compute((n, m), lambda i, j: te.sum(a[i, r].astype("int32") * b[r, j].astype("int32"), axis=r), name="C")
    else:
        c = te.compute((n, m), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    return a, b, c
