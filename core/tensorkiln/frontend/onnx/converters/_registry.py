"""The table from ONNX op type to converter function."""
from __future__ import annotations

from typing import Callable

CONVERTERS: dict[str, Callable] = {}


def converter(*op_types: str):
    """Register the decorated function as the converter of each ONNX op type in `op_types`."""
    def register(fn: Callable) -> Callable:
        for op_type in op_types:
            CONVERTERS[op_type] = fn
        return fn
    return register
