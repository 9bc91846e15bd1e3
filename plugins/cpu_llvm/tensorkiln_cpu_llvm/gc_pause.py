"""gc_pause.py: Python's cyclic garbage collector paused while an llvmlite module is built.

A module under construction is tens of thousands of live container objects (instructions, their
operand lists, blocks, constants) that no collection can free: every young collection during the
build traversed them (and each survivor again in the next generation), about 0.3 s of densenet121's
compile. The emitter builds one chunk at a time with the collector paused, prints it, and breaks the
module's own cycles (emitter._dismantle) so it is freed without the collector. The pause nests and
may be entered from several threads: the collector is enabled again when the last pause ends, and a
collector that was disabled before the first pause stays disabled.
"""
from __future__ import annotations

import contextlib
import gc
import threading
from typing import Iterator

__all__ = ["collector_paused"]

_lock = threading.Lock()
_depth = 0
_reenable = False


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    global _depth, _reenable
    with _lock:
        if _depth == 0:
            _reenable = gc.isenabled()
            gc.disable()
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0 and _reenable:
                gc.enable()
