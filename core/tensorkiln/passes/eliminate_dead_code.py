"""passes/eliminate_dead_code.py: drop values nothing uses.

A graph is a DAG reached from the function body, so a call nobody uses is
already gone from the IR; what stays dead is inside tuples:

- `TupleGetItem(Tuple(a, b, c), 1)` becomes `b` (the other fields die);
- a `split` whose fields are not all used becomes one `strided_slice` per used
  field, so the unused parts are never computed:

    %0 = split(%x, indices_or_sections=2, axis=1)
    %1 = %0.0                     ->      %1 = strided_slice(%x, begin=(0,), end=(4,), axes=(1,))
    nn.relu(%1)                           nn.relu(%1)

Model inputs stay, even when unused: they are the model's interface.
"""
from __future__ import annotations

from ..graph import Call, Expr, Module, Tuple, TupleGetItem, get_op, post_order
from ..graph.traversal import with_operands
from ..graph.registry import Op
from ..graph.types import TupleType
from .manager import register_pass

__all__ = ["eliminate_dead_code"]


@register_pass("eliminate_dead_code", opt_level=1)
def eliminate_dead_code(mod: Module) -> Module:
    """Forward tuple fields and replace partially used splits by slices of the used parts."""
    return mod.map_functions(_eliminate)


def _eliminate(function):
    partial = _partially_used_splits(function.body)
    memo: dict[int, Expr] = {}
    for node in post_order(function):
        rebuilt = with_operands(node, memo, node is function)
        if isinstance(node, TupleGetItem) and isinstance(rebuilt.tuple_value, Tuple):
            rebuilt = rebuilt.tuple_value.fields[node.index]
        elif isinstance(node, TupleGetItem) and id(node.tuple_value) in partial:
            # `partial` holds ids of the input's nodes; the rebuilt split gives the current operand.
            rebuilt = _slice_of_split(rebuilt.tuple_value, node.index)
        memo[id(node)] = rebuilt
    return memo[id(function)]


def _partially_used_splits(body: Expr) -> set[int]:
    """ids of split calls used only through TupleGetItem, with at least one field unused."""
    used: dict[int, set[int]] = {}
    whole: set[int] = set()
    for node in post_order(body):
        children = ()
        if isinstance(node, TupleGetItem):
            used.setdefault(id(node.tuple_value), set()).add(node.index)
            continue
        if isinstance(node, Call):
            children = node.args
        elif isinstance(node, Tuple):
            children = node.fields
        whole.update(id(c) for c in children)
    whole.add(id(body))
    found = set()
    for node in post_order(body):
        if (isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "split"
                and id(node) not in whole and isinstance(node.checked_type, TupleType)
                and len(used.get(id(node), ())) < len(node.checked_type.fields)):
            found.add(id(node))
    return found


def _slice_of_split(split: Call, index: int) -> Call:
    data = split.args[0]
    axis = split.attrs.axis % data.ndim
    begin = sum(field.shape[axis] for field in split.checked_type.fields[:index])
    end = begin + split.checked_type.fields[index].shape[axis]
    return Call(get_op("strided_slice"), (data,),
                get_op("strided_slice").make_attrs(begin=(begin,), end=(end,), strides=(1,), axes=(axis,)),
                split.span)
