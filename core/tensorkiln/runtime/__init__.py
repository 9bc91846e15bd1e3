"""Loaded modules and what runs them: `Module`, `load_module`, compiled models and their
packages, execution plans, thread settings. The runtime never imports the compiler.

    f = tk.build(...); f(a, b, c)
    tk.runtime.load_module("gemm.so")
    tk.runtime.save(lib, "model.tkpkg"); lib = tk.runtime.load("model.tkpkg")
    tk.runtime.set_num_threads(1)
"""
from ..sdk.native import get_num_threads, set_num_threads
from .compiled_model import CompiledModel
from .executor import GraphExecutor
from .module import Module, TimeResult, load_module
from .package import load, save
from .plan import ExecutionPlan, KernelStep, StorageInfo, ValueInfo

__all__ = ["Module", "TimeResult", "load_module", "set_num_threads", "get_num_threads", "CompiledModel",
           "GraphExecutor", "load", "save", "ExecutionPlan", "KernelStep", "StorageInfo", "ValueInfo"]
