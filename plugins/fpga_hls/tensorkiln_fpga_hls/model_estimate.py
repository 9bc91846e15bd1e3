"""model_estimate.py: a compiled model's FPGA estimate, from the per-kernel estimates (estimate.py).

    totals = model_estimate(tk.compile(model, target="fpga_hls"))
    totals["cycles"], totals["seconds"], totals["DSP"], ...

- cycles: the plan's kernel launches run one after another (each kernel is its own top function,
  started by the host), so the model's latency is the sum of BestLatency over the launches;
- resources: one compute unit per distinct kernel, as the v++ Makefile (vitis.py) links them, so
  DSP, LUT, FF and BRAM_18K add up over distinct kernels; `largest` names the kernel using the most LUT.
Reading the estimates needs no g++: they are computed when the kernels are emitted.
"""
from __future__ import annotations

from typing import Any

__all__ = ["model_estimate", "RESOURCE_KEYS"]

RESOURCE_KEYS = ("DSP", "LUT", "FF", "BRAM_18K")


def model_estimate(lib: Any, clock_mhz: float | None = None) -> dict[str, Any]:
    """Totals of `lib` (a CompiledModel for fpga_hls): cycles, seconds at the clock, resources."""
    estimates = lib.estimates()
    steps = [step for step in lib.plan.steps if step.kernel in estimates]
    missing = sorted({step.kernel for step in lib.plan.steps if step.kernel not in estimates})
    cycles = sum(int(estimates[step.kernel]["BestLatency"]) for step in steps)
    if clock_mhz is None:   # the target's -clock_mhz (the reports' TargetClockPeriod is rounded)
        clocks = {float((getattr(t, "options", {}) or {}).get("clock_mhz") or 300)
                  for t in lib.target_objects.values() if getattr(t, "name", "") == "fpga_hls"}
        clock_mhz = clocks.pop() if len(clocks) == 1 else 300.0
    totals = {key: sum(float(e.get(key, 0)) for e in estimates.values()) for key in RESOURCE_KEYS}
    largest = max(estimates, key=lambda name: float(estimates[name].get("LUT", 0)), default=None)
    return {"kernels": len(estimates), "launches": len(steps), "cycles": cycles, "clock_mhz": clock_mhz,
            "seconds": cycles / (clock_mhz * 1e6), **{k: int(round(v)) for k, v in totals.items()},
            "largest": largest, "not_estimated": missing}
