"""sdk/fixed_point.py: the fixed-point format of one kernel tensor, as the core's precision plan chooses it.

    FixedPoint(width=16, integer=6)      # two's complement, 6 integer bits (sign included), 10 fraction bits

The core never names a target type: an FPGA plugin maps a FixedPoint to ap_fixed<16,6,AP_RND_CONV,AP_SAT>,
another target to its own. Where formats come from: the `assign_fixed_point` pass
(tensorkiln.quantize.fixed_point), configured through the PassContext, gives each fused group's
float inputs and outputs a FixedPoint from their calibrated ranges. Lowering then writes them on the
kernel as the PrimFunc attribute TENSOR_FORMATS_ATTR, read with `tensor_formats(func)`:

    {buffer name: FixedPoint} of the kernel's parameters that have a format

Meaning, which a target must keep so the numpy reference (`fixed_point_reference`) is exact: a kernel
quantises each formatted input to its format, computes exactly, and quantises each formatted output
once (rounding, then overflow handling).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["FixedPoint", "TENSOR_FORMATS_ATTR", "ROUNDINGS", "OVERFLOWS", "tensor_formats"]

TENSOR_FORMATS_ATTR = "tensor_formats"
"""On a group Function: one FixedPoint or None per input, then per output. On a PrimFunc:
((buffer name, FixedPoint), ...) for the parameters that have a format."""

ROUNDINGS = ("nearest_even", "nearest_up", "truncate")
"""How a value between two steps is rounded: to the nearest, ties to even (ap_fixed's AP_RND_CONV)
or ties up (AP_RND); or toward minus infinity (AP_TRN)."""
OVERFLOWS = ("saturate", "wrap")
"""What happens past the range: clamp to it (AP_SAT) or keep the low bits (AP_WRAP)."""


@dataclass(frozen=True)
class FixedPoint:
    """`width` bits of which `integer` are integer bits (sign included when `signed`)."""

    width: int
    integer: int
    signed: bool = True
    rounding: str = "nearest_even"
    overflow: str = "saturate"

    def __post_init__(self) -> None:
        if not 1 <= self.width <= 64:
            raise ValueError(f"FixedPoint width {self.width} must be 1..64")
        if self.rounding not in ROUNDINGS:
            raise ValueError(f"FixedPoint rounding {self.rounding!r} is not one of {', '.join(ROUNDINGS)}")
        if self.overflow not in OVERFLOWS:
            raise ValueError(f"FixedPoint overflow {self.overflow!r} is not one of {', '.join(OVERFLOWS)}")

    @property
    def fraction(self) -> int:
        return self.width - self.integer

    @property
    def step(self) -> float:
        return 2.0 ** -self.fraction

    @property
    def bounds(self) -> tuple[float, float]:
        """The smallest and largest representable values."""
        low, high = self._integer_bounds()
        return low * self.step, high * self.step

    def _integer_bounds(self) -> tuple[float, float]:
        if self.signed:
            return -(2.0 ** (self.width - 1)), 2.0 ** (self.width - 1) - 1
        return 0.0, 2.0 ** self.width - 1

    def quantize(self, values) -> np.ndarray:
        """`values` as this format holds them, as float64 (exact for width <= 53)."""
        values = np.asarray(values, dtype=np.float64)
        scaled = values * 2.0 ** self.fraction
        if self.rounding == "nearest_even":
            integers = np.rint(scaled)
        elif self.rounding == "nearest_up":
            integers = np.floor(scaled + 0.5)
        else:
            integers = np.floor(scaled)
        low, high = self._integer_bounds()
        if self.overflow == "saturate":
            integers = np.clip(integers, low, high)
        else:
            integers = np.mod(integers - low, 2.0 ** self.width) + low
        return integers * self.step

    def __str__(self) -> str:
        return f"{'' if self.signed else 'u'}fixed<{self.width},{self.integer}>"


def tensor_formats(func) -> dict[str, FixedPoint]:
    """{buffer name: FixedPoint} of a lowered kernel (PrimFunc), {} when it has none."""
    return dict(func.attr(TENSOR_FORMATS_ATTR) or ())
