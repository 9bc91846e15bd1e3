"""Float mod (floor) and fmod (truncated) at the edges: +-0, +-inf and NaN operands give numpy's
np.mod / np.fmod answers, signed zeros included, on cpu_llvm and the tir interpreter. Before, both
were a - round(a / b) * b: NaN for -3 mod inf (numpy: inf) and inexact for large quotients."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln.graph.attrs import NO_ATTRS
from tensorkiln.graph.registry import get_op

from ..ops.harness import run_op

EDGES = [0.0, -0.0, 3.0, -3.0, 7.5, -7.5, 1e30, 1e-3, np.inf, -np.inf, np.nan, 2.0, -2.0]


def _edge_pairs(dtype):
    with np.errstate(over="ignore"):
        values = np.array(EDGES, dtype=dtype)
    x, y = np.meshgrid(values, values)
    return x.reshape(-1), y.reshape(-1)


def _same(got, want):
    """Equal bit for bit up to NaN payloads: NaN where numpy has NaN, and the sign of a zero."""
    return (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("op, numpy_fn", [("mod", np.mod), ("fmod", np.fmod)])
def test_float_mod_edge_cases_match_numpy(op, numpy_fn, dtype):
    x, y = _edge_pairs(dtype)
    with np.errstate(all="ignore"):
        want = numpy_fn(x, y)
    for backend in ("llvm", "interpret"):
        (got,) = run_op(get_op(op), [x, y], NO_ATTRS, backend)
        bad = ~_same(got, want)
        assert not bad.any(), f"{op} {dtype} on {backend}: " + ", ".join(
            f"{a} {op} {b} = {g}, numpy {w}" for a, b, g, w in zip(x[bad], y[bad], got[bad], want[bad]))


def test_float_fmod_is_exact_for_large_quotients():
    x = np.array([1e30, -1e30, 3e38, 123456789.0], dtype="float32")
    y = np.array([3.0, 7.0, 1.1, 0.1], dtype="float32")
    (got,) = run_op(get_op("fmod"), [x, y], NO_ATTRS, "llvm")
    np.testing.assert_array_equal(got, np.fmod(x, y))
