"""quantize/calibrate.py: activation ranges of a float model over a calibration set.

Calibration runs the float model, compiled once, on every input of a user-supplied
iterable and watches the tensors that will be quantized (the data inputs of the convs
and dense layers). Three ways to turn what was seen into a range:

- "minmax": the smallest and largest value seen;
- "percentile": the `percentile`-th of |x| (symmetric) or the two tails (asymmetric), from a
  2048-bin histogram over the min/max range, so one outlier does not stretch the grid;
- "entropy": TensorRT's KL-divergence threshold: the clipping point of |x| whose 128-level
  quantized histogram is closest (Kullback-Leibler) to the full one.

The histogram methods need the range before they bin, so they run the model twice.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from ..graph import Expr, Function, Module, Tuple
from ..ir.errors import TensorkilnError

__all__ = ["METHODS", "Range", "calibrate", "as_feeds", "entropy_threshold"]

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


def probe(mod: Module, tensors: Sequence[Expr], target, opt_level: int = 2):
    """The model compiled to return [its own outputs..., *tensors]: the watch points stay exact values."""
    from ..compiler import compile as compile_model

    body = mod.main.body
    outputs = (*body.fields,) if isinstance(body, Tuple) else (body,)
    function = Function(mod.main.params, Tuple((*outputs, *tensors)), mod.main.attrs)
    return compile_model(Module.from_expr(function), target, opt_level=opt_level), len(outputs)


def _run(lib, feeds: dict[str, np.ndarray], skip: int) -> list[np.ndarray]:
    return list(lib.run(feeds))[skip:]


def calibrate(mod: Module, tensors: Sequence[Expr], samples: Iterable[Any], method: str = "minmax",
              symmetric: bool = True, percentile: float = 99.99, target="cpu_llvm") -> list[Range]:
    """The range of each of `tensors` (nodes of `mod`) over `samples` (see `as_feeds`)."""
    if method not in METHODS:
        raise TensorkilnError(f"unknown calibration method {method!r}; use one of {', '.join(METHODS)}")
    if not tensors:
        return []
    lib, skip = probe(mod, tensors, target)
    samples = [as_feeds(mod, s) for s in samples]
    if not samples:
        raise TensorkilnError("calibration needs at least one input sample")
    low = np.full(len(tensors), np.inf)
    high = np.full(len(tensors), -np.inf)
    for feeds in samples:
        for i, value in enumerate(_run(lib, feeds, skip)):
            low[i] = min(low[i], float(value.min()))
            high[i] = max(high[i], float(value.max()))
    if method == "minmax":
        return [Range(float(a), float(b)) for a, b in zip(low, high)]
    histograms = [np.zeros(BINS, np.int64) for _ in tensors]
    edges = [_edges(a, b, symmetric) for a, b in zip(low, high)]
    for feeds in samples:
        for i, value in enumerate(_run(lib, feeds, skip)):
            data = np.abs(value) if symmetric else value
            histograms[i] += np.histogram(data, bins=edges[i])[0]
    ranges = []
    for i in range(len(tensors)):
        if method == "percentile":
            ranges.append(_percentile_range(histograms[i], edges[i], percentile, symmetric, low[i], high[i]))
        else:
            threshold = entropy_threshold(histograms[i], edges[i]) if symmetric else None
            ranges.append(Range(-threshold, threshold) if symmetric else
                          _asymmetric_entropy(histograms[i], edges[i], low[i], high[i]))
    return ranges


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
