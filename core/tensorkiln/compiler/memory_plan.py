"""Static memory planning: map intermediate values to reusable storages in one arena per target.

Liveness-based and size/dtype-aware (sizes in bytes): a storage is free again
after the last step that reads its value; a new value takes the smallest free
storage that fits (growing the best candidate if none fits). An elementwise
group may write its output over an input that dies at that step (in place).
Model outputs stay live to the end. Inputs and constants keep their own buffers.

Aliases (`ValueInfo.alias_of`: a reshape-only group elided, compiler/alias_steps.py) have no
storage of their own: liveness is per root value (the end of the alias chain), so the root's
storage stays live until the last read of any alias of it, and no step writes over it in place
before then. An alias gets its root's storage; an alias of an input or constant gets none (it is
a view of that buffer, which no kernel writes).

Placed values (`ValueInfo.placed_in`: a concatenation elided, compiler/placed_concats.py) are
bytes of their root, the outermost elided concatenation, which no step produces: its storage is
taken when the first of its parts is written and stays live until the last step reading any value
rooted in it (or writing one of its parts). A placed part is written at an offset of that storage
while its step's inputs are still read, so it never takes a storage in place, and a step runs in
place over a dying root only where it reads it from offset 0 with an output's shape.
"""
from __future__ import annotations

from dataclasses import replace

from ..graph.registry import OpPattern, get_op
from ..runtime.plan import ExecutionPlan, StorageInfo

__all__ = ["plan_memory", "ALIGNMENT"]

ALIGNMENT = 64


def _align(n: int) -> int:
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def _is_elementwise(ops: tuple[str, ...]) -> bool:
    return bool(ops) and all(get_op(name).pattern <= OpPattern.BROADCAST for name in ops)


def plan_memory(plan: ExecutionPlan, reuse: bool = True) -> ExecutionPlan:
    """Assign every intermediate/output value a storage; returns the plan with offsets."""
    root = plan.root
    last_use: dict[int, int] = {}
    for index, step in enumerate(plan.steps):
        for value_id in (*step.inputs, *(v for v in step.outputs if plan.values[v].placed_in >= 0)):
            last_use[root(value_id)] = index
    end = len(plan.steps)
    for value_id in plan.outputs:
        last_use[root(value_id)] = end
    values = list(plan.values)
    sizes: list[int] = []          # storage id -> bytes
    storage_target: list[str] = []
    free: dict[str, list[int]] = {}
    holders: dict[int, int] = {}   # storage id -> value currently in it

    def allocate(value_id: int, target: str, preferred: list[int], avoided: tuple[int, ...] = ()) -> int:
        need = values[value_id].nbytes
        pool = free.setdefault(target, [])
        for storage in preferred:  # in place: an input of this elementwise step that dies here
            if storage in pool and sizes[storage] >= need:
                pool.remove(storage)
                return storage
        pool = [s for s in pool if s not in avoided]
        if reuse and pool:
            fitting = [s for s in pool if sizes[s] >= need]
            storage = min(fitting, key=lambda s: sizes[s]) if fitting else max(pool, key=lambda s: sizes[s])
            free[target].remove(storage)
            sizes[storage] = max(sizes[storage], need)
            return storage
        sizes.append(need)
        storage_target.append(target)
        return len(sizes) - 1

    for index, step in enumerate(plan.steps):
        dying = [v for v in {root(u) for u in step.inputs} if last_use.get(v) == index and values[v].storage >= 0]
        in_place: list[int] = []
        if reuse and _is_elementwise(step.ops):
            out_shapes = {values[o].shape for o in step.outputs}
            for value_id in dying:
                # every read of the storage here (the root or an alias of it) has an output's shape and
                # starts at the storage's start: element i is read only to write element i
                if all(values[u].shape in out_shapes and plan.root_offset(u) == 0
                       for u in step.inputs if root(u) == value_id):
                    storage = values[value_id].storage
                    free.setdefault(storage_target[storage], []).append(storage)
                    in_place.append(storage)
        for value_id in step.outputs:
            if plan.values[value_id].placed_in >= 0:   # its root's storage, taken by its first part
                container = root(value_id)
                if values[container].storage < 0:
                    storage = allocate(container, step.target, [], tuple(in_place))
                    values[container] = replace(values[container], storage=storage)
                    holders[storage] = container
                continue
            storage = allocate(value_id, step.target, in_place)
            values[value_id] = replace(values[value_id], storage=storage)
            holders[storage] = value_id
        for value_id in dying:
            storage = values[value_id].storage
            pool = free.setdefault(storage_target[storage], [])
            if storage not in pool and holders.get(storage) == value_id:
                pool.append(storage)
        for value_id in step.outputs:  # an output nobody reads (e.g. an unused split field)
            if value_id not in last_use and plan.values[value_id].placed_in < 0:
                free.setdefault(step.target, []).append(values[value_id].storage)

    for value in plan.values:   # an alias reads its root's storage (-1: an input's or a constant's buffer)
        if value.alias_of >= 0 or value.placed_in >= 0:
            values[value.id] = replace(value, storage=values[root(value.id)].storage)

    offsets: dict[str, int] = {}
    storages = []
    for storage, size in enumerate(sizes):
        target = storage_target[storage]
        offset = offsets.get(target, 0)
        storages.append(StorageInfo(storage, size, offset, target))
        offsets[target] = offset + _align(size)
    return plan.with_storages(tuple(values), tuple(storages))
