"""The compile driver: `tensorkiln.compile(model, target=...)` -> CompiledModel."""
from .driver import as_module, compile as _compile_static
from .dynamic import specializing
from ..runtime.plan import ExecutionPlan, KernelStep, StorageInfo, ValueInfo

# ONNX models with symbolic dimensions or run-time parameters compile per shape (compiler/dynamic.py).
compile = specializing(_compile_static)

__all__ = ["compile", "as_module", "ExecutionPlan", "KernelStep", "StorageInfo", "ValueInfo"]
