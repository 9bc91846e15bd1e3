"""CompiledModel: what `tk.compile` returns — kernels, plan, weights — ready to run or export.

    lib = tk.compile(mod, target="cpu_llvm")
    out = lib(x)                      # or lib.run({"input": x}) -> list of arrays
    lib.set_input("input", x); lib.run(); lib.get_output(0)
    lib.summary()                     # what the compiler did
    lib.export("model.tkpkg"); tk.runtime.load("model.tkpkg")

`lib(x)` and `lib.run({...})` are safe to call from many threads at once (each call runs
on an execution state of its own) and each call passes every input. The stateful API
(`set_input`, `run()`, `get_output`) keeps one state between calls: use it from one
thread at a time.
"""
from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from ..ir.errors import RuntimeLaunchError, TargetError, TensorkilnError
from ..sdk.codegen import Artifact
from ..sdk.target import Target
from .executor import GraphExecutor
from .plan import ExecutionPlan

__all__ = ["CompiledModel"]


class CompiledModel:
    def __init__(self, *, plan: ExecutionPlan, constants: dict[int, np.ndarray], artifacts: dict[str, Artifact],
                 target_objects: dict[str, Target], target: str, ops_before_fusion: int = 0,
                 pass_times: dict[str, float] | None = None, compile_seconds: float = 0.0, graph=None,
                 skipped_passes: dict[str, str] | None = None, strategies: dict[str, dict] | None = None,
                 host_programs: dict[str, Any] | None = None) -> None:
        self.plan = plan
        self.constants = constants
        self.artifacts = artifacts
        self.target_objects = target_objects
        self.target = target
        self.ops_before_fusion = ops_before_fusion
        self.pass_times = dict(pass_times or {})
        self.skipped_passes = dict(skipped_passes or {})
        self.compile_seconds = compile_seconds
        self.strategies = dict(strategies or {})
        self.graph = graph
        self.host_programs = dict(host_programs or {})   # plan steps run on the host: If/Loop/Scan
        self._loaded: dict[str, Any] = {}
        self._executor: GraphExecutor | None = None

    # -- loading --------------------------------------------------------------------------

    def loaded_module(self, target: "str | Target"):
        """The kernels compiled for `target`, loaded by its plugin's loader (once; later calls reuse them).

        `target` is a target this model uses, given as its full string
        ("cpu_llvm -mcpu=haswell -num_threads=0 -opt_level=3", a key of `artifacts`),
        its name or alias ("llvm"), or a `Target`:

            lib.loaded_module("plainc").get_function("fused_add_nn_relu")

        Raises TargetError listing the model's targets when it uses none such, or
        several that a bare name cannot tell apart.
        """
        key = self._target_key(target)
        if key not in self._loaded:
            resolved = self.target_objects[key]
            self._loaded[key] = resolved.spec.loader.load(self.artifacts[key], resolved)
        return self._loaded[key]

    def _target_key(self, target: "str | Target") -> str:
        text = str(target)
        if text in self.artifacts:
            return text
        used = ", ".join(repr(t) for t in sorted(self.artifacts)) or "none"
        word = text.split()[0] if text.split() else text
        named = [key for key in self.artifacts
                 if word == self.target_objects[key].name or word in self.target_objects[key].manifest.plugin.aliases]
        if " " in text.strip():  # a full string with options: compare canonical forms
            from ..sdk.plugin_manager import registry
            try:
                canonical = str(registry().target(text))
            except TensorkilnError:
                canonical = None
            named = [key for key in named if key == canonical]
        if len(named) == 1:
            return named[0]
        if len(named) > 1:
            raise TargetError(f"loaded_module({text!r}): the model uses several {word} targets ({used}); "
                              "pass the full target string")
        raise TargetError(f"loaded_module({text!r}): the model has no kernels for that target; it uses {used}")

    @property
    def executor(self) -> GraphExecutor:
        if self._executor is None:
            self._executor = GraphExecutor(self)
        return self._executor

    # -- running --------------------------------------------------------------------------

    @property
    def input_names(self) -> list[str]:
        return [self.plan.values[v].name for v in self.plan.inputs]

    def input_info(self) -> list[dict]:
        return [{"name": v.name, "shape": v.shape, "dtype": v.dtype} for v in (self.plan.values[i] for i in self.plan.inputs)]

    def output_info(self) -> list[dict]:
        return [{"shape": v.shape, "dtype": v.dtype} for v in (self.plan.values[i] for i in self.plan.outputs)]

    def set_input(self, key: int | str, array: Any) -> None:
        self.executor.set_input(key, array)

    def run(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> list[np.ndarray] | None:
        """Run once. With inputs (a dict, keywords, or arrays in input order) returns the outputs as
        numpy arrays; without, runs on the inputs given to set_input."""
        if inputs is None and not named:
            self.executor.run()
            return None
        if inputs is not None and not isinstance(inputs, Mapping):
            if named:
                raise RuntimeLaunchError("pass the inputs either by name (a dict or keywords) or in order "
                                         "(a list of arrays), not both")
            return self.executor.run_with([inputs] if isinstance(inputs, np.ndarray) else list(inputs))
        return self.executor.run_with({**(inputs or {}), **named})

    def get_output(self, index: int) -> np.ndarray:
        return self.executor.get_output(index)

    def get_num_outputs(self) -> int:
        return len(self.plan.outputs)

    def __call__(self, *arrays: Any, **named: Any):
        """lib(x) -> the output (or a list of outputs for multi-output models)."""
        outputs = self.executor.run_with(list(arrays)) if arrays else self.executor.run_with(named)
        return outputs[0] if len(outputs) == 1 else outputs

    # -- reports ----------------------------------------------------------------------------

    def placement(self) -> list[dict]:
        """Where each kernel runs, and why it fell back when it did."""
        return [{"kernel": step.kernel, "ops": list(step.ops), "target": step.target,
                 "fallback_reason": step.fallback_reason} for step in self.plan.steps]

    def summary(self) -> dict:
        intermediate = [v for v in self.plan.values
                        if v.kind in ("intermediate", "output") and v.alias_of < 0 and v.placed_in < 0]
        return {
            "target": self.target,
            "kernels": len({(s.target, s.kernel) for s in self.plan.steps}),
            "kernel_launches": len(self.plan.steps),
            # reshape-only groups elided: their outputs alias their inputs' bytes, no kernel runs
            "alias_steps": len(self.plan.aliases),
            # concatenations elided: their inputs' producers write into their output, no kernel runs
            "placed_concats": len(self.plan.placed_concats),
            "ops": self.ops_before_fusion,
            "peak_activation_bytes": sum(s.nbytes for s in self.plan.storages),
            "unplanned_activation_bytes": sum(v.nbytes for v in intermediate),
            "weight_bytes": int(sum(np.asarray(c).nbytes for c in self.constants.values())),
            "pass_times": dict(self.pass_times),
            "skipped_passes": dict(self.skipped_passes),
            "compile_seconds": self.compile_seconds,
            "placement": self.placement(),
            "strategies": dict(self.strategies),
            "estimates": self.estimates(),
            "executor": self.executor_kind(),
        }

    def executor_kind(self) -> str:
        """How a run executes: "native entry (one call per run)" when the target runs the whole plan in
        one native call, else "python executor: <why>" (control flow, several targets, ...)."""
        from .native_entry import PYTHON_EXECUTOR, static_reason
        reason = static_reason(self.plan, tuple(self.host_programs))
        if reason:
            return f"{PYTHON_EXECUTOR}: {reason}"
        try:
            return self.executor.executor_kind
        except TensorkilnError as error:   # the target cannot load here: no run would start either
            return f"{PYTHON_EXECUTOR}: the kernels do not load here ({str(error).splitlines()[0]})"

    def estimates(self) -> dict[str, dict]:
        """{kernel: estimate} for kernels whose emitter attached one to the artifact's metadata
        (`metadata["kernels"][name]["estimate"]`: e.g. an FPGA plugin's cycles and DSP/LUT/FF/BRAM)."""
        found = {}
        for artifact in self.artifacts.values():
            for name, info in (artifact.metadata.get("kernels") or {}).items():
                if isinstance(info, dict) and isinstance(info.get("estimate"), dict):
                    found[name] = dict(info["estimate"])
        return found

    def export(self, path) -> None:
        """Write one file holding kernels, plan and weights: `tk.runtime.save(self, path)`."""
        from .package import save
        save(self, path)
