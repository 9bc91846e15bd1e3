"""The compile driver: `tensorkiln.compile(model, target=...)` -> CompiledModel."""
from .driver import as_module, compile as _compile_static
from .dynamic import specializing
from .string_staging import staging_strings
from ..runtime.plan import ExecutionPlan, KernelStep, StorageInfo, ValueInfo

# ONNX models with symbolic dimensions or run-time parameters compile per shape (compiler/dynamic.py).
# ONNX models with strings run their string nodes on the host around the compiled rest (string_staging.py).
compile = staging_strings(specializing(_compile_static))

__all__ = ["compile", "as_module", "ExecutionPlan", "KernelStep", "StorageInfo", "ValueInfo"]
