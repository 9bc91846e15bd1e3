"""device.py: the loader of the fpga_hls target: C-simulation (default) or a board over XRT (-device=xrt)."""
from __future__ import annotations

from typing import Any

from tensorkiln.sdk import Artifact, RuntimeLoader

from .csim import CSimLoader

__all__ = ["FPGALoader"]


class FPGALoader(RuntimeLoader):
    """Picks the device from the target's `-device` option; both run on host memory arrays."""

    def __init__(self) -> None:
        self._csim = CSimLoader()

    def load(self, artifact: Artifact, target: Any = None):
        options = getattr(target, "options", {}) or {}
        if options.get("device", "csim") == "xrt":
            from .xrt_device import XRTLoader
            return XRTLoader().load(artifact, target)
        return self._csim.load(artifact, target)

    def availability_note(self) -> str:
        return ("runs through bit-accurate C-simulation (g++, ap_fixed) by default; -device=xrt runs a built "
                "xclbin on a board through pyxrt")

    def describe_device(self, target: Any = None) -> str:
        options = getattr(target, "options", {}) or {}
        if options.get("device", "csim") == "xrt":
            return f"FPGA board through XRT ({options.get('xclbin') or 'no xclbin given'})"
        return self._csim.describe_device(target)
