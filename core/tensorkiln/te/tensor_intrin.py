"""te/tensor_intrin.py: tensor intrinsics, a te description plus target implementations.

    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    gemm = te.decl_tensor_intrin(C, "gemm_accelerator", implementations={"llvm": my_impl})
    s[C].tensorize(ii, gemm)

Lowering replaces the matched loop nest with
`Evaluate(Call("void", name, args))`, args in this order (see tir/tensorize.py):
  1. BufferPointer(buffer, flat index of the tile origin) for each input (in `inputs`
     order), then for the output;
  2. for the same buffers in the same order, the element stride (int64) of every tile
     dimension except the last (the last must have stride 1);
  3. each symbolic extent in `extent_vars` order (int64);
  4. `accumulate` (int32): 0 = overwrite the output tile, 1 = add to it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from ..ir.errors import ShapeError
from ..tir import nodes as n
from ..tir.visit import collect_vars
from .tensor import ComputeOp, PlaceholderOp, Tensor

__all__ = ["TensorIntrin", "decl_tensor_intrin"]


@dataclass(frozen=True, eq=False)
class TensorIntrin:
    """A hardware operation described in te, with one implementation per target name.

    `extent_vars` are the symbolic extents in order of first appearance: input shapes
    (in `inputs` order), then the output shape, then the reduce axes' extents.
    """

    name: str
    output: Tensor
    inputs: tuple[Tensor, ...]
    implementations: Mapping[str, object] = field(default_factory=dict)
    extent_vars: tuple[n.Var, ...] = ()
    attrs: Mapping[str, object] = field(default_factory=dict)

    @property
    def op(self) -> ComputeOp:
        return self.output.op

    def implementation(self, target: str):
        """The implementation object a plugin registered for `target` (KeyError if none)."""
        return self.implementations[target]

    def __str__(self) -> str:
        return f"TensorIntrin({self.name}: {self.output.op.body})"

    __repr__ = __str__


def decl_tensor_intrin(output: Tensor, name: str, implementations: Mapping[str, object] | None = None,
                       inputs=None, attrs: Mapping[str, object] | None = None) -> TensorIntrin:
    """Declare a tensor intrinsic from the te description `output` (see module docstring).

    `inputs` fixes the argument order; by default the placeholders in order of first
    use in the description's body.
    """
    op = output.op
    if not isinstance(op, ComputeOp):
        raise ShapeError(f"decl_tensor_intrin {name!r}: the description must be a te.compute output, got {output}")
    used = list(op.input_tensors)
    inputs = used if inputs is None else list(inputs)
    for t in inputs:
        if not isinstance(t.op, PlaceholderOp):
            raise ShapeError(f"decl_tensor_intrin {name!r}: input {t.name} must be a te.placeholder; "
                             "a description reads its inputs directly")
    missing = [t.name for t in used if not any(t is u for u in inputs)]
    if missing:
        raise ShapeError(f"decl_tensor_intrin {name!r}: the description reads {missing} which are not in inputs")
    extent_vars: list[n.Var] = []
    extents = [*(s for t in inputs for s in t.shape), *output.shape, *(r.dom.extent for r in op.reduce_axis)]
    for e in extents:
        if isinstance(e, n.PrimExpr):
            for v in collect_vars(e):
                if not any(v is x for x in extent_vars):
                    extent_vars.append(v)
    return TensorIntrin(name, output, tuple(inputs), dict(implementations or {}), tuple(extent_vars),
                        dict(attrs or {}))
