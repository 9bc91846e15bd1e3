"""benchmarks/gemm_layouts.py: its arrays lie where it says (a huge-page region, the offset asked for, 16 bytes past
a line as numpy's allocator leaves them), and each layout's ratio comes from a product checked against numpy."""
from __future__ import annotations

import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import gemm_layouts  # noqa: E402


def test_arrays_are_placed_at_the_offset_asked_for_in_their_own_region():
    keep: list = []
    arrays = [gemm_layouts.placed((37, 29), offset, keep) for offset in (16, 4096 + 16, 65536 + 80)]
    for array, offset in zip(arrays, (16, 4096 + 16, 65536 + 80)):
        assert array.ctypes.data % gemm_layouts.HUGE_PAGE == offset and array.flags.c_contiguous
        array[...] = 1.5
    assert len({a.ctypes.data // gemm_layouts.HUGE_PAGE for a in arrays}) == 3 and all(a.sum() == 1.5 * 37 * 29
                                                                                        for a in arrays)


def test_each_layout_gives_one_ratio_from_a_checked_product():
    ratios = gemm_layouts.measure("native", "24x40x56", threads=1, layouts=2, seed=3, repeat=1)
    assert len(ratios) == 2 and all(math.isfinite(r) and r > 0 for r in ratios)
