"""te/rfactor.py: `s.rfactor(B, ki)`, a reduction axis split out into a stage of its own.

    k = B.op.reduce_axis[0]                     B[i] = sum_k A[i, k]
    ko, ki = s[B].split(k, factor=16)
    BF = s.rfactor(B, ki)                       BF[ki, i] = sum_ko A[i, ko * 16 + ki]   (ko * 16 + ki < K)
                                                B[i]      = sum_ki' BF[ki', i]

The new stage keeps the axis as a data axis (at position `factor_axis`) and reduces over
the stage's other reduction loops, which become its reduction axes; the original stage
now reduces the partial results over one fresh axis of the same extent. The partial
results are independent, so the new stage can run its data axis in parallel (or on
threads) and the last step can be a cross-thread reduction (bind the fresh axis to
threadIdx.x, and compute the partial stage at it in "local" scope).
"""
from __future__ import annotations

from ..tir import nodes as n
from ..tir.arith import as_int
from ..tir.visit import substitute
from .expr import IterVar, Range, Reduce, TensorRead
from .tensor import ComputeOp, Tensor

__all__ = ["rfactor"]


def rfactor(schedule, tensor: Tensor, axis, factor_axis: int = 0) -> Tensor:
    """Split reduction leaf `axis` of `tensor`'s stage out into a new stage; returns its tensor."""
    from .schedule import FuseRelation
    from .tensorize import leaf_extents
    stage = schedule[tensor]
    iv = stage._axis(axis, "rfactor")
    op = stage.op
    if not isinstance(op.body, Reduce):
        raise stage._error("rfactor", "the stage is not a reduction (its body is not te.sum/max/...)", iv)
    if iv.kind != "reduce":
        raise stage._error("rfactor", "it is a data axis; rfactor takes a reduction axis "
                           f"(one of [{', '.join(v.name for v in stage.leaf_iter_vars if v.kind == 'reduce')}])", iv)
    if stage.iter_attrs or stage.attach_type != "root":
        raise stage._error("rfactor", "the stage was already annotated or moved; call rfactor right after the "
                           "splits and fuses of its reduction axes", iv)
    if any(rel.parent.kind != "reduce" if not isinstance(rel, FuseRelation) else rel.fused.kind != "reduce"
           for rel in stage.relations):
        raise stage._error("rfactor", "its data axes were split or fused; rfactor before transforming them", iv)
    if not isinstance(factor_axis, int) or not 0 <= factor_axis <= len(op.axis):
        raise stage._error("rfactor", f"factor_axis={factor_axis!r} must be an int in [0, {len(op.axis)}]", iv)
    root_extents = {a: as_int(a.dom.extent) for a in op.axis} | {r: as_int(r.dom.extent) for r in op.reduce_axis}
    if any(v is None for v in root_extents.values()):
        raise stage._error("rfactor", "the stage has a symbolic extent; rfactor needs static extents", iv)
    ext = leaf_extents(stage, root_extents)

    # root reduction variables in terms of the leaves, with the tails the splits leave
    value = {leaf: leaf.var for leaf in stage.leaf_iter_vars}
    guards = []
    for rel in reversed(stage.relations):
        if isinstance(rel, FuseRelation):
            inner = n.IntImm("int32", ext[rel.inner])
            value[rel.outer] = n.FloorDiv(value[rel.fused], inner)
            value[rel.inner] = n.FloorMod(value[rel.fused], inner)
        else:
            value[rel.parent] = n.Add(n.Mul(value[rel.outer], n.IntImm("int32", ext[rel.inner])), value[rel.inner])
            if ext[rel.outer] * ext[rel.inner] > ext[rel.parent]:
                guards.append(n.LT(value[rel.parent], n.IntImm("int32", ext[rel.parent])))

    factored = IterVar(iv.name.replace(".", "_"), n.Var(iv.name.replace(".", "_")), Range(0, ext[iv]), "data")
    data = [IterVar(a.name, n.Var(a.name), Range(0, ext[a]), "data") for a in op.axis]
    rest = [leaf for leaf in stage.leaf_iter_vars if leaf.kind == "reduce" and leaf is not iv]
    new_reduce = [IterVar(leaf.name.replace(".", "_"), n.Var(leaf.name.replace(".", "_")), Range(0, ext[leaf]),
                          "reduce") for leaf in rest]
    to_new = {iv.var: factored.var, **{old.var: new.var for old, new in zip(rest, new_reduce)}}
    mapping = {a.var: d.var for a, d in zip(op.axis, data)}
    mapping.update({r.var: substitute(value[r], to_new) for r in op.reduce_axis})
    body = op.body
    conditions = [substitute(g, to_new) for g in guards]
    if body.condition is not None:
        conditions.append(substitute(body.condition, mapping))
    condition = None
    for c in conditions:
        condition = c if condition is None else n.And(condition, c)
    rf_axes = (*data[:factor_axis], factored, *data[factor_axis:])
    rf_body = Reduce(body.combiner, substitute(body.source, mapping), tuple(new_reduce), condition)
    name = schedule._free_name(f"{stage.name}.rf")
    rf_op = ComputeOp(name, f"{op.tag}.rf" if op.tag else "", rf_axes, rf_body, op.attrs)
    rf = rf_op.output(0)
    schedule._claim_name(rf, name)

    k = IterVar(factored.name, n.Var(factored.name), Range(0, ext[iv]), "reduce")
    indices = [a.var for a in op.axis]
    indices.insert(factor_axis, k.var)
    stage.op = ComputeOp(op.name, op.tag, op.axis, Reduce(body.combiner, TensorRead(rf, tuple(indices)), (k,)),
                         op.attrs)
    schedule.stage_map[stage.op] = stage
    stage.all_iter_vars = [*op.axis, k]
    stage.leaf_iter_vars = [*op.axis, k]
    stage.relations = []
    schedule._owners[k] = stage
    schedule._add_stage(rf_op, schedule.stages.index(stage), name)
    return rf

