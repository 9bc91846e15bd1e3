"""runtime/native_entry.py: the graph executor's whole-plan native entry: when it applies, and its per-run binding.

A plan whose every step is a kernel of one host-memory target can run as one native call
(`LoadedModule.build_plan_entry`, tensorkiln.sdk.plan_entry): the kernels are called in
order over the same arena, at the memory plan's offsets, as the Python loop would call them,
so the outputs are the same bits. The Python loop stays for everything the native call
cannot do: steps on several targets (copies between devices), a kernel that writes a constant
or an input, and profiling (per-step timers); `native_reason` says which applies and
`CompiledModel.summary()["executor"]` shows it. Control-flow steps (If/Loop/Scan host programs)
run inside the entry when their bodies are native calls themselves (runtime/native_control.py);
any other splits a run into native calls with the Python loop running it between them
(`segments`). Gather indices are checked before their kernel by the entry when its module
takes checks (`plan_entry_index_checks`), else in Python, where a gather whose indices are
computed starts a new native call.
A value that aliases another (a reshape-only group elided, `ValueInfo.alias_of`) has no step
and no call: the tables hold its root's slot (input, constant) or arena offset; a value placed in
an elided concatenation (`ValueInfo.placed_in`) is its root's arena offset plus its own offset in it.
"""
from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any, Collection, Sequence

import numpy as np

from ..ir.dtypes import to_numpy
from ..sdk.arg_checks import written_params
from ..sdk.plan_entry import DETAIL_BYTES, PlanEntry, PlanEntryIndexCheck, PlanEntrySpec, PlanEntryStep, Slot

__all__ = ["NativeEntry", "static_reason", "Segment", "plan_levels", "segments", "build_native_entry",
           "NativeBinding", "place_input", "IN_PLACE_BYTES", "input_dtypes",
           "PYTHON_EXECUTOR", "NATIVE_EXECUTOR"]

NATIVE_EXECUTOR = "native entry (one call per run)"
PYTHON_EXECUTOR = "python executor"


def static_reason(plan, host_programs: Sequence[str]) -> str:
    """Why `plan` must run in the Python executor whatever the target offers ("" when nothing stops it).
    Control-flow steps (`host_programs`) do not stop it: the entry runs those it can (native_control.py)."""
    if not plan.steps:
        return "the plan has no steps"
    targets = sorted({step.target for step in plan.steps})
    if len(targets) > 1:
        return f"steps run on several targets ({', '.join(t.split()[0] for t in targets)})"
    return ""


@dataclass(frozen=True)
class Segment:
    """Levels `begin` to `end` (exclusive) of a run: one call of the native entry, or (`native` False)
    control-flow steps the Python loop runs. `checks`: steps whose gather indices Python checks
    before the segment (they start a native segment: their indices may come from earlier levels)."""

    native: bool
    begin: int
    end: int
    checks: tuple[int, ...] = ()


def plan_levels(plan) -> tuple[tuple[int, ...], ...]:
    """The plan's concurrent levels, or one level per step."""
    return tuple(plan.concurrent_levels) or tuple((index,) for index in range(len(plan.steps)))


def segments(plan, levels, host_programs: Sequence[str], checked: Collection[int] = ()) -> tuple[Segment, ...]:
    """Split a run into native calls and Python stretches: a level holding a control-flow step runs in
    Python; a level holding a gather whose indices Python must check starts a new native call (the
    entry checks those of the steps in `checked` itself)."""
    inputs = set(plan.inputs)

    def computed(index: int) -> bool:   # its indices come from another step, not from a model input
        step = plan.steps[index]
        return any(plan.root(step.inputs[check.input]) not in inputs for check in step.index_checks)

    found: list[Segment] = []
    for number, level in enumerate(levels):
        host = any(plan.steps[i].kernel in host_programs for i in level)
        checks = tuple(i for i in level if plan.steps[i].index_checks and i not in checked)
        last = found[-1] if found else None
        if last is not None and last.native == (not host) and not any(computed(i) for i in checks):
            found[-1] = Segment(last.native, last.begin, number + 1, last.checks + checks if not host else ())
        else:
            found.append(Segment(not host, number, number + 1, checks if not host else ()))
    if found and found[0].native:   # indices that are model inputs are checked before the first call
        early = tuple(i for s in found[1:] if s.native for i in s.checks if not computed(i))
        found = [Segment(True, found[0].begin, found[0].end, found[0].checks + early),
                 *(Segment(s.native, s.begin, s.end, tuple(i for i in s.checks if computed(i))) for s in found[1:])]
    return tuple(found)


@dataclass
class NativeEntry:
    """What `build_native_entry` found: the entry (None: the plan runs in Python, for `reason`), its
    constants table, the control-flow steps it leaves to Python (program name -> why) and the
    arrays its spec points at."""

    entry: PlanEntry | None
    constants: Any = None
    reason: str = ""
    python_control: dict[str, str] = field(default_factory=dict)
    keep: list = field(default_factory=list)
    checked: frozenset[int] = frozenset()   # steps whose gather indices the entry checks


@dataclass
class _Spec:
    """The entry's spec, the constants' value ids in its order, and each control step's body entries."""

    spec: PlanEntrySpec
    constant_ids: list[int]
    bodies: dict[int, tuple]


def _spec(executor, index_checks: bool = True) -> tuple[_Spec | None, NativeEntry]:
    """The entry's spec and what the NativeEntry will tell, or (None, why there is none). `index_checks`:
    give the entry the gather-index checks when its module takes them."""
    plan = executor.plan
    target = plan.steps[0].target
    if not executor.loaders[target].uses_host_memory:
        return None, NativeEntry(None, reason=f"target {target.split()[0]} keeps memory on its device")
    storages = {s.id: s for s in plan.storages}
    input_index = {value_id: index for index, value_id in enumerate(plan.inputs)}
    constant_index: dict[int, int] = {}
    module = _module_of(executor.compiled, target)
    if module is None:
        return None, NativeEntry(None, reason=f"no module of target {target.split()[0]} is loaded (every step is a "
                                              "control-flow step and no body has kernels)")
    host_programs = getattr(executor.compiled, "host_programs", {}) or {}

    def slot_of(value_id: int) -> Slot:
        value = plan.values[plan.root(value_id)]   # an alias is its root's buffer: the same slot or offset
        if value.kind == "input":
            return Slot("input", input_index[value.id])
        if value.kind == "constant":
            return Slot("constant", constant_index.setdefault(value.id, len(constant_index)))
        # a placed value (part of an elided concatenation) lies inside its root's storage
        return Slot("arena", storages[value.storage].offset + plan.root_offset(value_id))

    from .native_control import Scratch, control_record
    scratch = Scratch(executor.arena_sizes.get(target, 0))
    python_control: dict[str, str] = {}
    bodies: dict[int, tuple] = {}
    steps = []
    checked: set[int] = set()
    for index, step in enumerate(plan.steps):
        if step.kernel in host_programs:
            record, entries, why = (None, (), f"target {target.split()[0]}'s entry runs no control flow") \
                if not getattr(module, "plan_entry_control_flow", False) else \
                control_record(plan, step, host_programs[step.kernel], slot_of, scratch)
            if record is None:   # run by Python between native calls; never called by the entry
                python_control.setdefault(step.kernel, why)
                steps.append(PlanEntryStep("", ()))
            else:
                bodies[index] = entries
                steps.append(PlanEntryStep(step.kernel, (), record))
            continue
        try:
            signature = module.artifact.kernel(step.kernel)
        except KeyError:   # a step the executor runs some other way (a host step of a kind added later)
            return None, NativeEntry(None, reason=f"step {step.kernel} is not a kernel of the target's module")
        values = (*step.inputs, *step.outputs)
        if len(signature.params) != len(values) or any(p.kind != "buffer" for p in signature.params):
            return None, NativeEntry(None, reason=f"kernel {step.kernel} takes parameters the plan does not bind")
        written = written_params(module.artifact.metadata, step.kernel) or frozenset()
        for spec, value_id in zip(signature.params, values):
            value = plan.values[plan.root(value_id)]
            if value.kind in ("input", "constant") and spec.name in written:
                return None, NativeEntry(None, reason=f"kernel {step.kernel} writes its {value.kind} {value.name}")
        checks = _index_checks(plan, step, slot_of) \
            if index_checks and getattr(module, "plan_entry_index_checks", False) else None
        if checks:
            checked.add(index)
            steps.append(PlanEntryStep(step.kernel, tuple(slot_of(v) for v in values), None, checks,
                                       scratch.take(DETAIL_BYTES)))
        else:
            steps.append(PlanEntryStep(step.kernel, tuple(slot_of(v) for v in values)))
    if len(python_control) and all(step.kernel in python_control for step in plan.steps):
        name, why = next(iter(python_control.items()))
        return None, NativeEntry(None, reason=f"every step is a control-flow step run in Python ({name}: {why})")
    spec = PlanEntrySpec(tuple(steps), len(plan.inputs), len(constant_index), scratch.end, plan_levels(plan))
    return _Spec(spec, list(constant_index), bodies), NativeEntry(None, None, "", python_control, scratch.keep,
                                                                  frozenset(checked))


_CHECKED_DTYPES = ("int8", "int16", "int32", "int64")


def _index_checks(plan, step, slot_of) -> tuple[PlanEntryIndexCheck, ...] | None:
    """The entry's records of `step`'s gather-index checks (None: none, or one the entry cannot do)."""
    records = []
    for check in step.index_checks:
        value = plan.values[step.inputs[check.input]]
        if value.dtype not in _CHECKED_DTYPES:
            return None
        records.append(PlanEntryIndexCheck(slot_of(step.inputs[check.input]), value.dtype, tuple(value.shape),
                                           tuple(check.extents), check.per_last_axis, check.op, check.node))
    return tuple(records) or None


def _module_of(compiled, target: str):
    """The model's loaded module of `target`; for a model whose every step is control flow (it has no
    kernels), a body's, which builds an entry as well (None when no body has kernels either)."""
    if target in compiled.artifacts:
        return compiled.loaded_module(target)
    for program in (getattr(compiled, "host_programs", {}) or {}).values():
        for body in program.bodies:
            module = _module_of(body, target)
            if module is not None:
                return module
    return None


def build_native_entry(executor) -> NativeEntry:
    """The plan's entry when it runs as native calls (`NativeEntry.entry`), else why not."""
    reason = static_reason(executor.plan, tuple(getattr(executor.compiled, "host_programs", {}) or {}))
    if reason:
        return NativeEntry(None, reason=reason)
    found, told = _spec(executor)
    if found is None:
        return told
    target = executor.plan.steps[0].target
    module = _module_of(executor.compiled, target)
    entry = module.build_plan_entry(found.spec)
    if entry is None and told.checked:   # a library exported before entries checked indices carries one without
        found, told = _spec(executor, index_checks=False)
        entry = module.build_plan_entry(found.spec)
    spec, constant_ids = found.spec, found.constant_ids
    if entry is None:
        return NativeEntry(None, reason=f"target {target.split()[0]} offers no whole-plan entry "
                                        "(LoadedModule.build_plan_entry)")
    entry.bodies = found.bodies
    # the executor's constants are contiguous, read-only and live as long as it does
    constants = (ctypes.c_void_p * max(1, len(constant_ids)))(
        *(executor.constants[v].ctypes.data for v in constant_ids))
    return NativeEntry(entry, constants, "", told.python_control, told.keep, told.checked)


class NativeBinding:
    """The entry bound to one execution state: its arena and its input buffers.

    `run()` reads the inputs from the state's buffers; `run(arrays)` from the caller's arrays
    (already checked: dtype, shape, C-contiguous and aligned), with no copy.
    """

    def __init__(self, entry: PlanEntry, constants, arena: np.ndarray, input_buffers: Sequence[np.ndarray]) -> None:
        self.entry = entry
        self.constants = constants
        self.arena = arena
        self.arena_address = arena.ctypes.data
        count = max(1, len(input_buffers))
        self.state_inputs = (ctypes.c_void_p * count)(*(b.ctypes.data for b in input_buffers))
        self.call_inputs = (ctypes.c_void_p * count)()

    def run(self, addresses: Sequence[int] | None, overlap: int, begin: int, end: int) -> None:
        """Run levels `begin` to `end` of the plan."""
        if addresses is None:
            self.entry(self.state_inputs, self.constants, self.arena_address, overlap, begin, end)
            return
        slots = self.call_inputs
        for index, address in enumerate(addresses):
            slots[index] = address
        self.entry(slots, self.constants, self.arena_address, overlap, begin, end)


IN_PLACE_BYTES = 1 << 18
"""Inputs from this size on are read in place; smaller ones are copied into the state's buffer. Reading
an array's address from Python (`__array_interface__`) costs about as much as copying 256 KiB (both
about 5 us, measured on the 2-core host), and a copy needs no layout check."""


def place_input(array: Any, buffer: np.ndarray) -> int | None:
    """Give the entry input `array`, which fits `buffer` (the state's buffer for that input) in dtype and
    shape: returns its address when the kernels read it in place, else copies it into `buffer` and
    returns None. Anything else (another dtype or shape, a list) is the caller's to check."""
    if array.nbytes >= IN_PLACE_BYTES:
        flags = array.flags
        if flags.c_contiguous and flags.aligned:
            return array.__array_interface__["data"][0]
    buffer[...] = array
    return None


def input_dtypes(plan) -> list[tuple[np.dtype, tuple[int, ...]]]:
    """(numpy dtype, shape) of each model input, for the executor's check before `place_input`."""
    return [(np.dtype(to_numpy(plan.values[v].dtype)), plan.values[v].shape) for v in plan.inputs]
