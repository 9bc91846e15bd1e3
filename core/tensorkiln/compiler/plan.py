"""compiler/plan.py: `build_plan`, the fused main function -> the runtime's ExecutionPlan.

Every group call becomes a `KernelStep`, every tensor a `ValueInfo` (the plan's
data types live in tensorkiln.runtime.plan: the runtime runs plans without the
compiler); memory planning then maps values to storages.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np

from ..graph import Call, Constant, Function, Tuple, TupleGetItem, Var, post_order
from ..graph.registry import Op
from ..graph.types import TensorType, TupleType
from ..ir.errors import InternalError, ShapeError
from ..ir.index_range import describe_out_of_range, first_out_of_range
from ..runtime.plan import AliasStep, ExecutionPlan, IndexCheck, KernelStep, PlacedConcat, ValueInfo
from .placed_concats import concat_order

__all__ = ["build_plan"]


def build_plan(main: Function, kernel_names: dict[int, str], default_target: str,
               alias_calls: frozenset[int] | set[int] = frozenset(),
               placed_calls: frozenset[int] | set[int] = frozenset()) -> tuple[ExecutionPlan, dict[int, np.ndarray]]:
    """Walk the fused main function in order; returns the plan and constant values by value id.

    `kernel_names` maps id(group call) to its kernel name; each group function's "target" and
    "fallback_reason" attrs (placement) give the step's target (else `default_target`) and reason.
    `alias_calls`: id() of the groups that only reshape (compiler/alias_steps.py): each becomes an
    AliasStep, its output a value aliasing its input (no kernel, no step).
    `placed_calls`: id() of the concatenations elided by placement (compiler/placed_concats.py): each
    becomes a PlacedConcat, its inputs values placed in its output at their byte offsets.
    """
    values: list[ValueInfo] = []
    constants: dict[int, np.ndarray] = {}
    ids: dict[int, list[int]] = {}
    steps: list[KernelStep] = []
    aliases: list[AliasStep] = []
    placed: list[PlacedConcat] = []

    def new_value(ttype: TensorType, kind: str, name: str, alias_of: int = -1) -> int:
        values.append(ValueInfo(len(values), tuple(ttype.shape), ttype.dtype, kind, name, alias_of=alias_of))
        return len(values) - 1

    inputs = []
    for param in main.params:
        if not isinstance(param.checked_type, TensorType):
            raise InternalError(f"model input {param.name} must be a tensor, got {param.checked_type}")
        value_id = new_value(param.checked_type, "input", param.name)
        ids[id(param)] = [value_id]
        inputs.append(value_id)
    for node in post_order(main.body):
        if id(node) in ids:
            continue
        if isinstance(node, Constant):
            value_id = new_value(node.checked_type, "constant", f"const{len(constants)}")
            constants[value_id] = node.value
            ids[id(node)] = [value_id]
        elif isinstance(node, Call) and isinstance(node.op, Function) and id(node) in alias_calls:
            source = ids[id(node.args[0])][0]
            output = new_value(node.checked_type, "intermediate", kernel_names.get(id(node), "alias"), alias_of=source)
            aliases.append(AliasStep(kernel_names.get(id(node), "alias"), node.op.attr("target") or default_target,
                                     source, output, tuple(c.op.name for c in post_order(node.op.body)
                                                           if isinstance(c, Call)),
                                     node.op.attr("fallback_reason", "")))
            ids[id(node)] = [output]
        elif isinstance(node, Call) and isinstance(node.op, Function) and id(node) in placed_calls:
            name = kernel_names.get(id(node), "concat")
            output = new_value(node.checked_type, "intermediate", name)
            parts = [ids[id(node.args[position])][0] for position in concat_order(node.op)]
            offset = 0
            for part in parts:
                if values[part].placed_in >= 0 or values[part].alias_of >= 0 or values[part].kind != "intermediate":
                    raise InternalError(f"{name}: value {values[part].name} cannot be placed in the "
                                        f"concatenation (placed_concat_calls let it through)\n{node.op}")
                values[part] = replace(values[part], placed_in=output, placed_offset=offset)
                offset += values[part].nbytes
            if offset != values[output].nbytes:
                raise InternalError(f"{name}: the placed inputs cover {offset} of the concatenation's "
                                    f"{values[output].nbytes} bytes\n{node.op}")
            placed.append(PlacedConcat(name, node.op.attr("target") or default_target, tuple(parts), output,
                                       tuple(c.op.name for c in post_order(node.op.body) if isinstance(c, Call)),
                                       node.op.attr("fallback_reason", "")))
            ids[id(node)] = [output]
        elif isinstance(node, Call) and isinstance(node.op, Function):
            ret = node.checked_type
            field_types = ret.fields if isinstance(ret, TupleType) else (ret,)
            name = kernel_names[id(node)]
            outs = [new_value(t, "intermediate", name) for t in field_types]
            args = [ids[id(arg)][0] for arg in node.args]
            steps.append(KernelStep(name, node.op.attr("target") or default_target, tuple(args), tuple(outs),
                                    tuple(c.op.name for c in post_order(node.op.body)
                                          if isinstance(c, Call) and not isinstance(c.op, Function)),
                                    node.op.attr("fallback_reason", ""),
                                    _index_checks(node.op, args, constants)))
            ids[id(node)] = outs
        elif isinstance(node, Tuple):
            ids[id(node)] = [ids[id(f)][0] for f in node.fields]
        elif isinstance(node, TupleGetItem):
            ids[id(node)] = [ids[id(node.tuple_value)][node.index]]
        elif isinstance(node, Var):
            raise InternalError(f"free variable {node.name} in main")
        elif isinstance(node, Call):
            raise InternalError(f"call of {node.op} was not grouped into a kernel")
    outputs = tuple(ids[id(main.body)])
    for value_id in outputs:
        if values[value_id].kind == "intermediate":
            values[value_id] = replace(values[value_id], kind="output")
    for value_id in outputs:
        if values[value_id].placed_in >= 0:
            raise InternalError(f"model output {values[value_id].name} was placed in a concatenation")
    return ExecutionPlan(tuple(values), tuple(steps), tuple(inputs), outputs, aliases=tuple(aliases),
                         placed_concats=tuple(placed)), constants


def _index_checks(function: Function, args: list[int], constants: dict[int, np.ndarray]) -> tuple[IndexCheck, ...]:
    """The gather indices a group's kernel reads: constant ones are checked now (ShapeError),
    the others become IndexChecks of the step, run by the executor before each launch."""
    params = {id(p): position for position, p in enumerate(function.params)}
    checks = []
    for call in post_order(function.body):
        if not (isinstance(call, Call) and isinstance(call.op, Op) and call.op.index_bounds is not None):
            continue
        bounds = call.op.index_bounds(tuple(a.checked_type for a in call.args), call.attrs)
        indices = call.args[bounds.argument]
        position = params.get(id(indices))
        if isinstance(indices, Constant) or (position is not None and args[position] in constants):
            value = indices.value if isinstance(indices, Constant) else constants[args[position]]
            bad = first_out_of_range(value, bounds.extents, bounds.per_last_axis)
            if bad is not None:
                raise ShapeError(f"{describe_out_of_range(call.op.name, call.span or '', bad, bounds.per_last_axis)}; "
                                 "the indices are constants of the model")
        elif position is not None:
            checks.append(IndexCheck(position, bounds.extents, call.op.name, call.span or "", bounds.per_last_axis))
        else:
            raise InternalError(f"the indices of {call.op.name} are computed inside the kernel, where nothing "
                                f"checks them; fuse_ops keeps index producers out of a gather's group\n{function}")
    return tuple(checks)
