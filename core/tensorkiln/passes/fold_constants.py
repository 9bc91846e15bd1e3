"""passes/fold_constants.py: evaluate at compile time every subgraph whose inputs are constants.

    %0 = add(const([1, 2, 3, 4]), const(1))        ->   const([2, 3, 4, 5])
    %1 = add(%x, %0)                                     add(%x, const([2, 3, 4, 5]))

Each op's numpy reference (through `evaluate_call`) computes the value, so the
folded result is exactly what the reference interpreter would give. Shapes are
static, so `shape_of(%x)` is a constant too, and shape arithmetic exported
from frameworks (shape_of -> take -> concatenate -> reshape) becomes static.
Tuples of constants fold field by field (`split` of a constant).

A result larger than `max_elements` (default 1M) that is also larger than
every input stays unfolded: folding `broadcast_to(const(0), (64, 1024, 1024))`
would put 256 MiB into the model instead of one number.
"""
from __future__ import annotations

import numpy as np

from ..graph import Call, Constant, Expr, Module, Tuple, TupleGetItem, evaluate_call, get_op, rewrite
from ..graph.registry import Op
from ..graph.types import TensorType
from .manager import register_pass

__all__ = ["fold_constants", "DEFAULT_MAX_ELEMENTS"]

DEFAULT_MAX_ELEMENTS = 1 << 20


@register_pass("fold_constants", opt_level=1)
def fold_constants(mod: Module, config: dict | None = None) -> Module:
    """Replace each call whose operands are all constants (or static shapes) by its value.

    config: {"max_elements": int} caps the size of a folded value that grows its inputs.
    """
    max_elements = int((config or {}).get("max_elements", DEFAULT_MAX_ELEMENTS))

    def fold(node: Expr) -> Expr | None:
        if isinstance(node, TupleGetItem) and isinstance(node.tuple_value, Tuple):
            return node.tuple_value.fields[node.index]
        if not (isinstance(node, Call) and isinstance(node.op, Op)):
            return None
        if node.op is _shape_of() and isinstance(node.args[0].checked_type, TensorType):
            return Constant(np.array(node.args[0].shape, dtype=node.checked_type.dtype))
        if not all(isinstance(a, Constant) for a in node.args) or _too_big(node, max_elements):
            return None
        value = evaluate_call(node, [a.value for a in node.args])
        if isinstance(value, tuple):
            return Tuple(tuple(Constant(v) for v in value))
        return Constant(value)

    return rewrite(mod, fold)


def _shape_of() -> Op:
    return get_op("shape_of")


def _too_big(call: Call, max_elements: int) -> bool:
    result = call.checked_type
    sizes = [t.size for t in (result.fields if not isinstance(result, TensorType) else (result,))]
    largest_input = max((a.checked_type.size for a in call.args), default=0)
    return sum(sizes) > max_elements and sum(sizes) > largest_input
