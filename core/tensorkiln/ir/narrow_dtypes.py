"""narrow_dtypes.py: the ONNX storage formats narrower than a byte's worth of arithmetic.

float8 (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz, e8m0fnu), float4_e2m1fn, int4/uint4 and int2/uint2 are
*storage* formats: ONNX only casts, quantizes, dequantizes and moves them. tensorkiln keeps them out
of its dtype system (no kernel, pass or plugin sees them) and carries each in a byte-wide dtype:

| format | carrier | what the carrier holds |
|---|---|---|
| float8_*, float4_e2m1fn | uint8 | the format's bit pattern (low bits for float4) |
| int4, int2 | int8 | the value |
| uint4, uint2 | uint8 | the value |

The ONNX frontend converts Cast/CastLike/QuantizeLinear/DequantizeLinear on them into graph
expressions on the carrier (frontend/onnx/converters/narrow.py), and the model boundary
(`tensorkiln.onnx_backend`, or `to_carrier` / `from_carrier` by hand) turns the arrays users
and onnx hand over (ml_dtypes arrays, one element per byte) into carriers and back:

    bits = to_carrier(x_float8)                        # uint8 bit patterns
    y = from_carrier(outputs[0], "float8_e4m3fn")      # ml_dtypes.float8_e4m3fn array

The numpy dtypes come from ml_dtypes (an onnx dependency), whose conversions define the
formats' rounding (round to nearest even), NaN and overflow behaviour.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import DTypeError

__all__ = ["NarrowFormat", "NARROW_FORMATS", "narrow_format", "format_of_onnx_type", "format_of_numpy",
           "to_carrier", "from_carrier", "float_code_table"]


@dataclass(frozen=True, slots=True)
class NarrowFormat:
    """One storage format: its name (the ml_dtypes name), ONNX element type and carrier dtype."""

    name: str
    onnx_type: int
    carrier: str
    is_float: bool
    bits: int

    @property
    def numpy_dtype(self) -> np.dtype:
        import ml_dtypes
        return np.dtype(getattr(ml_dtypes, self.name))

    @property
    def int_range(self) -> tuple[int, int]:
        """(lowest, highest) value of an integer format."""
        if self.is_float:
            raise DTypeError(f"{self.name} is a float format; it has no integer range")
        if self.carrier == "int8":
            return -(1 << (self.bits - 1)), (1 << (self.bits - 1)) - 1
        return 0, (1 << self.bits) - 1


# ONNX TensorProto element types (onnx.TensorProto.FLOAT8E4M3FN is 17, ...)
NARROW_FORMATS = {f.name: f for f in (
    NarrowFormat("float8_e4m3fn", 17, "uint8", True, 8),
    NarrowFormat("float8_e4m3fnuz", 18, "uint8", True, 8),
    NarrowFormat("float8_e5m2", 19, "uint8", True, 8),
    NarrowFormat("float8_e5m2fnuz", 20, "uint8", True, 8),
    NarrowFormat("uint4", 21, "uint8", False, 4),
    NarrowFormat("int4", 22, "int8", False, 4),
    NarrowFormat("float4_e2m1fn", 23, "uint8", True, 4),
    NarrowFormat("float8_e8m0fnu", 24, "uint8", True, 8),
    NarrowFormat("uint2", 25, "uint8", False, 2),
    NarrowFormat("int2", 26, "int8", False, 2),
)}
_BY_ONNX_TYPE = {f.onnx_type: f for f in NARROW_FORMATS.values()}


def narrow_format(name: str) -> NarrowFormat:
    """The format called `name` ("float8_e4m3fn", "int4", ...); DTypeError listing them otherwise."""
    if name not in NARROW_FORMATS:
        raise DTypeError(f"unknown narrow format {name!r}; use one of {', '.join(NARROW_FORMATS)}")
    return NARROW_FORMATS[name]


def format_of_onnx_type(elem_type: int) -> NarrowFormat | None:
    """The format of an ONNX element type, None for a type that is not a narrow format."""
    return _BY_ONNX_TYPE.get(int(elem_type))


def format_of_numpy(dtype) -> NarrowFormat | None:
    """The format of an ml_dtypes numpy dtype (float8_e4m3fn, int4, ...), None for any other dtype."""
    try:
        name = np.dtype(dtype).name
    except TypeError:
        return None
    found = NARROW_FORMATS.get(name)
    return found if found is not None and np.dtype(dtype) == found.numpy_dtype else None


def to_carrier(array) -> np.ndarray:
    """An ml_dtypes array of a narrow format as its carrier (float: the bit patterns; int: the values);
    any other array unchanged."""
    array = np.asarray(array)
    found = format_of_numpy(array.dtype)
    if found is None:
        return array
    if found.is_float:
        return np.ascontiguousarray(array).view(np.uint8)
    return array.astype(found.carrier)


def from_carrier(array, name: str) -> np.ndarray:
    """The carrier array of format `name` back as its ml_dtypes array."""
    found = narrow_format(name)
    array = np.asarray(array)
    if array.dtype != np.dtype(found.carrier):
        raise DTypeError(f"a {name} value travels as {found.carrier}, got an array of {array.dtype}")
    if found.is_float:
        return np.ascontiguousarray(array).view(found.numpy_dtype)
    return array.astype(found.numpy_dtype)


@dataclass(frozen=True)
class FloatCodeTable:
    """What encoding a float format needs, read off ml_dtypes.

    `values[i]` is the i-th non-negative finite value in increasing order, whose code is `codes[i]`;
    `midpoints[i]` lies between values i and i+1, plus one past the largest value, half an ulp above it,
    where round to nearest even starts to overflow. `overflow` is the code a value past that rounds to
    without saturation (inf, or NaN where the format lacks inf); `nan` / `negative_nan` the code of
    +NaN / -NaN; `sign` the sign bit (0 for unsigned formats); `has_negative_zero` False for the fnuz
    formats, whose 0x80 is NaN."""

    values: np.ndarray
    codes: np.ndarray
    midpoints: np.ndarray
    overflow: int
    nan: int
    negative_nan: int
    sign: int
    has_negative_zero: bool


@lru_cache(maxsize=None)
def float_code_table(name: str) -> FloatCodeTable:
    """The encoding table of float format `name` (not e8m0, which rounds by exponent; see converters)."""
    found = narrow_format(name)
    if not found.is_float or name == "float8_e8m0fnu":
        raise DTypeError(f"{name} has no float code table")
    count = 1 << found.bits
    sign = count >> 1
    decoded = np.arange(count, dtype=np.uint8).view(found.numpy_dtype).astype(np.float64)
    codes = np.array([c for c in range(sign) if np.isfinite(decoded[c])], dtype=np.int64)
    values = decoded[codes]
    if np.any(np.diff(values) <= 0):   # pragma: no cover - holds for every IEEE-like format
        raise DTypeError(f"{name}: codes are not monotonic")
    ulp = values[-1] - values[-2]
    midpoints = np.concatenate([(values[:-1] + values[1:]) / 2, [values[-1] + ulp / 2]])

    def code_of(value: float) -> int:
        return int(np.array([value], np.float32).astype(found.numpy_dtype).view(np.uint8)[0])

    has_negative_zero = bool(np.signbit(decoded[sign])) and decoded[sign] == 0
    return FloatCodeTable(values, codes, midpoints, code_of(np.inf), code_of(np.nan), code_of(-np.nan),
                          sign, has_negative_zero)
