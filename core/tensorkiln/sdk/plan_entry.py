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
           "ENTRY_SYMBOL", "SPEC_SYMBOL", "spec_digest"]

ENTRY_SYMBOL = "tensorkiln_plan_run"
"""The entry's symbol in an exported shared library."""
SPEC_SYMBOL = "tensorkiln_plan_spec"
"""A NUL-terminated string beside it: the `spec_digest` of the spec it was built for."""

PLAN_ENTRY_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p),
                                       ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_int32,
                                       ctypes.c_int32, ctypes.c_int32)
"""The C type of a plan entry: int32_t (void* const* inputs, void* const* constants, uint8_t* arena,
int32_t overlap, int32_t level_begin, int32_t level_end)."""


def encode_step_error(step: int, code: int) -> int:
    """What the entry returns when step `step`'s packed function returned `code` (nonzero)."""
    return ((step + 1) << 16) | (code & 0xFFFF)


@dataclass(frozen=True)
class Slot:
    """Where one kernel argument lives: `kind` "input" (index into inputs), "constant" (index into
    constants) or "arena" (`index` is a byte offset into the arena)."""

    kind: str
    index: int


@dataclass(frozen=True)
class PlanEntryStep:
    """Call kernel `kernel` (a name of the module's artifact) on `args`, in its parameter order. A step
    the caller runs itself (a control-flow step) has kernel "" and no args; the entry never calls it,
    as the caller never asks for a level range holding one."""

    kernel: str
    args: tuple[Slot, ...]


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
    return hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode()).hexdigest()


class PlanEntry:
    """A native function at `address` running a `PlanEntrySpec`; `owner` keeps its code alive.

    `signature_of(kernel)` gives a step's KernelSignature for error messages.
    """

    def __init__(self, spec: PlanEntrySpec, address: int, owner: Any,
                 signature_of: Callable[[str], Any] | None = None) -> None:
        self.spec = spec
        self.function = PLAN_ENTRY_FUNCTION(address)
        self._owner = owner
        self._signature_of = signature_of

    def __call__(self, inputs, constants, arena_address: int, overlap: int = 1, begin: int = 0,
                 end: int | None = None) -> None:
        """Run levels `begin` to `end` (default: all) of the plan: `inputs` and `constants` are ctypes arrays
        of c_void_p; raises on an error code."""
        if end is None:
            end = len(self.spec.levels) if self.spec.levels else len(self.spec.steps)
        code = self.function(inputs, constants, arena_address, overlap, begin, end)
        if code != 0:
            raise RuntimeLaunchError(self.describe_error(code))

    def describe_error(self, code: int) -> str:
        step = (code >> 16) - 1
        if not 0 <= step < len(self.spec.steps):
            return f"the native plan entry failed with error code {code}"
        kernel = self.spec.steps[step].kernel
        if self._signature_of is not None:
            from .native import describe_error
            detail = describe_error(self._signature_of(kernel), code & 0xFFFF)
        else:
            detail = f"error code {code & 0xFFFF}"
        return f"step {step} (kernel {kernel}) of the native plan entry: {detail}"
