"""ir/memory.py: tensor sizes in bytes and the memory limit they are checked against.

A shape that declares more bytes than the limit fails with MemoryLimitError before
anything is allocated (numpy would raise a raw MemoryError, or, with overcommit,
let the kernel kill the process later):

    check_tensor_fits((10**6, 10**6), "float32", limit=physical_memory_bytes(), what="graph input 'x'")
"""
from __future__ import annotations

import math
import os

from .dtypes import dtype_of
from .errors import MemoryLimitError

__all__ = ["physical_memory_bytes", "tensor_bytes", "check_tensor_fits", "format_bytes"]


def physical_memory_bytes() -> int:
    """The machine's physical memory (the default memory limit of from_onnx and tk.compile)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):  # no sysconf (Windows): no limit we can read
        return 1 << 62


def tensor_bytes(shape, dtype: str) -> int:
    """Bytes of a dense tensor; exact (Python ints), so a huge shape cannot wrap around as int64 does."""
    return math.prod(int(d) for d in shape) * dtype_of(str(dtype)).bytes


def check_tensor_fits(shape, dtype: str, limit: int | None, what: str) -> None:
    """Raise MemoryLimitError when a tensor of `shape` and `dtype` alone exceeds `limit` bytes (None: no check)."""
    if limit is None:
        return
    nbytes = tensor_bytes(shape, dtype)
    if nbytes > limit:
        raise MemoryLimitError(
            f"{what} has shape {tuple(int(d) for d in shape)} ({dtype}): {math.prod(int(d) for d in shape)} "
            f"elements, {format_bytes(nbytes)}, more than the memory limit of {format_bytes(limit)}; "
            "check the model's shapes, or raise memory_limit= if the machine really has that much")


def format_bytes(nbytes: int) -> str:
    """`1234567` -> '1234567 bytes (1.2 MiB)'."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= size:
            return f"{nbytes} bytes ({nbytes / size:.1f} {unit})"
    return f"{nbytes} bytes"
