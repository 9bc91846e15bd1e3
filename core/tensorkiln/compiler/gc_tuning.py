"""gc_tuning.py: Python's cyclic garbage collector held back while a model compiles.

A compile allocates millions of container objects (graph, tir, llvmlite IR) that mostly stay
alive until it ends, and every collection of the oldest generation traverses them all, plus
everything the process held before the compile (imported modules, the ONNX model): collections
took 15-20% of densenet121's compile CPU (1.4 of 8 s). While the outermost compile runs, the
objects that existed before it are frozen (`gc.freeze`: collections skip them) and young
collections run less often; both are restored when it ends. Garbage made during the compile is
still collected, only in larger batches.

A process that froze objects itself keeps its freeze: then only the threshold changes, since
`gc.unfreeze` cannot tell our frozen objects from its own. A disabled collector stays disabled.
"""
from __future__ import annotations

import functools
import gc
import threading
from typing import Callable, TypeVar

__all__ = ["holding_gc", "COMPILE_THRESHOLD0"]

COMPILE_THRESHOLD0 = 10_000
"""Allocations between young collections during a compile (Python's default is 700)."""

_lock = threading.Lock()
_depth = 0
_saved: tuple[tuple[int, ...], bool] | None = None

F = TypeVar("F", bound=Callable)


def _enter() -> None:
    global _depth, _saved
    with _lock:
        _depth += 1
        if _depth > 1:   # a nested or concurrent compile: the outermost one restores
            return
        threshold = gc.get_threshold()
        freeze = gc.isenabled() and gc.get_freeze_count() == 0
        _saved = (threshold, freeze)
        if freeze:
            gc.freeze()
        gc.set_threshold(max(COMPILE_THRESHOLD0, threshold[0]), *threshold[1:])


def _exit() -> None:
    global _depth, _saved
    with _lock:
        _depth -= 1
        if _depth or _saved is None:
            return
        threshold, froze = _saved
        _saved = None
        gc.set_threshold(*threshold)
        if froze:
            gc.unfreeze()


def holding_gc(function: F) -> F:
    """`function` run with the collector tuned for a compile (see the module docstring)."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        _enter()
        try:
            return function(*args, **kwargs)
        finally:
            _exit()
    return wrapper   # type: ignore[return-value]
