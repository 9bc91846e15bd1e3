"""Graph IR types: TensorType (static shape + dtype), TupleType and FuncType."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import dtype_of
from ..ir.errors import ShapeError

__all__ = ["Type", "TensorType", "TupleType", "FuncType"]


class Type:
    """Base of graph types; types are small, flat and compare by value."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class TensorType(Type):
    """A tensor with a static shape: TensorType((1, 3, 224, 224), "float32")."""

    shape: tuple[int, ...]
    dtype: str = "float32"

    def __post_init__(self) -> None:
        try:
            shape = tuple(int(d) for d in self.shape)
        except (TypeError, ValueError):
            raise ShapeError(f"shape {self.shape!r} must be a tuple of ints (static shapes only)") from None
        if any(d < 0 for d in shape):
            raise ShapeError(f"shape {shape} has a negative dimension")
        object.__setattr__(self, "shape", shape)
        object.__setattr__(self, "dtype", str(dtype_of(str(self.dtype))))

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64))

    def __str__(self) -> str:
        return f"{self.dtype}({', '.join(map(str, self.shape))})" if self.shape else f"{self.dtype}()"


@dataclass(frozen=True, slots=True)
class TupleType(Type):
    """The type of a Tuple expression or a multi-output op (split, topk)."""

    fields: tuple[Type, ...]

    def __str__(self) -> str:
        return f"({', '.join(map(str, self.fields))}{',' if len(self.fields) == 1 else ''})"


@dataclass(frozen=True, slots=True)
class FuncType(Type):
    """The type of a Function: parameter types -> result type."""

    arg_types: tuple[Type, ...]
    ret_type: Type

    def __str__(self) -> str:
        return f"fn({', '.join(map(str, self.arg_types))}) -> {self.ret_type}"
