"""ops/bitcast.py: te compute of bitcast (tag "elemwise"): tir.Reinterpret of each element."""
from __future__ import annotations

from ..tir import nodes as n
from .elementwise import elemwise

__all__ = ["bitcast"]


def bitcast(inputs, attrs, out_type):
    """Each element's bits read as `attrs.dtype`."""
    (x,) = inputs
    return elemwise(x, lambda v: n.Reinterpret(attrs.dtype, v), "T_bitcast")
