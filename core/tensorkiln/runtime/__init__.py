"""Loaded modules and what runs them: `Module`, `load_module`, thread settings.

    f = tk.build(...); f(a, b, c)
    tk.runtime.load_module("gemm.so")
    tk.runtime.set_num_threads(1)
"""
from ..sdk.native import get_num_threads, set_num_threads
from .compiled_model import CompiledModel
from .executor import GraphExecutor
from .module import Module, TimeResult, load_module
from .package import load

__all__ = ["Module", "TimeResult", "load_module", "set_num_threads", "get_num_threads", "CompiledModel",
           "GraphExecutor", "load"]
