"""test_fpga_conformance.py: fpga_hls passes the kit's manifest, runtime, te and intrinsics levels.

The manifest level runs by default; the others build one C-simulation library per check
(about a minute together), so they are slow cases. `tensorkiln conformance fpga_hls`
runs every level, ops and models included.
"""
from __future__ import annotations

import pytest

import tensorkiln as tk
from tensorkiln.conformance.catalogue import CheckFailure, KitOptions, catalogue

_TARGET = tk.target("fpga_hls")
_FAST = [c for c in catalogue(_TARGET, ("manifest",), KitOptions(shapes_per_op=1)) if not c.is_skipped]
_SLOW = [c for c in catalogue(_TARGET, ("runtime", "te", "intrinsics"), KitOptions(shapes_per_op=1))
         if not c.is_skipped]


def _run(check):
    try:
        check.run(_TARGET)
    except CheckFailure as failure:
        pytest.fail(f"{check.id} ({failure.kind}): {failure.message}")


@pytest.mark.parametrize("check", _FAST, ids=[c.id for c in _FAST])
def test_manifest_level(check):
    _run(check)


@pytest.mark.slow
@pytest.mark.parametrize("check", _SLOW, ids=[c.id for c in _SLOW])
def test_runtime_te_and_intrinsics_levels(check):
    _run(check)
