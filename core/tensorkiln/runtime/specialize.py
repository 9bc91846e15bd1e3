"""SpecializedModel: a model compiled on first sight of each input shape (and of the values of the
inputs its static parameters are computed from), with the compiled specialisations cached.

`tk.compile` returns one when an ONNX model has symbolic dimensions (`batch`, `seq`, or bounds
given with `shape={"x": "?x3x224x224"}`) or computes a parameter the graph IR needs statically
(ReduceSum axes, Pad pads, Reshape shape, ...) from graph inputs. It runs like a CompiledModel:

    lib = tk.compile("bert.onnx", target="cpu_llvm", shape={"ids": "1x1..512"})
    lib.run({"ids": ids})        # compiles for this seq length once, then reuses it
    lib.cache_info()             # {"compiles": 1, "hits": ..., "entries": 1, ...}

The run-time key is every input's shape plus the bytes of the "value inputs" (the inputs the
parameters depend on; `value_inputs`); a new key compiles through the `build` callable the
compiler hands over (the runtime never imports the compiler), an old one reuses its module.
Shapes are checked against the declared bounds first: a bad one raises ShapeError naming the
input, the dimension and its bounds. See sdk_docs/dynamic_shapes.md for the strategy.

A sequence input (a list of arrays) or an optional one (an array or None) is specialised on its
structure the same way: its length and element shapes, or whether it is present, are part of the
key (graph/sequence_types.py), and the builder compiles a model over the value's tensors, which
`StructuredModel` runs, returning sequence outputs as lists and empty optionals as None.
"""
from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Callable, Mapping

import numpy as np

from ..graph.sequence_types import is_structured_type, structure_key
from ..graph.types import SymbolicTensorType
from ..ir.dtypes import to_numpy
from ..ir.errors import RuntimeLaunchError, TensorkilnError

__all__ = ["SpecializedModel", "Specialization", "StructuredModel"]

# build(arrays, value_inputs) -> Specialization: compile for these arrays' shapes with the values of
# `value_inputs` compiled in; the builder may find that more inputs are needed as values and says so.
Build = Callable[[dict[str, np.ndarray], tuple[str, ...]], "Specialization"]


class Specialization:
    """One compiled specialisation and the inputs whose values it was compiled for."""

    def __init__(self, compiled, value_inputs: tuple[str, ...]) -> None:
        self.compiled = compiled
        self.value_inputs = value_inputs


class SpecializedModel:
    """Compiles per (input shapes, value-input values) on first sight; reuses the result after."""

    def __init__(self, signature: Mapping[str, SymbolicTensorType], build: Build, *,
                 value_inputs: tuple[str, ...] = (), max_entries: int = 64, target: str = "",
                 output_signature: Mapping[str, SymbolicTensorType | None] | None = None) -> None:
        self.signature = dict(signature)
        self.output_signature = dict(output_signature or {})
        self.target = target
        self.max_entries = max_entries
        self._build = build
        self._value_inputs = tuple(value_inputs)
        self._cache: OrderedDict[tuple, Specialization] = OrderedDict()
        self._lock = threading.Lock()
        self._stats = {"compiles": 0, "hits": 0, "evictions": 0}
        self._inputs: dict[str, np.ndarray] = {}
        self._last_outputs: list[np.ndarray] | None = None

    # -- the interface of a CompiledModel ------------------------------------------------------

    @property
    def input_names(self) -> list[str]:
        return list(self.signature)

    @property
    def value_inputs(self) -> tuple[str, ...]:
        """The inputs whose values are compiled in (found while compiling; grows on first runs)."""
        return self._value_inputs

    def input_info(self) -> list[dict]:
        return [{"name": name, "shape": t.shape, "dtype": t.dtype} for name, t in self.signature.items()]

    def output_info(self) -> list[dict]:
        """Per output its name, and its shape and dtype with symbols ("batch") where the model's type
        inference has them (None where it cannot tell)."""
        return [{"name": name, "shape": None if t is None else t.shape, "dtype": None if t is None else t.dtype}
                for name, t in self.output_signature.items()]

    def run(self, inputs: Mapping[str, Any] | Any = None, **named: Any) -> list[np.ndarray] | None:
        """Run once on every input (a dict, keywords, or arrays in input order) and return the outputs.
        Without inputs, runs on those given to set_input (the stateful API)."""
        if inputs is None and not named:
            self._last_outputs = self._run(self._inputs)
            return None
        return self._run(self._by_name(inputs, named))

    def __call__(self, *arrays: Any, **named: Any):
        outputs = self._run(self._by_name(list(arrays), named) if arrays else self._by_name(None, named))
        return outputs[0] if len(outputs) == 1 else outputs

    def set_input(self, key: int | str, array: Any) -> None:
        names = self.input_names
        if isinstance(key, int):
            if not 0 <= key < len(names):
                raise RuntimeLaunchError(f"input index {key} out of range: the model has {len(names)} inputs {names}")
            key = names[key]
        if key not in self.signature:
            raise RuntimeLaunchError(f"the model has no input {key!r}; its inputs are {names}")
        self._inputs[key] = array if is_structured_type(self.signature[key]) else np.asarray(array)

    def get_output(self, index: int) -> np.ndarray:
        if self._last_outputs is None:
            raise RuntimeLaunchError("get_output before run(): set the inputs and call run() first")
        if not 0 <= index < len(self._last_outputs):
            raise RuntimeLaunchError(f"output index {index} out of range: the model has "
                                     f"{len(self._last_outputs)} outputs")
        return self._last_outputs[index]

    def specialize(self, inputs: Mapping[str, Any]) -> Any:
        """The CompiledModel for these inputs' shapes (and value inputs), compiled now if new: to
        warm the cache before serving, or to export one specialisation."""
        return self._specialization(self._checked(dict(inputs))).compiled

    def cache_info(self) -> dict:
        with self._lock:
            return {**self._stats, "entries": len(self._cache), "max_entries": self.max_entries,
                    "value_inputs": list(self._value_inputs)}

    def summary(self) -> dict:
        return {"target": self.target, "dynamic": True,
                "signature": {name: str(t) for name, t in self.signature.items()}, **self.cache_info()}

    def export(self, path) -> None:
        raise TensorkilnError("this model is compiled per input shape at run time and has no single package; "
                              "export one specialisation: lib.specialize({name: array, ...}).export(path)")

    # -- specialisation ------------------------------------------------------------------------

    def _by_name(self, inputs: Any, named: Mapping[str, Any]) -> dict[str, Any]:
        if inputs is not None and not isinstance(inputs, Mapping):
            if named:
                raise RuntimeLaunchError("pass the inputs either by name (a dict or keywords) or in order "
                                         "(a list of arrays), not both")
            arrays = [inputs] if isinstance(inputs, np.ndarray) else list(inputs)
            if len(arrays) != len(self.signature):
                raise RuntimeLaunchError(f"the model takes {len(self.signature)} inputs, got {len(arrays)} "
                                         f"(its inputs are {self.input_names})")
            return dict(zip(self.signature, arrays))
        return {**(inputs or {}), **named}

    def _checked(self, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        """Every input present, of its dtype, and its shape within the declared bounds."""
        unknown = sorted(set(inputs) - set(self.signature))
        if unknown:
            raise RuntimeLaunchError(f"the model has no input(s) {unknown}; its inputs are {self.input_names}")
        missing = [name for name in self.signature if name not in inputs]
        if missing:
            raise RuntimeLaunchError(f"inputs {missing} were not given; the model takes {self.input_names}")
        bindings: dict[str, int] = {}
        arrays = {}
        for name, ttype in self.signature.items():
            if is_structured_type(ttype):   # a list of arrays, or an array or None
                arrays[name] = ttype.check(inputs[name], f"input {name!r}", bindings)
                continue
            array = np.asarray(inputs[name])
            if array.dtype != to_numpy(ttype.dtype):
                raise RuntimeLaunchError(f"input {name!r} has dtype {array.dtype}, expected {ttype.dtype}; "
                                         f"convert it with .astype(np.{to_numpy(ttype.dtype).name})")
            ttype.bind(array.shape, f"input {name!r}", bindings)
            arrays[name] = array
        return arrays

    def _key(self, arrays: Mapping[str, np.ndarray], value_inputs: tuple[str, ...]) -> tuple:
        shapes = tuple(structure_key(arrays[name]) for name in self.signature)
        values = tuple(_value_bytes(arrays[name]) for name in value_inputs)
        return shapes, value_inputs, values

    def _specialization(self, arrays: dict[str, np.ndarray]) -> Specialization:
        with self._lock:
            key = self._key(arrays, self._value_inputs)
            hit = self._cache.get(key)
            if hit is not None:
                self._cache.move_to_end(key)
                self._stats["hits"] += 1
                return hit
        # Compiling outside the lock lets other shapes run meanwhile; two threads seeing the same new
        # key both compile it, and the second result replaces the first (same module either way).
        built = self._build(arrays, self._value_inputs)
        with self._lock:
            self._stats["compiles"] += 1
            if set(built.value_inputs) - set(self._value_inputs):
                self._value_inputs = tuple(n for n in self.signature if n in {*self._value_inputs, *built.value_inputs})
            self._cache[self._key(arrays, built.value_inputs)] = built
            while len(self._cache) > self.max_entries:
                self._cache.popitem(last=False)
                self._stats["evictions"] += 1
        return built

    def _run(self, inputs: Mapping[str, Any]) -> list[np.ndarray]:
        arrays = self._checked(dict(inputs))
        compiled = self._specialization(arrays).compiled
        return compiled.run({name: arrays[name] for name in compiled.input_names})


def _value_bytes(value: Any) -> Any:
    """The value of a value input as hashable bytes (per element for a sequence, None when absent)."""
    if value is None:
        return None
    if isinstance(value, list):
        return tuple(np.ascontiguousarray(item).tobytes() for item in value)
    return np.ascontiguousarray(value).tobytes()


class StructuredModel:
    """A compiled model over tensors, run with sequence and optional values: each input's tensors go
    to the flat inputs `leaves` names for it (none for None, one per element of a list), and the flat
    outputs come back rebuilt by `layout` (lists for sequences, None for empty optionals).

    The builder makes one per structure (the lengths and presence are compiled in); `compiled` is
    None when every output is an empty optional, so there is nothing to run."""

    def __init__(self, compiled, leaves: Mapping[str, tuple[str, ...]], layout) -> None:
        self.compiled = compiled
        self.leaves = dict(leaves)
        self.layout = layout

    @property
    def input_names(self) -> list[str]:
        return list(self.leaves)

    def run(self, inputs: Mapping[str, Any]) -> list[Any]:
        flat = {}
        for name, value in inputs.items():
            items = [] if value is None else list(value) if isinstance(value, list) else [value]
            flat.update(zip(self.leaves[name], items))
        outputs = [] if self.compiled is None else self.compiled.run(
            {name: flat[name] for name in self.compiled.input_names})
        return self.layout.rebuild(list(outputs)) if self.layout is not None else outputs

    def export(self, path) -> None:
        raise TensorkilnError("a model with sequence or optional inputs or outputs has no single package; its "
                              "compiled tensors-only model is lib.specialize(inputs).compiled")
