"""sdk/host_arrays.py: numpy arrays whose data starts on a 64-byte boundary (a cache line, one AVX-512 vector).

numpy takes its memory from malloc, which aligns to 16 bytes. A kernel's vector loads
from a 16-byte-aligned weight or arena then straddle two cache lines one time in four
(or in every load, for 64-byte vectors at a 32-byte offset), and where a buffer starts
changes from run to run: the same conv measured 125-186 GFLOP/s across compiles of one
model (14x14x512 3x3, AVX-512) before the executor's arenas and constants came from here.
The memory plan's offsets are multiples of ALIGNMENT, so an aligned arena keeps every
intermediate aligned too.
"""
from __future__ import annotations

import numpy as np

__all__ = ["ALIGNMENT", "aligned_empty", "aligned_copy", "is_aligned"]

ALIGNMENT = 64


def is_aligned(array: np.ndarray, alignment: int = ALIGNMENT) -> bool:
    return array.ctypes.data % alignment == 0


def aligned_empty(shape, dtype, alignment: int = ALIGNMENT) -> np.ndarray:
    """An uninitialised C-contiguous array of `shape` and `dtype` whose data is `alignment`-aligned."""
    dtype = np.dtype(dtype)
    shape = (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    raw = np.empty(nbytes + alignment, dtype=np.uint8)
    start = -raw.ctypes.data % alignment
    return raw[start:start + nbytes].view(dtype).reshape(shape)


def aligned_copy(array, alignment: int = ALIGNMENT) -> np.ndarray:
    """`array` as a C-contiguous, `alignment`-aligned array: itself when it already is one, else a copy."""
    array = np.asarray(array)
    if array.flags.c_contiguous and is_aligned(array, alignment):
        return array
    out = aligned_empty(array.shape, array.dtype, alignment)
    out[...] = array
    return out
