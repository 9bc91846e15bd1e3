"""te/tensorize.py: match a stage's loop nest against a tensor intrinsic's description.

The loops from the tensorized axis inward form a tile. For every root axis of the
stage the tile covers either one point, or a contiguous run made of the inner parts
of its splits (tails are refused: the intrinsic computes whole tiles). The
description's data axes map, in order, onto the stage's last data axes (earlier
stage axes must cover one point); its reduce axes map onto the stage's reduce axes.
Bodies must then be equal up to that renaming, each description input reading one
stage tensor (extra leading indices of the stage tensor must be fixed in the tile).
Symbolic extents of the description are bound to the tile extents.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.errors import ScheduleError
from ..tir import nodes as n
from ..tir.visit import child_fields, collect_vars
from .expr import Reduce, TensorRead
from .schedule import FuseRelation

__all__ = ["TensorizeMatch", "match_tensorize", "leaf_extents"]


@dataclass
class TensorizeMatch:
    intrin: object
    axis: object                       # the tensorized leaf IterVar
    below: list                        # leaves from axis inward
    tile_extents: dict                 # stage root IterVar -> int
    bindings: dict                     # description extent Var -> int
    tensor_map: dict                   # description input Tensor -> (stage tensor, stage read indices)
    outer_reduce_leaves: list          # reduce leaves outside the tile


def leaf_extents(stage, root_extents: dict) -> dict:
    """Extent of every IterVar of the stage given its root extents (splits, fuses)."""
    ext = dict(root_extents)
    for rel in stage.relations:
        if isinstance(rel, FuseRelation):
            ext[rel.fused] = ext[rel.outer] * ext[rel.inner]
        else:
            parent = ext[rel.parent]
            if rel.factor is not None:
                inner = min(rel.factor, parent) if parent > 0 else rel.factor
                ext[rel.inner], ext[rel.outer] = inner, -(-parent // inner)
            else:
                ext[rel.outer], ext[rel.inner] = rel.nparts, -(-parent // rel.nparts)
    return ext


def _fail(stage, axis, intrin, why) -> ScheduleError:
    return ScheduleError(f"tensorize on stage {stage.name}, axis {axis.name}: the loop nest does not match "
                         f"intrinsic {intrin.name!r}: {why}")


def _tile_extents(stage, axis, intrin, ext, below_set):
    derived = {}
    for rel in stage.relations:
        if isinstance(rel, FuseRelation):
            derived.setdefault(rel.outer, []).append(rel)
            derived.setdefault(rel.inner, []).append(rel)
        else:
            derived.setdefault(rel.parent, []).append(rel)

    def leaves(iv):
        rels = derived.get(iv)
        if not rels:
            return [iv]
        out = []
        for rel in rels:
            out += leaves(rel.fused) if isinstance(rel, FuseRelation) else leaves(rel.outer) + leaves(rel.inner)
        return out

    def tile(iv) -> int:
        rels = derived.get(iv)
        if not rels:
            return ext[iv] if iv in below_set else 1
        rel = rels[0]
        if isinstance(rel, FuseRelation):
            if any(leaf in below_set for leaf in leaves(rel.fused)):
                raise _fail(stage, axis, intrin, f"axis {rel.fused.name} is a fused loop; fused axes cannot be "
                            "tensorized, split instead")
            return 1
        outer_t, inner_t = tile(rel.outer), tile(rel.inner)
        inner_all = all(leaf in below_set for leaf in leaves(rel.inner))
        outer_any = any(leaf in below_set for leaf in leaves(rel.outer))
        has_tail = ext[rel.outer] * ext[rel.inner] != ext[iv]
        if has_tail and (outer_any or any(leaf in below_set for leaf in leaves(rel.inner))):
            raise _fail(stage, axis, intrin, f"split of {iv.name} ({ext[iv]} by {ext[rel.inner]}) leaves a tail "
                        "inside the tile; use a factor that divides the extent")
        if outer_any and not inner_all:
            raise _fail(stage, axis, intrin, f"the tile is not contiguous along {iv.name}: "
                        f"{rel.outer.name} is inside the tile but {rel.inner.name} is not")
        return outer_t * ext[rel.inner] if outer_any else inner_t
    return tile


def match_tensorize(stage, axis, intrin, body=None, root_extents: dict | None = None) -> TensorizeMatch:
    """Check that the nest of `stage` from `axis` inward computes `intrin`; raise ScheduleError if not."""
    op = stage.op
    body = op.body if body is None else body
    if root_extents is None:
        root_extents = {iv: iv.dom.extent for iv in (*op.axis, *op.reduce_axis)}
    ext = leaf_extents(stage, root_extents)
    pos = stage.leaf_iter_vars.index(axis)
    below = stage.leaf_iter_vars[pos:]
    below_set = set(below)
    tile = _tile_extents(stage, axis, intrin, ext, below_set)
    roots = [*op.axis, *op.reduce_axis]
    tile_extents = {iv: tile(iv) for iv in roots}
    desc = intrin.op
    n_i, n_s = len(desc.axis), len(op.axis)
    if n_i > n_s:
        raise _fail(stage, axis, intrin, f"the intrinsic writes a {n_i}-d tile but stage has {n_s} data axes")
    for iv in op.axis[:n_s - n_i]:
        if tile_extents[iv] != 1:
            raise _fail(stage, axis, intrin, f"axis {iv.name} covers {tile_extents[iv]} points in the tile but the "
                        f"intrinsic has only {n_i} data axes; move its loops outside {axis.name}")
    n_ri, n_rs = len(desc.reduce_axis), len(op.reduce_axis)
    if n_ri > n_rs or (n_ri == 0) != (n_rs == 0):
        raise _fail(stage, axis, intrin, f"the intrinsic reduces over {n_ri} axes, the stage over {n_rs}")
    for iv in op.reduce_axis[:n_rs - n_ri]:
        if tile_extents[iv] != 1:
            raise _fail(stage, axis, intrin, f"reduce axis {iv.name} covers {tile_extents[iv]} points in the tile but "
                        f"the intrinsic reduces over only {n_ri} axes; move its loops outside {axis.name}")
    # like data axes, the description's reduce axes map onto the stage's last ones (conv's rc after ry, rx)
    pairs = list(zip(desc.axis, op.axis[n_s - n_i:])) + list(zip(desc.reduce_axis, op.reduce_axis[n_rs - n_ri:]))
    bindings: dict = {}
    for d_iv, s_iv in pairs:
        want, got = d_iv.dom.extent, tile_extents[s_iv]
        if isinstance(want, n.Var):
            if bindings.get(want, got) != got:
                raise _fail(stage, axis, intrin, f"extent {want.name} would be both {bindings[want]} and {got}")
            bindings[want] = got
        elif isinstance(want, int) and want != got:
            raise _fail(stage, axis, intrin, f"axis {s_iv.name} covers {got} points in the tile but the intrinsic's "
                        f"axis {d_iv.name} has extent {want}")
    var_map = {d.var: s.var for d, s in pairs}
    tile_vars = {iv.var for iv in roots if tile_extents[iv] != 1}
    tensor_map: dict = {}
    d_body, s_body = desc.body, body
    if isinstance(d_body, Reduce) != isinstance(s_body, Reduce):
        raise _fail(stage, axis, intrin, "one of them is a reduction and the other is not")
    if isinstance(d_body, Reduce):
        if d_body.combiner.name != s_body.combiner.name:
            raise _fail(stage, axis, intrin, f"reductions differ: {d_body.combiner.name} vs {s_body.combiner.name}")
        if (d_body.condition is None) != (s_body.condition is None):
            raise _fail(stage, axis, intrin, "one reduction has a where= condition and the other has not")
        d_body, s_body = d_body.source, s_body.source
    if not _match(d_body, s_body, var_map, tile_vars, tensor_map):
        raise _fail(stage, axis, intrin, f"expressions differ: the stage computes {s_body}, the intrinsic "
                    f"{d_body}")
    for t in intrin.inputs:
        if t not in tensor_map:
            raise _fail(stage, axis, intrin, f"input {t.name} of the description is not read")
    for v in intrin.extent_vars:
        if v not in bindings:
            raise _fail(stage, axis, intrin, f"extent {v.name} is not the extent of an axis of the description; "
                        "it cannot be bound from the loop nest")
    outer_reduce = [iv for iv in stage.leaf_iter_vars[:pos] if iv.kind == "reduce"]
    return TensorizeMatch(intrin, axis, below, tile_extents, bindings, tensor_map, outer_reduce)


def _match_index(d, s, var_map, tile_vars, tensor_map) -> bool:
    """An index of a tensor read: equal up to renaming, or the description's axis variable plus an
    offset free of the tile's variables (conv's data[y + ry, x + rx]: the offset moves the tile's
    origin, which lowering computes with every tile loop at 0, and leaves the strides alone)."""
    if _match(d, s, var_map, tile_vars, tensor_map):
        return True
    if isinstance(d, n.Var) and isinstance(s, n.Add):
        mapped = var_map.get(d, d)
        for own, offset in ((s.a, s.b), (s.b, s.a)):
            if own is mapped and not any(v in tile_vars for v in collect_vars(offset)):
                return True
    return False


def _match(d, s, var_map, tile_vars, tensor_map) -> bool:
    if isinstance(d, n.Var):
        return var_map.get(d, d) is s
    if isinstance(d, TensorRead):
        if not isinstance(s, TensorRead) or d.tensor.dtype != s.tensor.dtype:
            return False
        if len(s.indices) < len(d.indices):
            return False
        known = tensor_map.get(d.tensor)
        if known is not None and known[0] is not s.tensor:
            return False
        extra = len(s.indices) - len(d.indices)
        for index in s.indices[:extra]:
            if any(v in tile_vars for v in collect_vars(index)):
                return False
        if not all(_match_index(a, b, var_map, tile_vars, tensor_map) for a, b in zip(d.indices, s.indices[extra:])):
            return False
        tensor_map.setdefault(d.tensor, (s.tensor, s.indices))
        return True
    if type(d) is not type(s):
        return False
    if isinstance(d, (n.IntImm, n.FloatImm)):
        return d.dtype == s.dtype and d.value == s.value
    if getattr(d, "dtype", None) != getattr(s, "dtype", None):
        return False
    if isinstance(d, n.Call) and d.name != s.name:
        return False
    for name in child_fields(type(d)):
        a, b = getattr(d, name), getattr(s, name)
        if isinstance(a, (n.PrimExpr,)):
            if not isinstance(b, n.PrimExpr) or not _match(a, b, var_map, tile_vars, tensor_map):
                return False
        elif isinstance(a, tuple):
            if not isinstance(b, tuple) or len(a) != len(b):
                return False
            for x, y in zip(a, b):
                if isinstance(x, n.PrimExpr):
                    if not _match(x, y, var_map, tile_vars, tensor_map):
                        return False
                elif x != y:
                    return False
        elif isinstance(a, (str, int, float)) and a != b:
            return False
    return True

