"""Loaded modules and what runs them: `Module`, `load_module`, compiled models and their
packages, execution plans, thread settings. The runtime never imports the compiler.

    f = tk.build(...); f(a, b, c)
    tk.runtime.load_module("gemm.so")
    tk.runtime.save(lib, "model.tkpkg"); lib = tk.runtime.load("model.tkpkg")
    tk.runtime.set_num_threads(1)

Names load on first use (PEP 562), so `tensorkiln.runtime.deploy` runs a package with
numpy and the standard library alone.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "get_num_threads": "..sdk.native", "set_num_threads": "..sdk.native",
    "CompiledModel": ".compiled_model", "GraphExecutor": ".executor",
    "Module": ".module", "TimeResult": ".module", "load_module": ".module",
    "load": ".package", "save": ".package",
    "ExecutionPlan": ".plan", "KernelStep": ".plan", "StorageInfo": ".plan", "ValueInfo": ".plan",
}

__all__ = ["Module", "TimeResult", "load_module", "set_num_threads", "get_num_threads", "CompiledModel",
           "GraphExecutor", "load", "save", "ExecutionPlan", "KernelStep", "StorageInfo", "ValueInfo"]


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tensorkiln.runtime' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
