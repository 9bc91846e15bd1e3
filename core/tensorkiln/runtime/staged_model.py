"""staged_model.py: a model whose string nodes run on the host around a compiled core.

`tk.compile` returns a StagedModel for an ONNX model that takes, computes or returns strings: the
nodes that touch strings run in numpy (runtime/string_ops.py) before the compiled core (the
"prelude", e.g. a LabelEncoder turning words into ids) and after it (the "postlude", e.g. ids back
to labels); everything else is compiled for the target as usual. It runs like a CompiledModel:

    lib = tk.compile("classifier_with_labels.onnx", target="cpu_llvm")
    lib.run({"words": np.array(["a", "b"], dtype=object)})
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..ir.errors import RuntimeLaunchError
from .string_ops import run_string_node

__all__ = ["HostNode", "StagedModel"]


@dataclass(frozen=True)
class HostNode:
    """One ONNX node run on the host: op type, input and output value names, attributes."""

    op_type: str
    name: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    attrs: Mapping[str, Any]

    def run(self, values: dict[str, np.ndarray]) -> None:
        results = run_string_node(self.op_type, [values[n] for n in self.inputs if n], dict(self.attrs), self.name)
        for name, result in zip(self.outputs, results):
            if name:
                values[name] = result


class StagedModel:
    """prelude host nodes -> compiled core (or none) -> postlude host nodes."""

    def __init__(self, input_names: Sequence[str], output_names: Sequence[str], prelude: Sequence[HostNode],
                 core: Any, core_inputs: Sequence[str], core_outputs: Sequence[str], postlude: Sequence[HostNode],
                 constants: Mapping[str, np.ndarray] | None = None) -> None:
        self._input_names = list(input_names)
        self.output_names = list(output_names)
        self.prelude, self.postlude = tuple(prelude), tuple(postlude)
        self.core, self.core_inputs, self.core_outputs = core, tuple(core_inputs), tuple(core_outputs)
        self.constants = dict(constants or {})

    @property
    def input_names(self) -> list[str]:
        return list(self._input_names)

    def run(self, inputs: Mapping[str, Any] | Sequence[Any] | None = None, **named: Any) -> list[np.ndarray]:
        """Run once: inputs by name (a dict or keywords) or in order; returns the outputs in graph order."""
        if inputs is not None and not isinstance(inputs, Mapping):
            inputs = dict(zip(self._input_names, [inputs] if isinstance(inputs, np.ndarray) else list(inputs)))
        given = {**(inputs or {}), **named}
        missing = [n for n in self._input_names if n not in given]
        if missing:
            raise RuntimeLaunchError(f"inputs {missing} were not given; the model's inputs are {self._input_names}")
        values: dict[str, Any] = {**self.constants, **{k: np.asarray(v) for k, v in given.items()}}
        for node in self.prelude:
            node.run(values)
        if self.core is not None:
            outputs = self.core.run({name: values[name] for name in self.core_inputs})
            values.update(zip(self.core_outputs, outputs))
        for node in self.postlude:
            node.run(values)
        return [values[name] for name in self.output_names]

    def __call__(self, *arrays: Any, **named: Any):
        outputs = self.run(list(arrays)) if arrays else self.run(named)
        return outputs[0] if len(outputs) == 1 else outputs

    def summary(self) -> dict:
        return {"host_nodes": [f"{n.op_type} {n.name!r}" for n in (*self.prelude, *self.postlude)],
                "core": None if self.core is None else self.core.summary()}
