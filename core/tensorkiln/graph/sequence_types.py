"""SymbolicSequenceType and SymbolicOptionalType: the types of a model's sequence and optional inputs.

The graph IR has neither sequences nor optionals: a model that takes one is imported and compiled
per run-time *structure* of the value (a sequence's length and element shapes; an optional present
or not), with the value's tensors as ordinary inputs (see tensorkiln.runtime.specialize). These
types are that model's interface, like SymbolicTensorType for a tensor input: they check a
run-time value against the declaration and give the key its compiled specialisation is cached by.

    SymbolicSequenceType(SymbolicTensorType((Dim("n"),), "float32"))   # takes [array, array, ...]
    SymbolicOptionalType(SymbolicTensorType((4,), "float32"))          # takes an array or None
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..ir.dtypes import to_numpy
from ..ir.errors import RuntimeLaunchError
from .types import SymbolicTensorType, Type

__all__ = ["SymbolicSequenceType", "SymbolicOptionalType", "is_structured_type", "structure_key"]


def _checked_tensor(ttype: SymbolicTensorType, value: Any, what: str, bindings: dict[str, int]) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype != to_numpy(ttype.dtype):
        raise RuntimeLaunchError(f"{what} has dtype {array.dtype}, expected {ttype.dtype}; "
                                 f"convert it with .astype(np.{to_numpy(ttype.dtype).name})")
    ttype.bind(array.shape, what, bindings)
    return array


@dataclass(frozen=True, slots=True)
class SymbolicSequenceType(Type):
    """A sequence input: any number of tensors of one dtype, each its own shape within `element`."""

    element: SymbolicTensorType

    @property
    def dtype(self) -> str:
        return self.element.dtype

    @property
    def shape(self) -> None:  # a sequence has no shape of its own: its elements do
        return None

    @property
    def is_static(self) -> bool:
        return False

    @property
    def symbols(self) -> tuple:
        return ()

    def check(self, value: Any, what: str, bindings: dict[str, int]) -> list[np.ndarray]:
        """The value as a list of arrays, each checked against `element`. Elements may differ in shape
        (onnx's sequences do), so a symbol binds per element, never across elements or inputs."""
        if value is None or isinstance(value, np.ndarray) or not isinstance(value, (list, tuple)):
            raise RuntimeLaunchError(f"{what} is a sequence of {self.element}: pass a list of arrays, got "
                                     f"{'None' if value is None else type(value).__name__}")
        return [_checked_tensor(self.element, item, f"{what}[{index}]", {}) for index, item in enumerate(value)]

    def __str__(self) -> str:
        return f"sequence<{self.element}>"


@dataclass(frozen=True, slots=True)
class SymbolicOptionalType(Type):
    """An optional input: None, or a value of `element` (a tensor or a sequence)."""

    element: SymbolicTensorType | SymbolicSequenceType

    @property
    def dtype(self) -> str:
        return self.element.dtype

    @property
    def shape(self) -> None:
        return None

    @property
    def is_static(self) -> bool:
        return False

    @property
    def symbols(self) -> tuple:
        return ()

    def check(self, value: Any, what: str, bindings: dict[str, int]) -> np.ndarray | list[np.ndarray] | None:
        if value is None:
            return None
        if isinstance(self.element, SymbolicSequenceType):
            return self.element.check(value, what, bindings)
        if isinstance(value, (list, tuple)):
            raise RuntimeLaunchError(f"{what} is an optional {self.element}: pass an array or None, got a "
                                     f"{type(value).__name__}")
        return _checked_tensor(self.element, value, what, bindings)

    def __str__(self) -> str:
        return f"optional<{self.element}>"


def is_structured_type(ttype: Any) -> bool:
    return isinstance(ttype, (SymbolicSequenceType, SymbolicOptionalType))


def structure_key(value: Any) -> Any:
    """What a compiled specialisation depends on in a checked value: an array's shape, a sequence's
    element shapes (so its length), or None for an absent optional."""
    if value is None:
        return None
    if isinstance(value, list):
        return ("sequence", tuple(item.shape for item in value))
    return value.shape
