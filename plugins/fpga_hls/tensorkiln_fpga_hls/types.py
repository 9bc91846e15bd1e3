"""types.py: HLS element types of tensors (float, ap_int, ap_fixed) and their numpy reference.

A tensor's HLS type is written as in Vitis HLS: "float", "ap_int<8>", "ap_uint<4>",
"ap_fixed<16,6>", "ap_ufixed<8,2,AP_RND_CONV,AP_SAT>". `HLSType.parse` reads it;
`quantize(values, type)` rounds and saturates float64 values exactly as the ap_fixed
conversion from double does, so a numpy reference of a fixed-point kernel (quantised
inputs, exact arithmetic, quantised output) equals C-simulation bit for bit.

Types are chosen per tensor: the target options `-data_type=ap_fixed<16,6>` (every float
tensor) and `-tensor_types="A=ap_fixed<8,3>;C=ap_fixed<16,6,AP_RND,AP_SAT>"`, the core's
precision plan (`tensorkiln.sdk.tensor_formats(func)`: a FixedPoint per kernel tensor from
calibrated ranges, written by the assign_fixed_point pass; `from_fixed_point` maps it), or
the PrimFunc attribute TENSOR_TYPES_ATTR ({buffer name: type}).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from tensorkiln.ir.errors import CompileError, TargetError

__all__ = ["HLSType", "FLOAT", "QUANTIZATION_MODES", "OVERFLOW_MODES", "TENSOR_TYPES_ATTR", "quantize",
           "parse_tensor_types", "container_dtype", "to_bits", "from_bits", "from_fixed_point"]

TENSOR_TYPES_ATTR = "hls.tensor_types"
"""PrimFunc attribute: ((buffer name, HLS type text), ...), e.g. written by a precision pass."""

QUANTIZATION_MODES = ("AP_TRN", "AP_TRN_ZERO", "AP_RND", "AP_RND_ZERO", "AP_RND_INF", "AP_RND_MIN_INF",
                      "AP_RND_CONV")
OVERFLOW_MODES = ("AP_WRAP", "AP_SAT", "AP_SAT_ZERO", "AP_SAT_SYM")
MAX_FIXED_BITS = 32
"""Widest tensor type: values pass through float64 (53-bit mantissa) in the reference and bridge."""

_TYPE = re.compile(r"^\s*(ap_int|ap_uint|ap_fixed|ap_ufixed)\s*<\s*([^>]*)>\s*$")


@dataclass(frozen=True)
class HLSType:
    """One element type: `kind` "float", "int" or "fixed"; `width`, `integer` bits, modes for fixed."""

    kind: str
    width: int = 32
    integer: int = 32
    signed: bool = True
    quantization: str = "AP_TRN"
    overflow: str = "AP_WRAP"

    @property
    def fraction(self) -> int:
        return self.width - self.integer

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def cpp(self) -> str:
        """The C++ type: `float`, `ap_int<8>`, `ap_fixed<16,6,AP_RND_CONV,AP_SAT>`."""
        if self.is_float:
            return "float"
        prefix = "ap_" if self.signed else "ap_u"
        if self.kind == "int":
            return f"{prefix}int<{self.width}>"
        modes = "" if (self.quantization, self.overflow) == ("AP_TRN", "AP_WRAP") else \
            f",{self.quantization},{self.overflow}"
        return f"{prefix}fixed<{self.width},{self.integer}{modes}>"

    @classmethod
    def parse(cls, text: str) -> "HLSType":
        """Read "float", "ap_int<8>", "ap_fixed<16,6,AP_RND,AP_SAT>", ...; TargetError names what is wrong."""
        text = text.strip()
        if text in ("float", "float32"):
            return FLOAT
        match = _TYPE.match(text)
        if match is None:
            raise TargetError(f"fpga_hls: unknown tensor type {text!r}; write float, ap_int<W>, ap_uint<W>, "
                              "ap_fixed<W,I[,Q[,O]]> or ap_ufixed<W,I[,Q[,O]]>")
        name, args = match.group(1), [a.strip() for a in match.group(2).split(",")]
        signed = not name.startswith("ap_u")
        try:
            width = int(args[0])
            integer = width if name.endswith("int") else int(args[1])
        except (ValueError, IndexError):
            raise TargetError(f"fpga_hls: tensor type {text!r} needs integer widths, e.g. ap_fixed<16,6>") from None
        if name.endswith("int"):
            if len(args) != 1:
                raise TargetError(f"fpga_hls: {text!r}: {name} takes one width, e.g. {name}<8>")
            modes = ["AP_TRN", "AP_WRAP"]
        else:
            modes = args[2:] + ["AP_TRN", "AP_WRAP"][len(args) - 2:]
            if len(args) > 4:
                raise TargetError(f"fpga_hls: {text!r}: ap_fixed takes <W, I, quantization, overflow>")
        if not 1 <= width <= MAX_FIXED_BITS:
            raise TargetError(f"fpga_hls: {text!r}: width {width} must be 1..{MAX_FIXED_BITS} (values pass through "
                              "float64 exactly only up to that)")
        if modes[0] not in QUANTIZATION_MODES:
            raise TargetError(f"fpga_hls: {text!r}: quantization mode {modes[0]!r} is not one of "
                              f"{', '.join(QUANTIZATION_MODES)}")
        if modes[1] not in OVERFLOW_MODES:
            raise TargetError(f"fpga_hls: {text!r}: overflow mode {modes[1]!r} is not one of {', '.join(OVERFLOW_MODES)}")
        return cls("int" if name.endswith("int") else "fixed", width, integer, signed, modes[0], modes[1])


FLOAT = HLSType("float")

_AP_ROUNDING = {"nearest_even": "AP_RND_CONV", "nearest_up": "AP_RND", "truncate": "AP_TRN"}
_AP_OVERFLOW = {"saturate": "AP_SAT", "wrap": "AP_WRAP"}


def from_fixed_point(fmt) -> HLSType:
    """The ap_fixed type of a core FixedPoint (tensorkiln.sdk): same width, integer bits, signedness,
    rounding (nearest_even -> AP_RND_CONV, nearest_up -> AP_RND, truncate -> AP_TRN) and overflow
    (saturate -> AP_SAT, wrap -> AP_WRAP)."""
    if not 1 <= fmt.width <= MAX_FIXED_BITS:
        raise TargetError(f"fpga_hls: fixed-point format {fmt} is wider than {MAX_FIXED_BITS} bits; ask the "
                          f"precision plan for width <= {MAX_FIXED_BITS}")
    return HLSType("fixed", fmt.width, fmt.integer, fmt.signed, _AP_ROUNDING[fmt.rounding], _AP_OVERFLOW[fmt.overflow])


def parse_tensor_types(text: str) -> dict[str, HLSType]:
    """"A=ap_fixed<8,3>;C=ap_fixed<16,6>" -> {name: HLSType}; TargetError for a malformed entry."""
    found: dict[str, HLSType] = {}
    for item in filter(None, (part.strip() for part in (text or "").split(";"))):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise TargetError(f"fpga_hls: -tensor_types entry {item!r} must read NAME=TYPE, e.g. A=ap_fixed<8,3>")
        found[name.strip()] = HLSType.parse(value)
    return found


def _round(scaled: np.ndarray, mode: str) -> np.ndarray:
    """`scaled` (value * 2**F) rounded to an integer by an ap_fixed quantization mode."""
    floor = np.floor(scaled)
    half = scaled - floor == 0.5
    if mode == "AP_TRN":
        return floor
    if mode == "AP_TRN_ZERO":
        return np.trunc(scaled)
    nearest = np.floor(scaled + 0.5)            # ties up (toward +inf): AP_RND
    ties = {"AP_RND": floor + 1, "AP_RND_MIN_INF": floor, "AP_RND_CONV": floor + (floor % 2 != 0),
            "AP_RND_ZERO": np.where(scaled > 0, floor, floor + 1),
            "AP_RND_INF": np.where(scaled > 0, floor + 1, floor)}[mode]
    return np.where(half, ties, nearest)


def quantize(values, hls_type: HLSType) -> np.ndarray:
    """`values` as `hls_type` holds them (float64): ap_fixed's rounding, then its overflow handling."""
    values = np.asarray(values, dtype=np.float64)
    if hls_type.is_float:
        return values.astype(np.float32).astype(np.float64)
    if not np.all(np.isfinite(values)):
        raise CompileError(f"quantize to {hls_type.cpp}: values include NaN or infinity, which fixed point cannot hold")
    scale = 2.0 ** hls_type.fraction
    integers = _round(values * scale, hls_type.quantization)
    width = hls_type.width
    low, high = (-(2.0 ** (width - 1)), 2.0 ** (width - 1) - 1) if hls_type.signed else (0.0, 2.0 ** width - 1)
    over, under = integers > high, integers < low
    mode = hls_type.overflow
    if mode == "AP_WRAP":
        modulus = 2.0 ** width
        integers = np.mod(integers - low, modulus) + low
    elif mode == "AP_SAT":
        integers = np.clip(integers, low, high)
    elif mode == "AP_SAT_ZERO":
        integers = np.where(over | under, 0.0, integers)
    else:   # AP_SAT_SYM: the most negative code is not used
        low = -high if hls_type.signed else low
        integers = np.clip(integers, low, high)
    return integers / scale


# --- host-side bit packing (the board device) -----------------------------------------------

def container_dtype(hls_type: HLSType) -> np.dtype:
    """The numpy integer that holds one element in device memory: ap_[u]fixed / ap_[u]int<W> take the
    smallest power-of-two number of bytes that holds W bits (Vitis' m_axi layout, and sizeof() of
    the C-simulation types), with the W-bit two's-complement value sign-extended."""
    if hls_type.is_float:
        return np.dtype(np.float32)
    size = next(n for n in (1, 2, 4, 8) if hls_type.width <= 8 * n)
    return np.dtype(f"{'i' if hls_type.signed else 'u'}{size}")


def to_bits(values, hls_type: HLSType) -> np.ndarray:
    """`values` (a host array) as device words of `hls_type`, converted as the C-simulation bridge
    converts them: fixed point from double with the type's rounding and overflow, ap_int from the
    value truncated toward zero to int64, then wrapped to W bits."""
    values = np.asarray(values)
    if hls_type.is_float:
        return values.astype(np.float32)
    if hls_type.kind == "fixed":
        integers = quantize(values.astype(np.float64), hls_type) * 2.0 ** hls_type.fraction
        return integers.astype(np.int64).astype(container_dtype(hls_type))
    integers = np.trunc(values).astype(np.int64) if values.dtype.kind == "f" else values.astype(np.int64)
    return _wrap(integers, hls_type).astype(container_dtype(hls_type))


def from_bits(words, hls_type: HLSType) -> np.ndarray:
    """Device words of `hls_type` as float64 values (fixed) or int64 (ap_int): the low W bits of each
    word, sign-extended when the type is signed, scaled by 2**-F."""
    words = np.asarray(words)
    if hls_type.is_float:
        return words.astype(np.float64)
    integers = _wrap(words.astype(np.int64), hls_type)
    return integers / 2.0 ** hls_type.fraction if hls_type.kind == "fixed" else integers


def _wrap(integers: np.ndarray, hls_type: HLSType) -> np.ndarray:
    """int64 `integers` reduced to W bits, two's complement when signed."""
    width = hls_type.width
    if width >= 64:
        return integers
    low = integers.astype(np.int64) & np.int64((1 << width) - 1)
    if hls_type.signed:
        low = np.where(low >= (1 << (width - 1)), low - (1 << width), low)
    return low.astype(np.int64)
