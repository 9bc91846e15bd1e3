"""passes/sink_reshapes.py: move shape-only ops below the elementwise ops that read them.

    %1 = nn.conv2d(%x, %w)            [1, 64, 1, 256]              %1 = nn.conv2d(%x, %w)
    %2 = squeeze(%1, axis=(2,))       [1, 64, 256]                 %2 = nn.relu(%1)
    %3 = nn.relu(%2)                                       ->       %3 = nn.conv2d(%2, %w2)
    %4 = expand_dims(%3, axis=2)      [1, 64, 1, 256]
    %5 = nn.conv2d(%4, %w2)

A reshape, squeeze or expand_dims keeps the order of the elements, so an elementwise op gives
the same elements on either side of it. Below the op, the reshape no longer stands between an
anchor (conv2d, matmul) and its elementwise epilogue: fuse_ops puts elementwise ops into their
producer's group, but not a reshape, which ends the group there. This is the 1-D conv net the
ONNX importer builds (each Conv1d is expand_dims -> conv2d -> squeeze): every relu and residual
add was a kernel launch of its own, reading and writing its tensor once more.

Rules, bottom-up in one sweep:
- a shape-only op of a shape-only op is one reshape of the first one's input, or nothing when
  the shapes match;
- an elementwise or broadcasting op (no axis attribute) reading a shape-only op that it alone
  uses, with as many elements as its result, runs on that op's input instead; its other operands
  are reshaped alike: one of the result's shape, one of all ones, or a broadcast one when the
  reshape only inserts or removes unit axes (a per-channel constant of the 3-D tensor over the
  4-D one). Otherwise the op stays where it is.
"""
from __future__ import annotations

import dataclasses
import math

from ..graph import Call, Expr, Function, Module, call, get_op
from ..graph.registry import Op, OpPattern
from ..graph.traversal import count_users, post_order, with_operands
from ..graph.types import TensorType
from .manager import register_pass

__all__ = ["sink_reshapes", "SHAPE_ONLY_OPS"]

SHAPE_ONLY_OPS = ("reshape", "squeeze", "expand_dims")
"""Ops whose result is their input's elements in the same order, under another shape."""

_AXIS_FIELDS = frozenset({"axis", "axes"})


@register_pass("sink_reshapes", opt_level=1)
def sink_reshapes(mod: Module) -> Module:
    """Sink reshapes below elementwise ops and merge chains of them (module docstring)."""
    return mod.map_functions(_sink)


def _sink(function: Function) -> Function:
    shape_only = {get_op(name) for name in SHAPE_ONLY_OPS}
    users = count_users(function)
    memo: dict[int, Expr] = {}
    for node in post_order(function):
        rebuilt = with_operands(node, memo, node is function)
        replacement = None
        if isinstance(rebuilt, Call) and _static(rebuilt):
            if rebuilt.op in shape_only:
                replacement = _merged(rebuilt, shape_only)
            elif _elementwise(rebuilt):
                replacement = _sunk(node, rebuilt, users, shape_only)
        memo[id(node)] = rebuilt if replacement is None else replacement
    return memo[id(function)]


def _static(node: Expr) -> bool:
    """A tensor of static shape, every operand too."""
    def fixed(expr):
        return isinstance(expr.checked_type, TensorType) and all(isinstance(d, int) for d in expr.checked_type.shape)
    return fixed(node) and all(fixed(a) for a in node.args)


def _shape(expr: Expr) -> tuple[int, ...]:
    return tuple(expr.checked_type.shape)


def _merged(node: Call, shape_only: set) -> Expr | None:
    """`node` (shape-only) as one reshape of the first input of its chain; that input when the shapes match."""
    source = node.args[0]
    while isinstance(source, Call) and source.op in shape_only:
        source = source.args[0]
    if _shape(source) == _shape(node):
        return source
    if source is node.args[0]:
        return None
    return call("reshape", source, newshape=_shape(node))


def _elementwise(node: Call) -> bool:
    op = node.op
    if not isinstance(op, Op) or op.pattern > OpPattern.BROADCAST:
        return False
    fields = {f.name for f in dataclasses.fields(node.attrs)} if dataclasses.is_dataclass(node.attrs) else set()
    return not fields & _AXIS_FIELDS


def _sunk(node: Call, rebuilt: Call, users: dict[int, int], shape_only: set) -> Expr | None:
    """`rebuilt` computed on the input of a shape-only operand it alone reads, then reshaped; None when no
    operand is one or another operand does not map."""
    out = _shape(rebuilt)
    for index, (original, arg) in enumerate(zip(node.args, rebuilt.args)):
        if isinstance(arg, Call) and arg.op in shape_only and users.get(id(original), 0) == 1 \
                and _shape(arg) == out:
            break
    else:
        return None
    inner = _shape(rebuilt.args[index].args[0])
    operands = []
    for arg in rebuilt.args:
        if isinstance(arg, Call) and arg.op in shape_only and _shape(arg) == out and _shape(arg.args[0]) == inner:
            operands.append(arg.args[0])
            continue
        mapped = _operand(arg, out, inner)
        if mapped is None:
            return None
        operands.append(mapped)
    moved = call(rebuilt.op.name, *operands, attrs=rebuilt.attrs)
    if _shape(moved) != inner or moved.checked_type.dtype != rebuilt.checked_type.dtype:
        return None
    return call("reshape", moved, newshape=out)


def _operand(arg: Expr, out: tuple[int, ...], inner: tuple[int, ...]) -> Expr | None:
    """`arg`, broadcast against `out`, as an operand broadcast the same way against `inner`; None if that
    cannot be said with a reshape."""
    shape = _shape(arg)
    if len(shape) > len(out):
        return None
    aligned = (1,) * (len(out) - len(shape)) + shape
    if aligned == out:
        return call("reshape", arg, newshape=inner)
    if math.prod(shape) == 1:
        return arg if len(shape) <= len(inner) else call("reshape", arg, newshape=(1,) * len(inner))
    outer_axes = [i for i, d in enumerate(out) if d != 1]
    inner_axes = [i for i, d in enumerate(inner) if d != 1]
    if [out[i] for i in outer_axes] != [inner[i] for i in inner_axes]:
        return None   # the reshape merges or splits extents: a broadcast over one of them does not map
    mapped = [1] * len(inner)
    for outer_axis, inner_axis in zip(outer_axes, inner_axes):
        mapped[inner_axis] = aligned[outer_axis]
    return call("reshape", arg, newshape=tuple(mapped))
