"""GraphExecutor: runs an ExecutionPlan on the loaded kernels of one or more targets.

Memory comes from each target's runtime loader: a host target gets one arena
(a numpy buffer) with every planned value a view at its offset; a device target
gets the same through its loader's `empty`/`view`. A value read on another
target than the one that produced it is copied there before the step (inputs
are copied at set_input, constants once per executor).

Threads. Arenas, input buffers and device mirrors make up one `_ExecutionState`.
`run_with` (what `lib(x)` and `lib.run({...})` call) takes a state from a pool for
the length of the call, allocating a new one only when every state is busy, so
concurrent calls never share buffers and sequential calls reuse the same memory;
each call passes every input (nothing carries over from an earlier call). The
stateful API (`set_input`, `run()`, `get_output`, `value`, `run_step`) works on one
state of its own, kept between calls, behind a lock: each method is atomic, but
a sequence of them from several threads interleaves; call `run_with` from threads.

Native entry. When every step runs on one host-memory target whose loaded module offers a
whole-plan entry (cpu_llvm does; runtime/native_entry.py), a run is one native call that runs
the kernels in order over the state's arena (control-flow steps too, calling their bodies'
entries, when runtime/native_control.py can describe them; any other runs here, between native
calls: `_segments`), and `run_with` hands it the caller's large input arrays without a copy
when they already have the right dtype, shape and layout (native_entry.place_input).
`native_reason` says why a plan runs step by step in Python instead;
`use_native = False` (or `run_with(..., native=False)`) forces the Python loop (debugging,
per-step timers: the profiler does this).
"""
from __future__ import annotations

import functools
import os
import threading
import time
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.dtypes import from_numpy, to_numpy
from ..ir.narrow_dtypes import format_of_numpy
from ..ir.errors import RuntimeLaunchError
from ..ir.index_range import describe_out_of_range, first_out_of_range
from ..sdk.host_arrays import aligned_copy
from . import native_entry

__all__ = ["GraphExecutor"]


class _ExecutionState:
    """The buffers of one run: arenas per target, input arrays, views of intermediates and
    outputs, device mirrors, and each step's bound arguments. Constants are shared."""

    def __init__(self, executor: "GraphExecutor") -> None:
        self.executor = executor
        plan = executor.plan
        self.arenas: dict[str, Any] = {}
        for target, size in executor.arena_sizes.items():
            self.arenas[target] = executor.loaders[target].empty((max(size, 1),), "uint8")
        self.host_values: dict[int, Any] = {}   # value id -> array where the value lives
        storages = {s.id: s for s in plan.storages}
        for value in plan.values:
            if value.kind == "input":
                self.host_values[value.id] = np.empty(value.shape, to_numpy(value.dtype))
            elif value.kind == "constant":
                self.host_values[value.id] = executor.constants[value.id]
            elif value.alias_of >= 0 and value.storage < 0:   # a view of an input or a constant (no kernel)
                self.host_values[value.id] = self.host_values[value.alias_of].reshape(value.shape)
            else:   # an alias or a placed value: its root's storage, at its offset in the root's bytes
                storage = storages[value.storage]
                self.host_values[value.id] = executor.loaders[storage.target].view(
                    self.arenas[storage.target], storage.offset + plan.root_offset(value.id), value.shape,
                    value.dtype)
        self.mirrors: dict[tuple[int, str], Any] = {}   # copies of inputs and cross-target values
        self.step_args = [self._bind_step(step) for step in plan.steps]
        # Each step's arguments are the same arrays every run, so each kernel is bound to them
        # once (a native loader checks and packs them there, not at every launch).
        self.calls = [function.bind(*args) if hasattr(function, "bind") else functools.partial(function, *args)
                      for function, args in zip(executor._functions, self.step_args)]
        self.inputs_set = [False] * len(plan.inputs)
        self.native = None
        if executor.native_entry is not None:
            target = plan.steps[0].target
            self.native = native_entry.NativeBinding(
                executor.native_entry, executor._native_constants, self.arenas[target],
                [self.host_values[v] for v in plan.inputs])

    def _on_target(self, value_id: int, target: str) -> Any:
        executor = self.executor
        source = executor.value_target[value_id]
        if source == target or (source is None and executor.loaders[target].uses_host_memory):
            return self.host_values[value_id]
        if executor.plan.values[value_id].kind == "constant":
            return executor.constant_mirror(value_id, target)
        key = (value_id, target)
        if key not in self.mirrors:
            value = executor.plan.values[value_id]
            self.mirrors[key] = executor.loaders[target].empty(value.shape, value.dtype)
        return self.mirrors[key]

    def _bind_step(self, step) -> list:
        return [self._on_target(v, step.target) for v in (*step.inputs, *step.outputs)]

    def refresh_mirrors(self, step) -> None:
        """Copy the current value of each mirrored input of `step` to the step's target."""
        loaders = self.executor.loaders
        for value_id in step.inputs:
            key = (value_id, step.target)
            if key in self.mirrors:
                source = self.executor.value_target[value_id]
                host = self.host_values[value_id] if source is None else loaders[source].to_host(self.host_values[value_id])
                loaders[step.target].copy_into(self.mirrors[key], host)

    def value(self, value_id: int, copy: bool = True) -> np.ndarray:
        """Value `value_id` as a numpy array: a copy, or (copy=False) the array itself where it
        lives in host memory."""
        target = self.executor.value_target[value_id]
        array = self.host_values[value_id]
        if target is None or self.executor.loaders[target].uses_host_memory:
            return np.array(array, copy=True) if copy else array
        return np.asarray(self.executor.loaders[target].to_host(array))

    def check_indices(self, step) -> None:
        """RuntimeLaunchError for the first gather index of `step` out of range (before its launch)."""
        for check in step.index_checks:
            indices = self.value(step.inputs[check.input], copy=False)
            bad = first_out_of_range(indices, check.extents, check.per_last_axis)
            if bad is not None:
                raise RuntimeLaunchError(f"{describe_out_of_range(check.op, check.node, bad, check.per_last_axis)} "
                                         f"(kernel {step.kernel}); onnxruntime refuses it too")


@functools.cache
def _cpu_count() -> int:
    """os.cpu_count(), read once: it reads sysfs on every call (6 us), and overlap_width asks on every run."""
    return os.cpu_count() or 1


def _has_thread_setting(compiled, target: str) -> bool:
    """Whether `target`'s loaded module has a thread setting (native modules with parallel loops)."""
    return callable(getattr(compiled.loaded_module(target), "get_num_threads", None))


class GraphExecutor:
    """Executes a CompiledModel's plan: `run_with(inputs)` from any thread, or the stateful
    `set_input`, `run`, `get_output` (TVM's API) from one thread at a time."""

    def __init__(self, compiled) -> None:
        self.compiled = compiled
        self.plan = compiled.plan
        self.loaders = {t: compiled.target_objects[t].spec.loader for t in compiled.target_objects}
        programs = getattr(compiled, "host_programs", {})
        if programs:   # If/Loop/Scan steps; imported here: a deployed package has none (runtime/deploy.py)
            from .control_flow import host_step
        self._functions = [host_step(programs[step.kernel], self.loaders[step.target]) if step.kernel in programs
                           else compiled.loaded_module(step.target).get_function(step.kernel)
                           for step in self.plan.steps]
        kernel_targets = {s.target for s in self.plan.steps if s.kernel not in programs}   # host steps load nothing
        self._thread_settings = [compiled.loaded_module(t) for t in sorted(kernel_targets)
                                 if _has_thread_setting(compiled, t)] if self.plan.concurrent_levels else []
        self.arena_sizes: dict[str, int] = {}
        for storage in self.plan.storages:
            self.arena_sizes[storage.target] = max(self.arena_sizes.get(storage.target, 0),
                                                   storage.offset + storage.nbytes)
        self.value_target: dict[int, str | None] = {}
        self.constants: dict[int, np.ndarray] = {}
        storages = {s.id: s for s in self.plan.storages}
        for value in self.plan.values:
            if value.kind == "constant":
                # 64-byte aligned: vector loads of a weight then never straddle cache lines (sdk/host_arrays.py)
                constant = aligned_copy(compiled.constants[value.id]).reshape(value.shape)
                constant.flags.writeable = False   # shared by every execution state
                self.constants[value.id] = constant
                if isinstance(compiled.constants, dict):   # one copy of the weights in memory, not two
                    compiled.constants[value.id] = constant
            self.value_target[value.id] = None if value.kind in ("input", "constant") or value.storage < 0 \
                else storages[value.storage].target
        self._constant_mirrors: dict[tuple[int, str], Any] = {}
        found = native_entry.build_native_entry(self)
        self.native_entry, self._native_constants, self.native_reason = found.entry, found.constants, found.reason
        self._native_keep = found.keep   # arrays the entry's control-flow steps point at
        checked = found.checked if self.native_entry is not None else frozenset()   # indices the entry checks
        # control-flow steps the entry leaves to Python (program name -> why); with no entry, all of them
        self._python_control = found.python_control if self.native_entry is not None else dict.fromkeys(programs, "")
        if self.native_entry is not None:   # control-flow steps and index checks keep their buffers past the plan's
            target = self.plan.steps[0].target
            self.arena_sizes[target] = max(self.arena_sizes.get(target, 0), self.native_entry.spec.arena_bytes)
        self.use_native = True
        self._input_layouts = native_entry.input_dtypes(self.plan)
        self._index_checked_steps = [self.plan.steps[i] for i in range(len(self.plan.steps))
                                     if self.plan.steps[i].index_checks and i not in checked]
        self._input_positions = {self.plan.values[v].name: i for i, v in enumerate(self.plan.inputs)}
        self._levels = native_entry.plan_levels(self.plan)
        self._segments = native_entry.segments(self.plan, self._levels, tuple(self._python_control), checked)
        # the entry may read the caller's arrays in place unless Python reads an input from the
        # state: an index check, a control-flow step, or an input that is also an output (or whose
        # alias is: the output is read from the state's buffer)
        self._inputs_in_place = not self._index_checked_steps and not self._python_control \
            and not set(self.plan.inputs) & {self.plan.root(v) for v in self.plan.outputs}
        self._setup_lock = threading.Lock()    # constant mirrors, the step thread pool
        self._pool_lock = threading.Lock()
        self._free_states: list[_ExecutionState] = [_ExecutionState(self)]   # fails here, not at the first run
        self._state_count = 1
        self._stateful_lock = threading.RLock()
        self._stateful_state: _ExecutionState | None = None
        self._step_pool = None
        self.concurrent = True
        self.last_step_times: list[float] = []

    # -- memory -------------------------------------------------------------------------

    def constant_mirror(self, value_id: int, target: str) -> Any:
        """The copy of constant `value_id` on `target`, made once and shared by every state."""
        key = (value_id, target)
        with self._setup_lock:
            if key not in self._constant_mirrors:
                value = self.plan.values[value_id]
                mirror = self.loaders[target].empty(value.shape, value.dtype)
                self.loaders[target].copy_into(mirror, self.constants[value_id])
                self._constant_mirrors[key] = mirror
            return self._constant_mirrors[key]

    def _acquire_state(self) -> _ExecutionState:
        with self._pool_lock:
            if self._free_states:
                return self._free_states.pop()
            self._state_count += 1
        return _ExecutionState(self)

    def _release_state(self, state: _ExecutionState) -> None:
        with self._pool_lock:
            self._free_states.append(state)

    @property
    def state_count(self) -> int:
        """Execution states allocated so far: 1 + the most calls that ever overlapped (+1 once
        the stateful API is used). Each holds the model's arenas and inputs."""
        return self._state_count

    def _stateful(self) -> _ExecutionState:
        """The state of set_input/run()/get_output; call with _stateful_lock held."""
        if self._stateful_state is None:
            self._stateful_state = self._acquire_state()   # kept: it holds the inputs set so far
        return self._stateful_state

    # -- inputs -------------------------------------------------------------------------

    def _input_index(self, key: int | str) -> int:
        names = [self.plan.values[v].name for v in self.plan.inputs]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            if not 0 <= key < len(names):
                raise RuntimeLaunchError(f"input index {key} out of range: the model has {len(names)} inputs {names}")
            return int(key)
        if key not in names:
            raise RuntimeLaunchError(f"the model has no input {key!r}; its inputs are {names}")
        return names.index(key)

    def _copy_input(self, state: _ExecutionState, index: int, array: Any) -> None:
        value = self.plan.values[self.plan.inputs[index]]
        array = np.asarray(array)
        try:
            dtype = from_numpy(array.dtype)
        except Exception:
            dtype = str(array.dtype)
        if dtype != value.dtype:
            fix = f"convert it with array.astype('{value.dtype}')"
            if format_of_numpy(array.dtype) is not None:   # astype would convert the values, not keep the bits
                fix = f"{dtype} travels as its carrier: pass tensorkiln.ir.narrow_dtypes.to_carrier(array)"
            raise RuntimeLaunchError(f"input {value.name!r} has dtype {dtype}, expected {value.dtype}; {fix}")
        if tuple(array.shape) != value.shape:
            raise RuntimeLaunchError(f"input {value.name!r} has shape {tuple(array.shape)}, expected {value.shape}")
        np.copyto(state.host_values[value.id], array)
        state.inputs_set[index] = True

    def _by_index(self, inputs: Mapping[str, Any] | Sequence[Any]) -> dict[int, Any]:
        """{input index: array} for a call, checking that it names every input exactly once."""
        count = len(self.plan.inputs)
        if type(inputs) is list and len(inputs) == count:   # lib(x): the common call, checked in one step
            return dict(enumerate(inputs))
        if type(inputs) is dict and len(inputs) == count and inputs.keys() == self._input_positions.keys():
            positions = self._input_positions
            return {positions[name]: array for name, array in inputs.items()}
        names = [self.plan.values[v].name for v in self.plan.inputs]
        if isinstance(inputs, Mapping):
            arrays = {self._input_index(name): array for name, array in inputs.items()}
        else:
            if len(inputs) != len(names):
                raise RuntimeLaunchError(f"the model takes {len(names)} inputs, got {len(inputs)} (its inputs are {names})")
            arrays = dict(enumerate(inputs))
        missing = [name for index, name in enumerate(names) if index not in arrays]
        if missing:
            raise RuntimeLaunchError(
                f"inputs {missing} were not given; every call passes all of the model's inputs {names} "
                f"(nothing is kept from an earlier call), e.g. lib.run({{{', '.join(f'{n!r}: ...' for n in names)}}})")
        return arrays

    # -- running ------------------------------------------------------------------------

    @property
    def executor_kind(self) -> str:
        """How runs execute: the native entry, or the Python executor and why."""
        if self.native_entry is not None and self.use_native:
            python = sum(1 for s in self._segments if not s.native)
            calls = len(self._segments) - python
            if python:
                why = "; ".join(f"{name}: {reason}" for name, reason in self._python_control.items())
                return (f"native entry ({calls} native call{'s' if calls != 1 else ''} per run, with control-flow "
                        f"steps in Python between them: {why})")
            if calls > 1:
                return f"native entry ({calls} native calls per run: gather indices are checked between them)"
            return native_entry.NATIVE_EXECUTOR
        return f"{native_entry.PYTHON_EXECUTOR}: {self.native_reason or 'use_native is False'}"

    def _run_state(self, state: _ExecutionState, native: bool | None = None,
                   input_addresses: Sequence[int] | None = None) -> None:
        """Run every step on `state`: one call of the native entry when there is one (and `native`
        is not False), else step by step. Levels of the plan's `concurrent_levels` run on a thread
        pool (the memory plan keeps their storages apart) unless `self.concurrent` is False.
        `input_addresses`: the native entry reads the inputs there instead of from the state."""
        if state.native is not None and (self.use_native if native is None else native):
            overlap = self.overlap_width() if self.concurrent and self.plan.concurrent_levels else 1
            for segment in self._segments:
                if not segment.native:   # control-flow steps, between native calls
                    self._run_levels(state, self._levels[segment.begin:segment.end], overlap, None)
                    continue
                for index in segment.checks:
                    state.check_indices(self.plan.steps[index])
                state.native.run(input_addresses, overlap, segment.begin, segment.end)
            self.last_step_times = []
            return
        times = [0.0] * len(self.plan.steps)
        overlap = self.overlap_width() if self.concurrent else 1
        self._run_levels(state, self.plan.concurrent_levels or self._levels, overlap, times)
        self.last_step_times = times

    def _run_levels(self, state: _ExecutionState, levels, overlap: int, times: list[float] | None) -> None:
        """Run `levels` step by step from Python (on the thread pool when `overlap` > 1), recording
        each step's seconds in `times` when given."""
        def launch(index: int) -> None:
            start = time.perf_counter()
            state.calls[index]()
            if times is not None:
                times[index] = time.perf_counter() - start

        if overlap <= 1 or not self.plan.concurrent_levels:
            levels = tuple((index,) for level in levels for index in level)
        for level in levels:
            for index in level:  # mirrors are filled here, in this thread, before any step of the level starts
                state.check_indices(self.plan.steps[index])
                state.refresh_mirrors(self.plan.steps[index])
            if len(level) == 1:
                launch(level[0])
                continue
            futures = [self._steps_pool().submit(launch, index) for index in level]
            for future in futures:
                future.result()  # re-raises the first kernel error after the level finished

    def overlap_width(self) -> int:
        """How many kernels of a concurrent level may run at once: the cores each kernel's own
        parallel loops leave free (its module's thread setting; 0 = all cores). Overlapping pays
        only there: measured on 2 cores, squeezenet ran 14% faster with overlapped levels at 1 thread
        per kernel and 14% slower at 2, where two kernels on all cores oversubscribe them.

        `tk.runtime.set_num_threads(n)` is the whole run's budget: kernels of a level overlap only
        while their threads together stay within n, so n = 1 runs on one core, as a user (and a
        comparison with onnxruntime at one intra-op and one inter-op thread) expects. Overlap on
        more cores than one kernel uses comes from a module's `-num_threads` target option."""
        from ..sdk.native import get_num_threads

        cores = _cpu_count()
        budget = get_num_threads()
        if budget:
            cores = min(cores, budget)
        per_kernel = 1
        for module in self._thread_settings:
            count = module.get_num_threads()
            if count is not None:
                per_kernel = max(per_kernel, count if count > 0 else cores)
        return max(1, cores // per_kernel)

    def _steps_pool(self):
        with self._setup_lock:
            if self._step_pool is None:
                from concurrent.futures import ThreadPoolExecutor
                width = max(len(level) for level in self.plan.concurrent_levels)
                self._step_pool = ThreadPoolExecutor(max_workers=min(width, _cpu_count()),
                                                     thread_name_prefix="tensorkiln-step")
            return self._step_pool

    def run_with(self, inputs: Mapping[str, Any] | Sequence[Any], native: bool | None = None) -> list[np.ndarray]:
        """Run once on `inputs` (every input, by name or in order) and return copies of the outputs.

        Safe to call from many threads at once: each call runs on an execution state of its own.
        `native=False` runs step by step in Python even where the plan has a native entry.
        """
        arrays = self._by_index(inputs)
        state = self._acquire_state()
        try:
            addresses = None
            if state.native is not None and (self.use_native if native is None else native) \
                    and self._inputs_in_place:
                addresses = self._native_inputs(state, arrays)
            else:
                for index, array in arrays.items():
                    self._copy_input(state, index, array)
            self._run_state(state, native, addresses)
            return [state.value(v) for v in self.plan.outputs]
        finally:
            self._release_state(state)

    def _native_inputs(self, state: _ExecutionState, arrays: dict[int, Any]) -> list[int] | None:
        """Where the native entry reads the inputs: None for the state's buffers (every input copied
        there), else an address per input, the caller's own array for large ones that fit."""
        addresses = None
        for index, array in arrays.items():
            dtype, shape = self._input_layouts[index]
            buffer = state.host_values[self.plan.inputs[index]]
            if type(array) is np.ndarray and array.dtype == dtype and array.shape == shape:
                address = native_entry.place_input(array, buffer)
            else:
                self._copy_input(state, index, array)   # converts, or raises naming the input
                address = None
            if address is not None:
                if addresses is None:
                    addresses = list(state.native.state_inputs[:len(self.plan.inputs)])
                addresses[index] = address
        return addresses

    # -- the stateful API (one state, one thread at a time) -----------------------------

    def set_input(self, key: int | str, array: Any) -> None:
        """Copy `array` into input `key` (name or position) of the stateful API's state."""
        index = self._input_index(key)
        with self._stateful_lock:
            self._copy_input(self._stateful(), index, array)

    def run(self, **inputs: Any) -> None:
        """Run every step on the inputs given here or earlier with set_input."""
        with self._stateful_lock:
            state = self._stateful()
            for name, array in inputs.items():
                self._copy_input(state, self._input_index(name), array)
            missing = [self.plan.values[v].name for i, v in enumerate(self.plan.inputs) if not state.inputs_set[i]]
            if missing:
                raise RuntimeLaunchError(f"inputs {missing} were not set; call set_input(name, array) first")
            self._run_state(state)

    def get_num_outputs(self) -> int:
        return len(self.plan.outputs)

    def get_output(self, index: int) -> np.ndarray:
        """A numpy copy of output `index` of the last run() (later runs do not change it)."""
        if not 0 <= index < len(self.plan.outputs):
            raise RuntimeLaunchError(f"output index {index} out of range: the model has {len(self.plan.outputs)} outputs")
        return self.value(self.plan.outputs[index])

    def value(self, value_id: int) -> np.ndarray:
        """A numpy copy of any value of the plan (input, constant, intermediate, output) in the
        stateful API's state.

        Intermediates are only meaningful right after the step that produced them:
        memory planning reuses their storage (see `run_step`).
        """
        with self._stateful_lock:
            return self._stateful().value(value_id)

    def run_step(self, index: int) -> None:
        """Run step `index` of the plan alone (debugging, bisection); inputs must be set."""
        with self._stateful_lock:
            state = self._stateful()
            state.check_indices(self.plan.steps[index])
            state.refresh_mirrors(self.plan.steps[index])
            state.calls[index]()

    def outputs(self) -> list[np.ndarray]:
        return [self.get_output(i) for i in range(self.get_num_outputs())]
