"""tests/runtime/kernels.py: Hand-built tir kernels for the cpu_llvm runtime tests (no te needed)."""
from __future__ import annotations

import numpy as np

import tensorkiln as tk
from tensorkiln import tir


def buf(name: str, shape, dtype: str = "float32", scope: str = "global") -> tir.Buffer:
    return tir.Buffer(name, tuple(tir.const(int(s)) for s in shape), dtype, scope=scope)


def loop(var: tir.Var, extent, body, kind=tir.ForKind.SERIAL, start=0) -> tir.For:
    return tir.For(var, tir.as_expr(start), tir.as_expr(extent), kind, body)


def elementwise(name: str, n: int, inputs: list[tir.Buffer], out: tir.Buffer, fn, kind=tir.ForKind.SERIAL):
    """out[i] = fn(*loads at i) over a flat range of n."""
    i = tir.Var("i")
    body = tir.Store(out, fn(*(tir.Load(b, i) for b in inputs)), i)
    return tir.PrimFunc(name, (*inputs, out), loop(i, n, body, kind))


def build(func: tir.PrimFunc, target: str = "llvm"):
    return tk.build(func, target=target, name=func.name)


def rand(shape, dtype: str, rng=None, low=-4, high=4):
    rng = rng or np.random.default_rng(0)
    if dtype == "bool":
        return rng.integers(0, 2, size=shape).astype(np.bool_)
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(low, info.min), min(high, info.max) + 1, size=shape).astype(dtype)
    return rng.uniform(low, high, size=shape).astype(dtype)
