"""Graph IR types: TensorType (static shape + dtype), TupleType and FuncType; Dim and
SymbolicTensorType describe a model's inputs when some dimensions are only known at run time.

The graph IR itself stays static: a model with symbolic dimensions is imported and compiled
once per concrete shape (see tensorkiln.runtime.specialize); SymbolicTensorType is the type
of its interface, which checks a run-time shape against the declared bounds and binds the
symbols (one value per name, shared by every input that names it)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir.dtypes import dtype_of
from ..ir.errors import ShapeError

__all__ = ["Type", "TensorType", "TupleType", "FuncType", "Dim", "SymbolicTensorType", "parse_shape"]


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


@dataclass(frozen=True, slots=True)
class Dim:
    """A symbolic dimension with inclusive bounds: Dim("batch", 1, 64); `upper` None is unbounded."""

    name: str
    lower: int = 1
    upper: int | None = None

    def __post_init__(self) -> None:
        if not self.name:
            raise ShapeError("a symbolic dimension needs a name")
        if self.lower < 0 or (self.upper is not None and self.upper < self.lower):
            raise ShapeError(f"dimension {self.name!r}: bounds {self.lower}..{self.upper} are empty or negative")

    def contains(self, value: int) -> bool:
        return self.lower <= value and (self.upper is None or value <= self.upper)

    @property
    def bounds(self) -> str:
        return f"{self.lower}..{'' if self.upper is None else self.upper}"

    def __str__(self) -> str:
        return f"{self.name}[{self.bounds}]"


@dataclass(frozen=True, slots=True)
class SymbolicTensorType(Type):
    """An input type whose dimensions are ints or Dims; `shape` None means any rank."""

    shape: tuple[int | Dim, ...] | None
    dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.shape is not None:
            dims = tuple(d if isinstance(d, Dim) else int(d) for d in self.shape)
            if any(not isinstance(d, Dim) and d < 0 for d in dims):
                raise ShapeError(f"shape {dims} has a negative dimension")
            object.__setattr__(self, "shape", dims)
        object.__setattr__(self, "dtype", str(dtype_of(str(self.dtype))))

    @property
    def is_static(self) -> bool:
        return self.shape is not None and not any(isinstance(d, Dim) for d in self.shape)

    @property
    def symbols(self) -> tuple[Dim, ...]:
        return tuple(d for d in self.shape or () if isinstance(d, Dim))

    def bind(self, shape: tuple[int, ...], what: str, bindings: dict[str, int]) -> TensorType:
        """Check a concrete `shape` against this type (rank, fixed sizes, bounds, and symbols seen
        before in `bindings`, which it extends); return the concrete TensorType. Raises ShapeError
        naming the input, the dimension and its bounds."""
        shape = tuple(int(d) for d in shape)
        if self.shape is None:
            return TensorType(shape, self.dtype)
        if len(shape) != len(self.shape):
            raise ShapeError(f"{what} has shape {shape} ({len(shape)} dimensions); it was declared as {self} "
                             f"({len(self.shape)} dimensions)")
        for axis, (size, dim) in enumerate(zip(shape, self.shape)):
            if not isinstance(dim, Dim):
                if size != dim:
                    raise ShapeError(f"{what} has shape {shape}: dimension {axis} is {size}, but it was declared "
                                     f"static {dim} (type {self}); declare it symbolic to vary it")
                continue
            if not dim.contains(size):
                raise ShapeError(f"{what} has shape {shape}: dimension {axis} ({dim.name!r}) is {size}, outside its "
                                 f"bounds {dim.bounds}; compile with wider bounds for {dim.name!r} to run it")
            if bindings.setdefault(dim.name, size) != size:
                raise ShapeError(f"{what} has shape {shape}: dimension {axis} ({dim.name!r}) is {size}, but "
                                 f"{dim.name!r} is {bindings[dim.name]} in another input of this call")
        return TensorType(shape, self.dtype)

    def __str__(self) -> str:
        if self.shape is None:
            return f"{self.dtype}(*)"
        return f"{self.dtype}({', '.join(map(str, self.shape))})"


def parse_shape(text: str, name: str = "dim") -> tuple[int | Dim, ...]:
    """Parse "?x3x224x224", "batch:1..64,3,224,224", "1..8x128": dimensions separated by "x" (or by
    "," when the text has one). A dimension is an int, "?" (unbounded, named `name` + its axis),
    "lo..hi" (bounded; lo defaults to 1, a missing hi is unbounded), or a symbol name, optionally with bounds
    ("seq" or "seq:1..512"); the same name in several places is the same size."""
    parts = text.split(",") if "," in text else text.split("x")
    dims: list[int | Dim] = []
    for axis, part in enumerate(p.strip() for p in parts):
        if not part:
            raise ShapeError(f"shape {text!r}: dimension {axis} is empty")
        if part.lstrip("-").isdigit():
            dims.append(int(part))
            continue
        symbol, _, bounds = part.partition(":")
        if ".." in symbol and not bounds:
            symbol, bounds = "?", symbol
        if symbol == "?":
            symbol = f"{name}{axis}"
        elif not symbol.replace("_", "").replace(".", "").isalnum():
            raise ShapeError(f"shape {text!r}: dimension {axis} ({part!r}) is not an int, '?', 'lo..hi' or a name")
        dims.append(_dim_with_bounds(symbol, bounds, text))
    return tuple(dims)


def _dim_with_bounds(symbol: str, bounds: str, text: str) -> Dim:
    if not bounds:
        return Dim(symbol, 1, None)
    low, sep, high = bounds.partition("..")
    try:
        if not sep:
            raise ValueError
        return Dim(symbol, int(low) if low else 1, int(high) if high else None)
    except ValueError:
        raise ShapeError(f"shape {text!r}: bounds {bounds!r} of {symbol!r} must look like lo..hi") from None
