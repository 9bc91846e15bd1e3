"""passes/assign_fixed_point.py: give every fused group's float inputs and outputs a fixed-point format.

Runs after fusion (the compiler calls it on the grouped module: formats belong to kernel
boundaries) and only when the PassContext configures it:

    PassContext(config={"assign_fixed_point": {"width": 16, "calibration": samples,
                                               "method": "minmax" | "percentile" | "entropy",
                                               "rounding": "nearest_even", "overflow": "saturate"}})

The work is tensorkiln.passes.fixed_point_plan.assign_fixed_point; a target reads the formats of a
kernel with tensorkiln.sdk.tensor_formats(func).
"""
from __future__ import annotations

from ..graph import Module
from .manager import register_pass

__all__ = ["assign_fixed_point_pass"]

_KEYS = ("width", "calibration", "method", "percentile", "rounding", "overflow")


@register_pass("assign_fixed_point", opt_level=0)
def assign_fixed_point_pass(mod: Module, target=None, config: dict | None = None) -> Module:
    """Formats from calibrated ranges (config: width, calibration, method, ...); no config, no change."""
    if not config:
        return mod
    from ..ir.errors import TensorkilnError
    from .fixed_point_plan import assign_fixed_point
    unknown = set(config) - set(_KEYS)
    if unknown:
        raise TensorkilnError(f"assign_fixed_point: unknown config keys {sorted(unknown)}; known: {', '.join(_KEYS)}")
    if "calibration" not in config:
        raise TensorkilnError("assign_fixed_point needs 'calibration': an iterable of input samples (an array for a "
                              "one-input model, or a dict by input name)")
    return assign_fixed_point(mod, **config)
