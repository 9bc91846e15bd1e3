"""sdk/plan_entry.py: a whole-plan native entry point, the contract between the executor and a native target.

Who uses it: `tensorkiln.runtime.GraphExecutor` asks the loaded module of a model whose
every step runs on one host-memory target for `module.build_plan_entry(spec)`
(`LoadedModule.build_plan_entry`, None by default). A plugin that generates native code
(cpu_llvm) may return a `PlanEntry`: one native function that calls every kernel of the
plan in order, so a run costs one call from Python instead of one per step (an AOT
executor like TVM's). The ABI, as C::

    int32_t run(void* const* inputs,     // the model's inputs, in plan order
                void* const* constants,  // the plan's constants, in the order of the spec's slots
                uint8_t* arena,          // the run's arena: intermediates and outputs at their offsets
                int32_t overlap,         // how many steps of one concurrent level may run at once
                int32_t level_begin,     // run levels [level_begin, level_end) of `PlanEntrySpec.levels`
                int32_t level_end);

`inputs` and `constants` hold at least one pointer each (a model without constants passes a
table with one NULL). It returns 0, or `((step + 1) << 16) | code` when the packed function of `step` returned
`code` (an argument check; see tensorkiln.sdk.native): `PlanEntry.describe_error` says which.

Each argument of a step is a `Slot`: an input, a constant or a byte offset into the arena
(the memory plan's storages). The caller owns every buffer: it checks the inputs, allocates
one arena per concurrent run and keeps the constants alive; the entry holds no state, so
concurrent calls on different arenas are safe. Only numpy, ctypes and the standard library
are imported here (a deployed package loads without the compiler).

Control flow. A step may be an If, Loop or Scan (`PlanEntryStep.control`: `PlanEntryIf`,
`PlanEntryLoop`, `PlanEntryScan`) whose bodies are plans with entries of their own
(`PlanEntryBody`): the entry calls a body's entry with an inputs table it builds from its own
slots (values are read in place), the body's constants table, and an arena carved from its own
arena (`arena_offset`; `arena_bytes` counts it), then copies the body's results into the step's
outputs; Loop and Scan carry values between iterations in two buffers of the arena used in
turn. A body's addresses belong to this process, so such a spec is never exported. When a body
fails, the step returns `BODY_FAILED` and leaves the body's code, which branch and which
iteration in its `detail` bytes of the arena, for `describe_error`; a loop with scan outputs that
ran another number of iterations than its static trip count returns `LOOP_COUNT`.

An exported shared library may carry the entry of its model's plan: the function
`tensorkiln_plan_run` (ENTRY_SYMBOL) and the string `tensorkiln_plan_spec` (SPEC_SYMBOL)
holding `spec_digest(spec)`; `NativeModule.build_plan_entry` returns it for a spec with the
same digest, so a deployed package (runtime/deploy.py) runs in one call too.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any, Callable

from ..ir.errors import RuntimeLaunchError

__all__ = ["Slot", "PlanEntryStep", "PlanEntrySpec", "PlanEntry", "PLAN_ENTRY_FUNCTION", "encode_step_error",
           "ENTRY_SYMBOL", "SPEC_SYMBOL", "spec_digest", "PlanEntryBody", "PlanEntryIf", "PlanEntryLoop",
           "PlanEntryScan", "PlanEntryIndexCheck", "BODY_FAILED", "LOOP_COUNT", "INDEX_OUT_OF_RANGE",
           "DETAIL_BYTES", "function_address"]

ENTRY_SYMBOL = "tensorkiln_plan_run"
"""The entry's symbol in an exported shared library."""
SPEC_SYMBOL = "tensorkiln_plan_spec"
"""A NUL-terminated string beside it: the `spec_digest` of the spec it was built for."""

PLAN_ENTRY_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int32,
                                       ctypes.c_int32, ctypes.c_int32)
"""The C type of a plan entry: int32_t (void* const* inputs, void* const* constants, uint8_t* arena,
int32_t overlap, int32_t level_begin, int32_t level_end)."""


BODY_FAILED = 0xFFFF
"""A control-flow step's code when a body's entry failed (the body's code is in the step's detail bytes)."""
LOOP_COUNT = 0xFFFE
"""A loop's code when it ran another number of iterations than its scan outputs were compiled for."""
INDEX_OUT_OF_RANGE = 0xFD00
"""A kernel step's code when one of its `checks` found a gather index out of range (a kernel's own codes
never have a low byte of 0: see tensorkiln.sdk.native)."""
DETAIL_BYTES = 24
"""A step's detail bytes in the arena: a control-flow step's int32 body code, int32 body index, int64
iteration; a checked kernel step's int64 check number, int64 flat position and int64 value."""


def function_address(function: Any) -> int:
    """The address of a ctypes function pointer (a PlanEntry's `function`)."""
    return ctypes.cast(function, ctypes.c_void_p).value or 0


def encode_step_error(step: int, code: int) -> int:
    """What the entry returns when step `step`'s packed function returned `code` (nonzero)."""
    return ((step + 1) << 16) | (code & 0xFFFF)


@dataclass(frozen=True)
class Slot:
    """Where one kernel argument lives: `kind` "input" (index into inputs), "constant" (index into
    constants), "arena" (`index` is a byte offset into the arena) or "address" (`index` is the address
    of an array the caller keeps alive: a constant of a control-flow step; never exported)."""

    kind: str
    index: int


@dataclass(frozen=True)
class PlanEntryBody:
    """A body the entry calls: the entry function at `address` (0: a body without kernels, nothing to
    call) with `num_inputs` pointers, its constants table at `constants`, its arena at byte
    `arena_offset` of the caller's, and levels [0, `levels`). After the call, result i is at
    `outputs[i]`: "input" (entry i of the inputs table the caller built), "arena" (offset in the
    body's arena) or "address" (a constant's address), `output_bytes[i]` bytes."""

    address: int
    constants: int
    levels: int
    num_inputs: int
    arena_offset: int
    outputs: tuple[Slot, ...]
    output_bytes: tuple[int, ...]


@dataclass(frozen=True)
class PlanEntryIf:
    """ONNX If: `cond` (one bool byte) picks `bodies[0]` (then) or `bodies[1]` (else), each called with
    `inputs`; their results are copied into `outputs` (`output_bytes` each). `detail`: the arena
    offset of the step's DETAIL_BYTES."""

    cond: Slot
    bodies: tuple[PlanEntryBody, PlanEntryBody]
    inputs: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    output_bytes: tuple[int, ...]
    detail: int


@dataclass(frozen=True)
class PlanEntryLoop:
    """ONNX Loop (graph/ops/control_flow.py run_loop): `trip` (int64, absent: no limit) and `cond` (bool,
    absent: true) are read at run time. The body takes (iteration: int64 at arena offset `iteration`,
    cond: bool at `cond_buffer`, *carried, *captured) and returns (cond, *carried, *scan elements).
    The carried values live in two sets of arena buffers (`carried_buffers[0]` and `[1]`, offsets),
    used in turn; `carried` are the initial values (`carried_bytes`), `captured` read in place.
    `outputs`: the final carried values, then each scan output, whose element of iteration i goes
    to byte i * `scan_bytes[e]`; with scan outputs the loop must run `max_trip_count` iterations."""

    trip: Slot | None
    cond: Slot | None
    body: PlanEntryBody
    carried: tuple[Slot, ...]
    carried_bytes: tuple[int, ...]
    captured: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    scan_bytes: tuple[int, ...]
    max_trip_count: int
    iteration: int
    cond_buffer: int
    carried_buffers: tuple[tuple[int, ...], tuple[int, ...]]
    detail: int


@dataclass(frozen=True)
class PlanEntryScan:
    """ONNX Scan (run_scan): `length` iterations; iteration i reads slice i (or length-1-i where
    `input_directions` says 1) of each of `scan_inputs` (`slice_bytes` each) and writes its element e
    at row i (or length-1-i) of scan output e. States live in two sets of arena buffers like a loop's
    carried values. A scan axis past 0 splits a slice into `input_outer[k]` runs of contiguous bytes
    (the product of the extents before the axis), which the entry gathers into the arena buffer at
    `slice_buffers[k]` (-1: axis 0, the slice is read in place); likewise element e goes to
    `output_outer[e]` runs of scan output e."""

    body: PlanEntryBody
    length: int
    states: tuple[Slot, ...]
    state_bytes: tuple[int, ...]
    scan_inputs: tuple[Slot, ...]
    slice_bytes: tuple[int, ...]
    input_directions: tuple[int, ...]
    captured: tuple[Slot, ...]
    outputs: tuple[Slot, ...]
    scan_bytes: tuple[int, ...]
    output_directions: tuple[int, ...]
    state_buffers: tuple[tuple[int, ...], tuple[int, ...]]
    detail: int
    input_outer: tuple[int, ...] = ()
    slice_buffers: tuple[int, ...] = ()
    output_outer: tuple[int, ...] = ()


@dataclass(frozen=True)
class PlanEntryIndexCheck:
    """Before its step's kernel, the entry checks that each index at `slot` (`shape`, `dtype` a signed
    integer) lies in [-n, n), n = `extents[0]`, or `extents[j]` for index[..., j] when `per_last_axis`
    (tensorkiln.ir.index_range, which the Python executor runs): generated code clamps indices. `op` and
    `node` name the gather in the error."""

    slot: Slot
    dtype: str
    shape: tuple[int, ...]
    extents: tuple[int, ...]
    per_last_axis: bool
    op: str
    node: str = ""


@dataclass(frozen=True)
class PlanEntryStep:
    """Call kernel `kernel` (a name of the module's artifact) on `args`, in its parameter order. A step
    the caller runs itself (a control-flow step in Python) has kernel "" and no args; the entry never
    calls it, as the caller never asks for a level range holding one. A control-flow step the entry
    runs has `control` set (and `kernel` naming it, no args). `checks`: gather indices the entry checks
    before the kernel, with DETAIL_BYTES at arena offset `detail` for the first bad one."""

    kernel: str
    args: tuple[Slot, ...]
    control: PlanEntryIf | PlanEntryLoop | PlanEntryScan | None = None
    checks: tuple[PlanEntryIndexCheck, ...] = ()
    detail: int = -1


@dataclass(frozen=True)
class PlanEntrySpec:
    """The whole plan as the entry sees it: steps in order, how many inputs and constants the
    caller passes, the arena's size in bytes, and the plan's levels (consecutive step indices that
    may run at the same time, covering every step in order; empty: one step per level). With `overlap` > 1 an
    entry may run up to that many steps of a level at once (the memory plan keeps their storages
    apart), as the Python executor does on its thread pool; with 1 it runs them in order."""

    steps: tuple[PlanEntryStep, ...]
    num_inputs: int
    num_constants: int
    arena_bytes: int
    levels: tuple[tuple[int, ...], ...] = ()


def spec_digest(spec: "PlanEntrySpec") -> str:
    """SHA-256 (hex) of everything in `spec`: a library's entry serves only a spec with this digest."""
    fields = asdict(spec)
    for step in fields["steps"]:   # a step without control flow or checks hashes as before those fields existed
        if step.get("control") is None and not step.get("checks"):
            for name in ("control", "checks", "detail"):
                step.pop(name, None)
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()


class PlanEntry:
    """A native function at `address` running a `PlanEntrySpec`; `owner` keeps its code alive.

    `signature_of(kernel)` gives a step's KernelSignature for error messages. `bodies` maps a
    control-flow step's index to its bodies' PlanEntry objects (None for a body without kernels):
    the caller that builds the spec sets it, and `describe_error` names a failing body's step too.
    """

    def __init__(self, spec: PlanEntrySpec, address: int, owner: Any,
                 signature_of: Callable[[str], Any] | None = None) -> None:
        self.spec = spec
        self.function = PLAN_ENTRY_FUNCTION(address)
        self._owner = owner
        self._signature_of = signature_of
        self.bodies: dict[int, tuple[Any, ...]] = {}

    def __call__(self, inputs, constants, arena_address: int, overlap: int = 1, begin: int = 0,
                 end: int | None = None) -> None:
        """Run levels `begin` to `end` (default: all) of the plan: `inputs` and `constants` are ctypes arrays
        of c_void_p; raises on an error code."""
        if end is None:
            end = len(self.spec.levels) if self.spec.levels else len(self.spec.steps)
        code = self.function(inputs, constants, arena_address, overlap, begin, end)
        if code != 0:
            raise RuntimeLaunchError(self.describe_error(code, arena_address))

    def describe_error(self, code: int, arena_address: int | None = None) -> str:
        step = (code >> 16) - 1
        if not 0 <= step < len(self.spec.steps):
            return f"the native plan entry failed with error code {code}"
        kernel = self.spec.steps[step].kernel
        control = self.spec.steps[step].control
        if control is not None:
            return f"step {step} ({kernel}) of the native plan entry: " + \
                self._describe_control(step, control, code & 0xFFFF, arena_address)
        if (code & 0xFFFF) == INDEX_OUT_OF_RANGE and self.spec.steps[step].checks and arena_address is not None:
            return self._describe_check(self.spec.steps[step], arena_address)
        if self._signature_of is not None:
            from .native import describe_error
            detail = describe_error(self._signature_of(kernel), code & 0xFFFF)
        else:
            detail = f"error code {code & 0xFFFF}"
        return f"step {step} (kernel {kernel}) of the native plan entry: {detail}"

    @staticmethod
    def _describe_check(step: PlanEntryStep, arena_address: int) -> str:
        """The Python executor's words for the first bad index (GraphExecutor's check_indices)."""
        import numpy as np
        from ..ir.index_range import OutOfRangeIndex, describe_out_of_range
        number, flat, value = (ctypes.c_int64 * 3).from_address(arena_address + step.detail)
        check = step.checks[number]
        position = tuple(int(p) for p in np.unravel_index(flat, check.shape)) if check.shape else ()
        size = check.extents[position[-1]] if check.per_last_axis else check.extents[0]
        bad = OutOfRangeIndex(position, int(value), int(size))
        return (f"{describe_out_of_range(check.op, check.node, bad, check.per_last_axis)} (kernel {step.kernel}); "
                "onnxruntime refuses it too")

    def _describe_control(self, step: int, control: Any, code: int, arena_address: int | None) -> str:
        if arena_address is None:
            return f"error code {code}"
        body_code = ctypes.c_int32.from_address(arena_address + control.detail).value
        which = ctypes.c_int32.from_address(arena_address + control.detail + 4).value
        iteration = ctypes.c_int64.from_address(arena_address + control.detail + 8).value
        if code == LOOP_COUNT:   # the words of graph/ops/control_flow.py run_loop, which the Python path raises
            return (f"loop: ran {iteration} iterations, but its scan outputs were compiled for "
                    f"{control.max_trip_count} (the static trip count); a loop whose condition ends it early "
                    "cannot have scan outputs with static shapes")
        if code != BODY_FAILED:
            return f"error code {code}"
        bodies = self.bodies.get(step, ())
        where = ("the then branch", "the else branch")[which] if isinstance(control, PlanEntryIf) \
            else f"iteration {iteration} of its body"
        body = bodies[which] if 0 <= which < len(bodies) else None
        if body is None:
            return f"{where} failed with error code {body_code}"
        records = control.bodies if isinstance(control, PlanEntryIf) else (control.body,)
        return f"{where}: {body.describe_error(body_code, arena_address + records[which].arena_offset)}"
