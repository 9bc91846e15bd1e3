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

from typing import Any, Iterable, Sequence

import numpy as np

from ..graph import Expr, Function, Module, Tuple
from ..ir.errors import TensorkilnError
from ..passes.value_ranges import (  # noqa: F401 - re-exported: the range math lives below the compiler
    BINS, METHODS, Range, _asymmetric_entropy, _edges, _percentile_range, as_feeds, entropy_threshold,
)

__all__ = ["METHODS", "Range", "calibrate", "as_feeds", "entropy_threshold"]

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
