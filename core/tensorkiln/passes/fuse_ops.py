"""Group ops into fused kernels following TVM's rules by pattern kind.

- elementwise/broadcast ops fuse into their producer's group when that group is
  injective-or-lower, or is anchored by an out-elementwise-fusable op (conv2d,
  dense, matmul: the elementwise chain becomes the anchor's epilogue) or a reduction;
- injective ops (reshape, transpose, slice, concat) fuse with injective producers;
- a reduction takes injective producers as its input stage;
- out-elementwise-fusable and opaque ops start a group and take no producers.

A producer joins only when the op is its single user, so each group has one
external output and no group can depend on itself. The indices of a gather (an op
with `index_bounds`) never fuse into its group: they stay a kernel input, checked by
the executor before the launch. A group has at most one
anchor (out-elementwise-fusable or reduction). Each group becomes a primitive
Function called from main; non-scalar constants are lifted to its parameters.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from ..graph import Call, Constant, Function, Module, Tuple, TupleGetItem, Var, count_users, post_order
from ..graph.registry import Op, OpPattern
from ..graph.types import TensorType
from ..ir.errors import InternalError
from .manager import register_pass

__all__ = ["fuse_ops", "group_each_op", "MAX_GROUP_SIZE", "MAX_GROUP_INPUTS"]

MAX_GROUP_SIZE = 64
"""Ops in one fused group at most."""

MAX_GROUP_INPUTS = 64
"""Distinct tensor inputs of one fused group (its kernel's buffer parameters, outputs aside) at most:
a producer whose group would take the merged group past it stays a kernel of its own. 64 pointers
leave room for outputs and scalars in OpenCL's smallest guaranteed parameter space (1024 bytes).
A single op with more inputs is split before fusion (the ONNX importer builds a tree of Concats)."""


@dataclass(eq=False)
class _Group:
    nodes: list = field(default_factory=list)
    kind: OpPattern = OpPattern.ELEMWISE
    target: str | None = None

    @property
    def has_anchor(self) -> bool:
        return self.kind in (OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE)


def _can_absorb(producer: _Group, pattern: OpPattern) -> bool:
    """May an op of `pattern` join the group that produces its input?"""
    if pattern <= OpPattern.BROADCAST:
        return producer.kind <= OpPattern.INJECTIVE or producer.kind in (
            OpPattern.OUT_ELEMWISE_FUSABLE, OpPattern.COMM_REDUCE)
    if pattern == OpPattern.INJECTIVE:
        return producer.kind <= OpPattern.INJECTIVE
    if pattern == OpPattern.COMM_REDUCE:
        return producer.kind <= OpPattern.INJECTIVE
    return False


def _partition(body, fuse: bool) -> dict[int, _Group]:
    users = count_users(body)
    group_of: dict[int, _Group] = {}
    for node in post_order(body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            continue
        pattern = node.op.pattern
        group = _Group([node], pattern, node.target)
        is_tuple_valued = not isinstance(node.checked_type, TensorType)
        if fuse and not is_tuple_valued:
            indices = _index_argument(node)
            for arg in dict.fromkeys(node.args):  # each distinct producer once
                if arg is indices:
                    continue   # gather indices stay a kernel input, which the executor checks before launch
                producer = group_of.get(id(arg))
                if producer is None or producer is group or users.get(id(arg), 0) != 1:
                    continue
                if not isinstance(arg.checked_type, TensorType) or producer.target != group.target:
                    continue
                if not _can_absorb(producer, pattern):
                    continue
                if producer.has_anchor and (group.has_anchor or pattern in (OpPattern.OUT_ELEMWISE_FUSABLE,
                                                                           OpPattern.COMM_REDUCE)):
                    continue
                if len(producer.nodes) + len(group.nodes) > MAX_GROUP_SIZE:
                    continue
                if len(_external_inputs([*producer.nodes, *group.nodes])) > MAX_GROUP_INPUTS:
                    continue
                merged_kind = max(producer.kind, group.kind) if not producer.has_anchor else producer.kind
                producer.nodes.extend(n for n in group.nodes if n not in producer.nodes)
                for member in group.nodes:
                    group_of[id(member)] = producer
                producer.kind = merged_kind
                group = producer
        group_of[id(node)] = group
    return group_of


def _index_argument(node: Call):
    """The argument `node` reads as gather indices (take, gather_elements, gather_nd), else None."""
    if node.op.index_bounds is None:
        return None
    return node.args[node.op.index_bounds(tuple(a.checked_type for a in node.args), node.attrs).argument]


def _external_inputs(nodes: list) -> list:
    """The values `nodes` read from outside themselves, in first-use order: the parameters of
    their group's function (scalar constants are inlined as immediates and do not count)."""
    member_ids = {id(n) for n in nodes}
    external, seen = [], set()
    for member in nodes:
        for arg in member.args:
            if id(arg) in member_ids or id(arg) in seen:
                continue
            if isinstance(arg, Constant) and arg.value.size == 1:
                continue
            seen.add(id(arg))
            external.append(arg)
    return external


def _build_function(group: _Group, external: list) -> Function:
    params = []
    mapping: dict[int, object] = {}
    for index, value in enumerate(external):
        param = Var(f"p{index}", value.checked_type)
        params.append(param)
        mapping[id(value)] = param
    output = group.nodes[-1]
    for node in group.nodes:  # already in topological order
        args = []
        for arg in node.args:
            if id(arg) in mapping:
                args.append(mapping[id(arg)])
            elif isinstance(arg, Constant):
                args.append(arg)  # scalar constant, inlined as an immediate
            else:
                raise InternalError(f"fuse_ops: an operand of {node.op.name} is neither in the group nor a parameter")
        mapping[id(node)] = dataclasses.replace(node, args=tuple(args))
    attrs = {"Primitive": 1, "kind": group.kind.name}
    if group.target:
        attrs["target"] = group.target
    reasons = [n.fallback_reason for n in group.nodes if n.fallback_reason]
    if reasons:
        attrs["fallback_reason"] = reasons[0]
    return Function(tuple(params), mapping[id(output)], attrs)


def _regroup(mod: Module, fuse: bool) -> Module:
    main = mod.main
    group_of = _partition(main.body, fuse)
    rebuilt: dict[int, object] = {}
    done: set[int] = set()

    def new(expr):
        return rebuilt.get(id(expr), expr)

    for node in post_order(main.body):
        if isinstance(node, Call) and isinstance(node.op, Op):
            group = group_of[id(node)]
            if node is not group.nodes[-1] or id(group) in done:
                continue
            done.add(id(group))
            external = _external_inputs(group.nodes)
            function = _build_function(group, external)
            rebuilt[id(node)] = Call(function, tuple(new(e) for e in external), span=node.span)
        elif isinstance(node, Tuple):
            rebuilt[id(node)] = Tuple(tuple(new(f) for f in node.fields))
        elif isinstance(node, TupleGetItem):
            rebuilt[id(node)] = TupleGetItem(new(node.tuple_value), node.index)
        elif isinstance(node, Call) and isinstance(node.op, Function):
            rebuilt[id(node)] = dataclasses.replace(node, args=tuple(new(a) for a in node.args))
    body = new(main.body)
    if isinstance(body, (Var, Constant)):
        return mod
    return mod.with_function("main", Function(main.params, body, main.attrs))


@register_pass("fuse_ops", opt_level=1)
def fuse_ops(mod: Module) -> Module:
    """Fuse ops into primitive functions (one kernel each) by TVM's pattern rules.

    Calls placed on different targets (`Call.target`, set by the compiler's placement
    step) never share a group; each group function carries its target and the first
    fallback reason of its calls as attrs ("target", "fallback_reason").
    """
    return _regroup(mod, fuse=True)


def group_each_op(mod: Module) -> Module:
    """Wrap every remaining op call in its own primitive function (no fusion)."""
    return _regroup(mod, fuse=False)
