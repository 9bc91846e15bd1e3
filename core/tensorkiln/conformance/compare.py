"""conformance/compare.py: compare a target's results with numpy, reporting max abs/rel error."""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .catalogue import CheckFailure

__all__ = ["errors", "exceeds", "assert_close", "tolerance_for"]


def tolerance_for(op: Any, dtype: str) -> tuple[float, float]:
    """(rtol, atol) for `op` (a registry Op, or None) at `dtype`; integers and bools compare exactly."""
    if dtype.startswith(("int", "uint")) or dtype == "bool":
        return 0.0, 0.0
    if op is not None:
        rtol = op.rtol(dtype)
    else:
        from ..graph.registry import DEFAULT_TOLERANCE
        rtol = DEFAULT_TOLERANCE.get(dtype, 1e-5)
    return rtol, rtol


def errors(actual: np.ndarray, expected: np.ndarray) -> tuple[float, float]:
    """(max abs error, max rel error) of `actual` against `expected`, without floating-point warnings.

    Elements equal on both sides (the same inf, nan on both) count as 0; a nan or inf on
    one side only is an abs error of inf. The relative error |a - e| / |e| is taken over
    elements whose expected value is finite and nonzero, so an expected 0 (a relu's
    output) never divides; when every differing element expects 0 or inf it is inf.
    """
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    if a.size == 0:
        return 0.0, 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        same = (a == e) | (np.isnan(a) & np.isnan(e))
        diff = np.where(same, 0.0, np.abs(a - e))
    diff = np.where(np.isnan(diff), np.inf, diff)
    max_abs = float(diff.max())
    if max_abs == 0.0:
        return 0.0, 0.0
    measurable = np.isfinite(e) & (e != 0)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        rel = diff[measurable] / np.abs(e[measurable])
    max_rel = float(rel.max()) if rel.size else 0.0
    return max_abs, (max_rel if max_rel > 0.0 else float("inf"))


def exceeds(actual: np.ndarray, expected: np.ndarray, rtol: float, atol: float) -> np.ndarray:
    """Boolean mask of elements beyond `atol + rtol * |expected|`; non-finite expected values must match
    exactly (nan matches nan). Integers and bools compare exactly with rtol = atol = 0."""
    a = np.asarray(actual).astype(np.float64)
    e = np.asarray(expected).astype(np.float64)
    finite = np.isfinite(e)
    bad = np.zeros(e.shape, dtype=bool)
    with np.errstate(over="ignore", invalid="ignore"):
        bad[finite] = ~(np.abs(a[finite] - e[finite]) <= atol + rtol * np.abs(e[finite]))
    bad[~finite] = ~((a[~finite] == e[~finite]) | (np.isnan(a[~finite]) & np.isnan(e[~finite])))
    return bad


def assert_close(actual: Any, expected: Any, rtol: float, atol: float, what: str = "output") -> None:
    """Raise a "numeric" CheckFailure when `actual` differs from `expected` beyond tolerance."""
    actual_list = list(actual) if isinstance(actual, (list, tuple)) else [actual]
    expected_list = list(expected) if isinstance(expected, (list, tuple)) else [expected]
    if len(actual_list) != len(expected_list):
        raise CheckFailure("numeric", f"{what}: {len(actual_list)} outputs, expected {len(expected_list)}")
    for index, (got, want) in enumerate(zip(actual_list, expected_list)):
        got, want = np.asarray(got), np.asarray(want)
        label = what if len(expected_list) == 1 else f"{what} {index}"
        if got.shape != want.shape:
            raise CheckFailure("numeric", f"{label}: shape {got.shape}, expected {want.shape}")
        if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
            bad = got.astype(want.dtype) != want if got.dtype != want.dtype else got != want
            if np.any(bad):
                max_abs, max_rel = errors(got, want)
                first = tuple(int(i) for i in np.argwhere(bad)[0])
                raise CheckFailure("numeric", f"{label}: {int(bad.sum())} of {want.size} elements differ "
                                   f"(first at {first}: got {got[first]!r}, expected {want[first]!r}); "
                                   f"max abs error {max_abs:.3g}", max_abs_error=max_abs, max_rel_error=max_rel)
            continue
        g, w = got.astype(np.float64), want.astype(np.float64)
        bad = exceeds(g, w, rtol, atol)
        if np.any(bad):
            max_abs, max_rel = errors(g, w)
            first = tuple(int(i) for i in np.argwhere(bad)[0])
            raise CheckFailure("numeric", f"{label}: {int(bad.sum())} of {w.size} elements beyond rtol={rtol:g} "
                               f"atol={atol:g} (first at {first}: got {g[first]:.6g}, expected {w[first]:.6g}); "
                               f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}",
                               max_abs_error=max_abs, max_rel_error=max_rel)


def first_line(text: str) -> str:
    return (text.strip().splitlines() or [""])[0]


def as_arrays(values: Sequence[Any]) -> list[np.ndarray]:
    return [np.asarray(v) for v in values]
