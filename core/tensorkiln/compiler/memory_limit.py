"""compiler/memory_limit.py: refuse, at compile time, a model that cannot fit in memory.

Two checks against `limit` bytes (tk.compile's memory_limit=, default the machine's
physical memory), both before anything is allocated:

- `check_tensor_sizes(mod, limit)`: no single tensor of the graph may exceed the limit
  (run first, so a 10^12-element shape fails before lowering or planning);
- `check_planned_memory(plan, constants, limit)`: after memory planning, the planned
  arenas (activations, with reuse) plus the weights plus the inputs must fit.

Both raise MemoryLimitError naming the largest tensor (its node/op, shape, dtype, bytes)
and the limit.
"""
from __future__ import annotations

import numpy as np

from ..graph import Call, Constant, Module, Var, post_order
from ..graph.types import TensorType, TupleType
from ..ir.errors import MemoryLimitError
from ..ir.memory import format_bytes, tensor_bytes
from ..runtime.plan import ExecutionPlan

__all__ = ["check_tensor_sizes", "check_planned_memory"]


def check_tensor_sizes(mod: Module, limit: int) -> None:
    """Raise MemoryLimitError when one tensor of `mod`'s main function alone exceeds `limit` bytes."""
    largest, largest_bytes, where = None, -1, ""
    for node in (*mod.main.params, *post_order(mod.main.body)):
        ttype = node.checked_type
        for field_type in ttype.fields if isinstance(ttype, TupleType) else (ttype,):
            if isinstance(field_type, TensorType):
                nbytes = tensor_bytes(field_type.shape, field_type.dtype)
                if nbytes > largest_bytes:
                    largest, largest_bytes, where = field_type, nbytes, _describe_node(node)
    if largest is not None and largest_bytes > limit:
        raise MemoryLimitError(
            f"{where} has shape {largest.shape} ({largest.dtype}), {format_bytes(largest_bytes)}: more than the "
            f"memory limit of {format_bytes(limit)}; check the model's shapes, or pass a larger "
            "tk.compile(..., memory_limit=...) if the machine really has that much")


def check_planned_memory(plan: ExecutionPlan, constants: dict[int, np.ndarray], limit: int) -> None:
    """Raise MemoryLimitError when the planned storages plus constants plus inputs exceed `limit` bytes."""
    activations = sum(storage.nbytes for storage in plan.storages)
    weights = sum(tensor_bytes(plan.values[v].shape, plan.values[v].dtype) for v in constants)
    inputs = sum(tensor_bytes(plan.values[v].shape, plan.values[v].dtype) for v in plan.inputs)
    total = activations + weights + inputs
    if total <= limit:
        return
    value = max(plan.values, key=lambda v: tensor_bytes(v.shape, v.dtype))
    producer = next((step for step in plan.steps if value.id in step.outputs), None)
    where = (f"{value.kind} {value.name!r}" if producer is None
             else f"kernel {producer.name!r} ({', '.join(producer.ops)}) output")
    raise MemoryLimitError(
        f"the compiled model needs {format_bytes(total)} (activations {format_bytes(activations)}, weights "
        f"{format_bytes(weights)}, inputs {format_bytes(inputs)}): more than the memory limit of "
        f"{format_bytes(limit)}; its largest tensor is the {where} of shape {value.shape} ({value.dtype}), "
        f"{format_bytes(tensor_bytes(value.shape, value.dtype))}. Use smaller shapes, or pass a larger "
        "tk.compile(..., memory_limit=...) if the machine really has that much")


def _describe_node(node) -> str:
    if isinstance(node, Var):
        return f"model input {node.name!r}"
    if isinstance(node, Constant):
        return "a constant"
    if isinstance(node, Call):
        op = getattr(node.op, "name", None) or "a fused group"
        source = node.span
        return f"the result of {op}" + (f" (node {source!r})" if source else "")
    return f"a {type(node).__name__}"
