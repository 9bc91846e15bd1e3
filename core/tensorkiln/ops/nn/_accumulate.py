"""ops/nn/_accumulate.py: the multiply-accumulate reduction conv2d and dense share.

`multiply_sum(a * b, axis)` is `te.sum(a * b, axis)` whose update is written as
`fma(a, b, acc)` for floating-point accumulators: one fused instruction per step
instead of a multiply and a dependent add (the cpu_llvm emitter does not contract
`acc + a * b` by itself), and one rounding instead of two. Code emitters map the
"fma" math call (llvm.fma, C fma(), the tir interpreter), so this needs no target.
"""
from __future__ import annotations

from ... import te
from ...ir.dtypes import dtype_of
from ...tir import nodes as n

__all__ = ["multiply_sum"]


def _combine(accumulated: n.PrimExpr, term: n.PrimExpr) -> n.PrimExpr:
    if isinstance(term, n.Mul) and dtype_of(term.dtype).is_float:
        return n.Call(accumulated.dtype, "fma", (term.a, term.b, accumulated))
    return accumulated + term


multiply_sum = te.comm_reducer(_combine, lambda dtype: te.const(0, dtype), name="sum")
"""te.sum whose float updates are fused multiply-adds (same name: tensorize and the tuner see a sum)."""
