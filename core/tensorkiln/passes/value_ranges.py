"""passes/value_ranges.py: ranges of tensor values from what a calibration run saw.

The arithmetic of calibration (tensorkiln.quantize.calibrate runs the model; this turns what it
saw into a range): minmax, percentile of a 2048-bin histogram, or TensorRT's KL-divergence
threshold. It sits below the compiler because the fixed-point pass (assign_fixed_point) uses it
while compiling, and calibration itself compiles the model.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..graph import Module
from ..ir.errors import TensorkilnError

__all__ = ["METHODS", "BINS", "Range", "as_feeds", "entropy_threshold"]

METHODS = ("minmax", "percentile", "entropy")
BINS = 2048
_QUANTIZED_LEVELS = 128   # int8 magnitudes the entropy method compares against


@dataclass(frozen=True)
class Range:
    """The calibrated range [low, high] of one tensor."""

    low: float
    high: float


def as_feeds(mod: Module, sample: Any) -> dict[str, np.ndarray]:
    """One calibration sample as {input name: array}: a dict as is, an array for a one-input model,
    or a sequence in parameter order."""
    names = [p.name for p in mod.main.params]
    if isinstance(sample, dict):
        missing = set(names) - set(sample)
        if missing:
            raise TensorkilnError(f"calibration sample lacks inputs {sorted(missing)}; the model takes {names}")
        return {n: np.asarray(sample[n]) for n in names}
    if isinstance(sample, np.ndarray):
        if len(names) != 1:
            raise TensorkilnError(f"a calibration sample for a model with inputs {names} must be a dict or a "
                                  "sequence in that order, not one array")
        return {names[0]: sample}
    values = list(sample)
    if len(values) != len(names):
        raise TensorkilnError(f"calibration sample has {len(values)} arrays; the model takes {names}")
    return dict(zip(names, (np.asarray(v) for v in values)))


def _edges(low: float, high: float, symmetric: bool) -> np.ndarray:
    if symmetric:
        top = max(abs(low), abs(high)) or 1.0
        return np.linspace(0.0, top, BINS + 1)
    if high <= low:
        high = low + 1.0
    return np.linspace(low, high, BINS + 1)


def _percentile_range(histogram, edges, percentile: float, symmetric: bool, low: float, high: float) -> Range:
    cumulative = np.cumsum(histogram) / max(1, histogram.sum())
    if symmetric:
        top = float(edges[min(BINS, int(np.searchsorted(cumulative, percentile / 100.0)) + 1)])
        return Range(-top, top)
    tail = (100.0 - percentile) / 100.0
    start = float(edges[int(np.searchsorted(cumulative, tail))])
    stop = float(edges[min(BINS, int(np.searchsorted(cumulative, 1.0 - tail)) + 1)])
    return Range(max(low, start), min(high, stop))


def entropy_threshold(histogram: np.ndarray, edges: np.ndarray, levels: int = _QUANTIZED_LEVELS) -> float:
    """The |x| clipping threshold minimizing KL(P || Q) (TensorRT's calibration): P is the histogram
    clipped at the threshold (outliers folded into the last bin), Q the same bins quantized to
    `levels` and expanded back over the bins that were non-zero."""
    histogram = histogram.astype(np.float64)
    if histogram.sum() == 0:
        return float(edges[-1])
    best, best_divergence = len(histogram), np.inf
    for stop in range(levels, len(histogram) + 1, 16):
        reference = histogram[:stop].copy()
        reference[-1] += histogram[stop:].sum()
        merged = np.array_split(histogram[:stop], levels)
        expanded = np.concatenate([
            np.where(chunk > 0, chunk.sum() / max(1, np.count_nonzero(chunk)), 0.0) for chunk in merged])
        mask = reference > 0
        p = reference / reference.sum()
        q = expanded / max(expanded.sum(), 1e-30)
        if np.any(q[mask] == 0):
            q = np.where(mask & (q == 0), 1e-10, q)
        divergence = float(np.sum(p[mask] * np.log(p[mask] / q[mask])))
        if divergence < best_divergence:
            best, best_divergence = stop, divergence
    return float(edges[best])


def _asymmetric_entropy(histogram, edges, low: float, high: float) -> Range:
    """Entropy on a signed range: the threshold of |x| from the signed histogram, clipped to [low, high]."""
    centers = (edges[:-1] + edges[1:]) / 2
    magnitude_edges = np.linspace(0.0, max(abs(low), abs(high)) or 1.0, BINS + 1)
    magnitudes = np.histogram(np.abs(centers), bins=magnitude_edges, weights=histogram)[0]
    threshold = entropy_threshold(magnitudes, magnitude_edges)
    return Range(max(low, -threshold), min(high, threshold))
