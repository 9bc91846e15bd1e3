"""Dtypes as strings: "float32", "int8", "bool", and vector forms "float32x8".

Strings keep IR readable and hashable; this module is the one place that knows
what they mean (bits, lanes, numpy equivalent).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from .errors import DTypeError

__all__ = ["DType", "dtype_of", "SCALAR_DTYPES", "to_numpy", "from_numpy", "with_lanes", "element_of", "to_python"]

SCALAR_DTYPES = (
    "bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
    "float16", "bfloat16", "float32", "float64", "handle",
)

_KIND = {"bool": "bool", "handle": "handle"}


@dataclass(frozen=True, slots=True)
class DType:
    """Parsed dtype: kind ("int", "uint", "float", "bfloat", "bool", "handle"), bits, lanes.

    bfloat16 (kind "bfloat": float32's exponent, 7 mantissa bits) is a float too (`is_float`).
    """

    kind: str
    bits: int
    lanes: int = 1

    @property
    def element(self) -> str:
        if self.kind in ("bool", "handle"):
            return self.kind
        return f"{self.kind}{self.bits}"

    @property
    def is_float(self) -> bool:
        return self.kind in ("float", "bfloat")

    @property
    def is_int(self) -> bool:
        return self.kind in ("int", "uint")

    @property
    def is_signed(self) -> bool:
        return self.kind == "int"

    @property
    def is_bool(self) -> bool:
        return self.kind == "bool"

    @property
    def bytes(self) -> int:
        return max(1, self.bits // 8) * self.lanes

    def __str__(self) -> str:
        return self.element if self.lanes == 1 else f"{self.element}x{self.lanes}"


@lru_cache(maxsize=None)
def dtype_of(name: str) -> DType:
    """Parse a dtype string; raise DTypeError naming the bad string and the accepted ones."""
    text = str(name)
    lanes = 1
    if "x" in text and text != "handle":
        text, _, lane_text = text.partition("x")
        if not lane_text.isdigit() or int(lane_text) < 1:
            raise DTypeError(f"bad dtype {name!r}: lanes must be a positive integer, e.g. 'float32x8'")
        lanes = int(lane_text)
    if text not in SCALAR_DTYPES:
        raise DTypeError(f"unknown dtype {name!r}; use one of {', '.join(SCALAR_DTYPES)}")
    if text in _KIND:
        return DType(_KIND[text], 8 if text == "bool" else 64, lanes)
    for kind in ("uint", "int", "float", "bfloat"):
        if text.startswith(kind):
            return DType(kind, int(text[len(kind):]), lanes)
    raise DTypeError(f"unknown dtype {name!r}")


def with_lanes(dtype: str, lanes: int) -> str:
    """"float32" with lanes 8 -> "float32x8"; lanes 1 gives the element type."""
    element = dtype_of(dtype).element
    return element if lanes == 1 else f"{element}x{lanes}"


def element_of(dtype: str) -> str:
    return dtype_of(dtype).element


def to_numpy(dtype: str) -> np.dtype:
    parsed = dtype_of(dtype)
    if parsed.lanes != 1 or parsed.kind == "handle":
        raise DTypeError(f"dtype {dtype!r} has no numpy equivalent")
    if parsed.kind == "bfloat":
        return np.dtype(_bfloat16())
    return np.dtype(parsed.element if parsed.kind != "bool" else np.bool_)


def _bfloat16() -> type:
    """numpy has no bfloat16; ml_dtypes (an onnx dependency) provides the numpy dtype."""
    try:
        import ml_dtypes
    except ImportError as error:  # pragma: no cover - onnx depends on ml_dtypes
        raise DTypeError("bfloat16 arrays need the ml_dtypes package: pip install ml_dtypes") from error
    return ml_dtypes.bfloat16


def from_numpy(dtype: np.dtype | type | str) -> str:
    np_dtype = np.dtype(dtype)
    name = "bool" if np_dtype == np.bool_ else np_dtype.name
    if name not in SCALAR_DTYPES:
        raise DTypeError(f"numpy dtype {np_dtype} is not supported by tensorkiln; use one of {', '.join(SCALAR_DTYPES[:-1])}")
    return name


def to_python(value):
    """`value` with numpy scalars as Python numbers (in tuples and lists too), for messages.

    numpy 2 prints `repr(np.int32(17))` as "np.int32(17)"; error messages show 17:
    `f"factor={to_python(factor)!r}"`.
    """
    if isinstance(value, np.generic):
        return value.item()
    if type(value) in (tuple, list):
        return type(value)(to_python(v) for v in value)
    return value
