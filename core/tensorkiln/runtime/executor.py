"""GraphExecutor: runs an ExecutionPlan on the loaded kernels of one or more targets.

Memory comes from each target's runtime loader: a host target gets one arena
(a numpy buffer) with every planned value a view at its offset; a device target
gets the same through its loader's `empty`/`view`. A value read on another
target than the one that produced it is copied there before the step (inputs
and constants are copied once, at set_input / bind time).
"""
from __future__ import annotations

import os
import time
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.dtypes import from_numpy, to_numpy
from ..ir.errors import RuntimeLaunchError

__all__ = ["GraphExecutor"]


class GraphExecutor:
    """Executes a CompiledModel's plan. `set_input`, `run`, `get_output`, like TVM's."""

    def __init__(self, compiled) -> None:
        self.compiled = compiled
        self.plan = compiled.plan
        self._loaders = {t: compiled.target_objects[t].spec.loader for t in compiled.artifacts}
        self._functions = [compiled.loaded_module(step.target).get_function(step.kernel) for step in self.plan.steps]
        self._host_values: dict[int, Any] = {}   # value id -> array where the value lives
        self._value_target: dict[int, str | None] = {}
        self._arenas: dict[str, Any] = {}
        self._allocate()
        self._mirrors: dict[tuple[int, str], Any] = {}
        self._static_mirrors: set[tuple[int, str]] = set()
        self._step_args = [self._bind_step(step) for step in self.plan.steps]
        self._inputs_set = [False] * len(self.plan.inputs)
        self.last_step_times: list[float] = []

    # -- memory -------------------------------------------------------------------------

    def _allocate(self) -> None:
        plan = self.plan
        arena_size: dict[str, int] = {}
        for storage in plan.storages:
            arena_size[storage.target] = max(arena_size.get(storage.target, 0), storage.offset + storage.nbytes)
        for target, size in arena_size.items():
            self._arenas[target] = self._loaders[target].empty((max(size, 1),), "uint8")
        storages = {s.id: s for s in plan.storages}
        for value in plan.values:
            if value.kind == "input":
                self._host_values[value.id] = np.empty(value.shape, to_numpy(value.dtype))
                self._value_target[value.id] = None
            elif value.kind == "constant":
                # reshape: np.ascontiguousarray turns a 0-d array into shape (1,)
                self._host_values[value.id] = np.ascontiguousarray(self.compiled.constants[value.id]).reshape(value.shape)
                self._value_target[value.id] = None
            else:
                storage = storages[value.storage]
                loader = self._loaders[storage.target]
                self._host_values[value.id] = loader.view(self._arenas[storage.target], storage.offset,
                                                          value.shape, value.dtype)
                self._value_target[value.id] = storage.target

    def _mirror(self, value_id: int, target: str) -> Any:
        key = (value_id, target)
        if key not in self._mirrors:
            value = self.plan.values[value_id]
            self._mirrors[key] = self._loaders[target].empty(value.shape, value.dtype)
            if value.kind == "constant":
                self._loaders[target].copy_into(self._mirrors[key], self._host_values[value_id])
                self._static_mirrors.add(key)
        return self._mirrors[key]

    def _on_target(self, value_id: int, target: str) -> Any:
        source = self._value_target[value_id]
        if source == target or (source is None and self._loaders[target].uses_host_memory):
            return self._host_values[value_id]
        return self._mirror(value_id, target)

    def _bind_step(self, step) -> list:
        return [self._on_target(v, step.target) for v in (*step.inputs, *step.outputs)]

    def _refresh_mirrors(self, step) -> None:
        for value_id in step.inputs:
            key = (value_id, step.target)
            if key in self._mirrors and key not in self._static_mirrors:
                source = self._value_target[value_id]
                host = self._host_values[value_id] if source is None else self._loaders[source].to_host(self._host_values[value_id])
                self._loaders[step.target].copy_into(self._mirrors[key], host)

    # -- API ------------------------------------------------------------------------------

    def _input_index(self, key: int | str) -> int:
        names = [self.plan.values[v].name for v in self.plan.inputs]
        if isinstance(key, int):
            if not 0 <= key < len(names):
                raise RuntimeLaunchError(f"input index {key} out of range: the model has {len(names)} inputs {names}")
            return key
        if key not in names:
            raise RuntimeLaunchError(f"the model has no input {key!r}; its inputs are {names}")
        return names.index(key)

    def set_input(self, key: int | str, array: Any) -> None:
        """Copy `array` into input `key` (name or position), checking shape and dtype."""
        index = self._input_index(key)
        value = self.plan.values[self.plan.inputs[index]]
        array = np.asarray(array)
        try:
            dtype = from_numpy(array.dtype)
        except Exception:
            dtype = str(array.dtype)
        if dtype != value.dtype:
            raise RuntimeLaunchError(f"input {value.name!r} has dtype {dtype}, expected {value.dtype}; "
                                     f"convert it with array.astype('{value.dtype}')")
        if tuple(array.shape) != value.shape:
            raise RuntimeLaunchError(f"input {value.name!r} has shape {tuple(array.shape)}, expected {value.shape}")
        np.copyto(self._host_values[value.id], array)
        self._inputs_set[index] = True

    def run(self, **inputs: Any) -> None:
        """Run every step. Levels of the plan's `concurrent_levels` run on a thread pool
        (the memory plan keeps their storages apart) unless `self.concurrent` is False."""
        for name, array in inputs.items():
            self.set_input(name, array)
        missing = [self.plan.values[v].name for i, v in enumerate(self.plan.inputs) if not self._inputs_set[i]]
        if missing:
            raise RuntimeLaunchError(f"inputs {missing} were not set; call set_input(name, array) first")
        times = [0.0] * len(self.plan.steps)

        def launch(index: int) -> None:
            start = time.perf_counter()
            self._functions[index](*self._step_args[index])
            times[index] = time.perf_counter() - start

        levels = self.plan.concurrent_levels if getattr(self, "concurrent", True) else ()
        if not levels:
            levels = tuple((index,) for index in range(len(self.plan.steps)))
        for level in levels:
            for index in level:  # mirrors are filled here, in this thread, before any step of the level starts
                self._refresh_mirrors(self.plan.steps[index])
            if len(level) == 1:
                launch(level[0])
                continue
            if getattr(self, "_pool", None) is None:
                from concurrent.futures import ThreadPoolExecutor
                width = max(len(lv) for lv in self.plan.concurrent_levels)
                self._pool = ThreadPoolExecutor(max_workers=min(width, os.cpu_count() or 1),
                                                thread_name_prefix="tensorkiln-step")
            futures = [self._pool.submit(launch, index) for index in level]
            for future in futures:
                future.result()  # re-raises the first kernel error after the level finished
        self.last_step_times = times

    def get_num_outputs(self) -> int:
        return len(self.plan.outputs)

    def get_output(self, index: int) -> np.ndarray:
        """A numpy copy of output `index` (later runs do not change it)."""
        if not 0 <= index < len(self.plan.outputs):
            raise RuntimeLaunchError(f"output index {index} out of range: the model has {len(self.plan.outputs)} outputs")
        return self.value(self.plan.outputs[index])

    def value(self, value_id: int) -> np.ndarray:
        """A numpy copy of any value of the plan (input, constant, intermediate, output).

        Intermediates are only meaningful right after the step that produced them:
        memory planning reuses their storage (see `run_step`).
        """
        target = self._value_target[value_id]
        array = self._host_values[value_id]
        if target is None or self._loaders[target].uses_host_memory:
            return np.array(array, copy=True)
        return np.asarray(self._loaders[target].to_host(array))

    def run_step(self, index: int) -> None:
        """Run step `index` of the plan alone (debugging, bisection); inputs must be set."""
        self._refresh_mirrors(self.plan.steps[index])
        self._functions[index](*self._step_args[index])

    def outputs(self) -> list[np.ndarray]:
        return [self.get_output(i) for i in range(self.get_num_outputs())]

    def run_with(self, inputs: Mapping[str, Any] | Sequence[Any]) -> list[np.ndarray]:
        if isinstance(inputs, Mapping):
            for name, array in inputs.items():
                self.set_input(name, array)
        else:
            if len(inputs) != len(self.plan.inputs):
                raise RuntimeLaunchError(f"the model takes {len(self.plan.inputs)} inputs, got {len(inputs)}")
            for index, array in enumerate(inputs):
                self.set_input(index, array)
        self.run()
        return self.outputs()
