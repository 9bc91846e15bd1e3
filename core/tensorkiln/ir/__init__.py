"""Shared IR foundations: dtypes and errors."""
from .dtypes import DType, dtype_of, from_numpy, to_numpy, with_lanes
from .errors import *  # noqa: F401,F403
from .errors import __all__ as _error_names

__all__ = ["DType", "dtype_of", "from_numpy", "to_numpy", "with_lanes", *_error_names]
