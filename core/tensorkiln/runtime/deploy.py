"""runtime/deploy.py: run an exported model package with numpy and the standard library alone.

On a machine that only serves a model, installing llvmlite, onnx, pydantic, pluggy or the
target plugin is a cost and an attack surface. Packages carry, for each target whose
kernels can be linked into a shared library (cpu_llvm), `kernels/<n>/module.so`; this
module loads those with ctypes and runs the plan with the same GraphExecutor as
`tk.compile`'s models:

    from tensorkiln.runtime import deploy
    model = deploy.load("model.tkpkg", key=secret)    # the checks of runtime.package, then dlopen
    probabilities = model(x)                           # or model.run({"input": x})

It verifies what `tk.runtime.load` verifies (sizes before decompressing, the content hash,
the optional signature, ELF format and architecture of each library before dlopen) except
the plugin's version and manifest hash: no plugin is installed here, so it checks the
core's format version and that every target of the package has a linked library.
Imports: numpy, ctypes, zipfile, json, hashlib, hmac — never the compiler, te, tir,
pydantic, pluggy, llvmlite or onnx (tests/runtime/test_deploy.py runs it with those blocked).
"""
from __future__ import annotations

import ctypes
import hashlib
import hmac
import io
import os
from typing import Any, Mapping

import numpy as np

from .. import __version__
from ..ir.errors import ArtifactError
from ..sdk.binary_check import check_elf
from ..sdk.codegen import RuntimeLoader
from ..sdk.native import load_native_library
from . import package
from .executor import GraphExecutor
from .plan import ExecutionPlan

__all__ = ["load", "DeployedModel"]


class _HostLoader(RuntimeLoader):
    """Host memory for the executor (numpy arenas and views); kernels come from linked libraries."""

    def load(self, artifact, target):   # never called: DeployedModel loads libraries itself
        raise ArtifactError("the deploy runtime loads linked libraries only")


class _DeployedTarget:
    """What the executor reads of a target: its loader (`target.spec.loader`)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.spec = self
        self.loader = _HostLoader()


class DeployedModel:
    """A package's plan, weights and linked kernels, run by the GraphExecutor (thread-safe `__call__`/`run`)."""

    def __init__(self, plan: ExecutionPlan, constants: dict[int, np.ndarray], modules: dict[str, Any],
                 target: str, strategies: dict | None = None) -> None:
        self.plan = plan
        self.constants = constants
        self.target = target
        self.strategies = dict(strategies or {})
        self._modules = modules
        self.artifacts = {name: None for name in modules}
        self.target_objects = {name: _DeployedTarget(name) for name in modules}
        self.executor = GraphExecutor(self)

    def loaded_module(self, target: str):
        return self._modules[target]

    @property
    def input_names(self) -> list[str]:
        return [self.plan.values[v].name for v in self.plan.inputs]

    def input_info(self) -> list[dict]:
        return [{"name": v.name, "shape": v.shape, "dtype": v.dtype} for v in (self.plan.values[i] for i in self.plan.inputs)]

    def run(self, inputs: Mapping[str, Any] | None = None, **named: Any) -> list[np.ndarray]:
        return self.executor.run_with({**(inputs or {}), **named})

    def __call__(self, *arrays: Any, **named: Any):
        outputs = self.executor.run_with(list(arrays)) if arrays else self.executor.run_with(named)
        return outputs[0] if len(outputs) == 1 else outputs


def _private_library(data: bytes) -> str:
    digest = hashlib.sha256(data).hexdigest()[:16]
    path = os.path.join(package._library_folder(), f"{digest}_module.so")
    if not os.path.exists(path):
        with open(path, "wb") as handle:
            handle.write(data)
    return path


def load(path, key: bytes | None = None, max_bytes: int = package.DEFAULT_MAX_BYTES) -> DeployedModel:
    """Load a package for running only (see the module docstring)."""
    entries, record = package._read_entries(path, max_bytes)
    stored_hash = entries.pop(package.HASH_ENTRY)
    signature = entries.pop(package.SIGNATURE_ENTRY, None)
    if package._content_hash(entries) != stored_hash.decode(errors="replace"):
        raise ArtifactError(f"{path}: content hash mismatch: the file is corrupted or was modified; export it again")
    if key is not None and (signature is None or not hmac.compare_digest(
            signature.decode(errors="replace"), package._signature(key, stored_hash))):
        raise ArtifactError(f"{path}: no valid signature for this key; refusing to load it")
    saved = str(record.get("core_version", "?"))
    if saved.split(".")[:2] != __version__.split(".")[:2]:
        raise ArtifactError(f"{path}: compiled by tensorkiln {saved}, this is tensorkiln {__version__}; "
                            "recompile the model")
    try:
        modules = {}
        for target_text, info in record["artifacts"].items():
            if not info.get("has_module"):
                raise ArtifactError(f"{path}: the kernels for {target_text} have no linked library, so only "
                                    "tk.runtime.load (with the target's plugin installed) can run them")
            data = entries[f"{info['folder']}/module.so"]
            check_elf(data, f"the linked kernels for {target_text} in {path}")
            for library in package._extract_libraries(info, entries, path):
                # an ExternImpl's library, made global first so the linked kernels resolve its symbols
                check_elf(_read_file(library), f"library {os.path.basename(library)} in {path}")
                ctypes.CDLL(library, mode=ctypes.RTLD_GLOBAL)
            modules[target_text] = load_native_library(_private_library(data))
        constants = {}
        for name, data in entries.items():
            if name.startswith("weights/"):
                constants[int(name.split("/")[1].split(".")[0])] = np.load(io.BytesIO(data), allow_pickle=False)
        plan = ExecutionPlan.from_json(record["plan"])
    except (KeyError, IndexError, TypeError, AttributeError, ValueError) as error:
        raise ArtifactError(f"{path}: the package record is malformed ({type(error).__name__}: {error})") from None
    return DeployedModel(plan, constants, modules, record["target"], record.get("strategies"))


def _read_file(path: str) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()
