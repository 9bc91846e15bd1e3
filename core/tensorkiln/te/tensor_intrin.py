"""te/tensor_intrin.py: tensor intrinsics, a te description plus target implementations.

    M, N, K = te.var("M"), te.var("N"), te.var("K")
    A = te.placeholder((M, K), name="A")
    B = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    gemm = te.decl_tensor_intrin(C, "gemm_accelerator", implementations={"llvm": my_impl})
    s[C].tensorize(ii, gemm)

Lowering replaces the matched loop nest with
`Evaluate(Call("void", name, args))`, args in this order (see te/tensorize.py):
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

from ..ir.errors import InternalError, ShapeError
from ..tir import nodes as n
from ..tir.arith import as_int, simplify_expr
from ..tir.visit import collect_vars, rewrite, substitute
from .expr import IterVar, Range, Reduce, TensorRead
from .lower import lower
from .schedule import create_schedule
from .tensor import ComputeOp, PlaceholderOp, Tensor, placeholder

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

    def instantiate(self, bindings: Mapping[n.Var, int]) -> tuple[n.PrimFunc, list[tuple[int, ...]]]:
        """The description with its symbolic extents bound, lowered: (PrimFunc, shapes).

        `bindings` maps each of `extent_vars` to an int; shapes are the inputs' then
        the output's. The tir interpreter runs intrinsic calls with it.
        """
        bound = {v: n.IntImm(v.dtype, value) for v, value in bindings.items()}

        def concrete(extent) -> int:
            if isinstance(extent, int):
                return extent
            value = as_int(simplify_expr(substitute(n.as_expr(extent), bound)))
            if value is None:
                raise InternalError(f"intrinsic {self.name}: extent {extent} is not bound by {bindings}")
            return value

        new_inputs = {t: placeholder(tuple(concrete(s) for s in t.shape), t.dtype, t.name) for t in self.inputs}
        mapping = {}
        axes = []
        for a in self.op.axis:
            iv = IterVar(a.name, n.Var(a.name), Range(0, concrete(a.dom.extent)), "data")
            mapping[a.var] = iv.var
            axes.append(iv)

        def retarget(x):
            return TensorRead(new_inputs[x.tensor], x.indices) if isinstance(x, TensorRead) else None

        body = self.op.body
        if isinstance(body, Reduce):
            reduce_axes = []
            for r in body.axis:
                iv = IterVar(r.name, n.Var(r.name), Range(concrete(r.dom.min), concrete(r.dom.extent)), "reduce")
                mapping[r.var] = iv.var
                reduce_axes.append(iv)
            source = rewrite(substitute(body.source, mapping), pre=retarget)
            condition = None if body.condition is None else rewrite(substitute(body.condition, mapping), pre=retarget)
            body = Reduce(body.combiner, source, tuple(reduce_axes), condition)
        else:
            body = rewrite(substitute(body, mapping), pre=retarget)
        out = ComputeOp(self.op.name, self.op.tag, tuple(axes), body).output(0)
        inputs = [new_inputs[t] for t in self.inputs]
        func = lower(create_schedule(out.op), [*inputs, out], name=self.name)
        return func, [tuple(t.shape) for t in inputs] + [tuple(out.shape)]

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
