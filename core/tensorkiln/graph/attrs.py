"""Typed, validated attribute records for ops.

An op's attributes are a frozen dataclass deriving from `Attrs`. Construction
checks each field against its annotation (int, float, bool, str, tuples of them,
`X | None`), converts lists to tuples and numpy scalars to Python scalars, checks
`_choices` for string fields, and calls the class's `_check()` for value rules.
Wrong input raises `AttrsError` (a TypeError/ValueError naming the class, the
field, the value and what is accepted).
"""
from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from ..ir.errors import TensorkilnError

__all__ = ["Attrs", "NoAttrs", "NO_ATTRS", "AttrsError"]


class AttrsError(TensorkilnError, ValueError):
    """An op attribute has the wrong type or value."""


@dataclass(frozen=True, slots=True)
class Attrs:
    """Base of attribute records; subclasses are frozen dataclasses with typed fields."""

    _choices: ClassVar[dict[str, tuple]] = {}

    def __post_init__(self) -> None:
        hints = _hints(type(self))
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            converted = _convert(value, hints[item.name])
            if converted is _BAD:
                raise AttrsError(
                    f"{type(self).__name__}.{item.name} = {value!r} has the wrong type; "
                    f"expected {_describe(hints[item.name])}")
            object.__setattr__(self, item.name, converted)
            allowed = self._choices.get(item.name)
            if allowed is not None and converted not in allowed:
                raise AttrsError(
                    f"{type(self).__name__}.{item.name} = {converted!r} is not one of {allowed}")
        self._check()

    def _check(self) -> None:
        """Value rules beyond types (positive strides, ...); raise AttrsError."""

    def fail(self, message: str) -> None:
        raise AttrsError(f"{type(self).__name__}: {message}")

    def items(self) -> list[tuple[str, Any]]:
        return [(f.name, getattr(self, f.name)) for f in dataclasses.fields(self)]

    def non_default_items(self) -> list[tuple[str, Any]]:
        out = []
        for item in dataclasses.fields(self):
            value = getattr(self, item.name)
            if item.default is dataclasses.MISSING or value != item.default:
                out.append((item.name, value))
        return out


@dataclass(frozen=True, slots=True)
class NoAttrs(Attrs):
    """Attributes of an op that has none."""


_BAD = object()


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _convert(value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        for option in typing.get_args(hint):
            converted = _convert(value, option)
            if converted is not _BAD:
                return converted
        return _BAD
    if hint is type(None):
        return None if value is None else _BAD
    if hint is Any:
        return value
    if origin is tuple:
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if not isinstance(value, (tuple, list)):
            return _BAD
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis:
            element_hints = [args[0]] * len(value)
        elif len(args) != len(value):
            return _BAD
        else:
            element_hints = list(args)
        items = tuple(_convert(v, h) for v, h in zip(value, element_hints))
        return _BAD if any(i is _BAD for i in items) else items
    if hint is bool:
        if isinstance(value, (bool, np.bool_)):
            return bool(value)
        if isinstance(value, (int, np.integer)) and value in (0, 1):
            return bool(value)
        return _BAD
    if hint is int:
        if isinstance(value, (bool, np.bool_)):
            return _BAD
        return int(value) if isinstance(value, (int, np.integer)) else _BAD
    if hint is float:
        if isinstance(value, (bool, np.bool_)):
            return _BAD
        return float(value) if isinstance(value, (int, float, np.integer, np.floating)) else _BAD
    if hint is str:
        return value if isinstance(value, str) else _BAD
    return value if isinstance(value, hint) else _BAD


def _describe(hint: Any) -> str:
    return getattr(hint, "__name__", None) if isinstance(hint, type) else str(hint).replace("typing.", "")


NO_ATTRS = NoAttrs()
