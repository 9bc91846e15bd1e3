"""The compile driver: `tensorkiln.compile(model, target=...)` -> CompiledModel."""
from .driver import as_module, compile
from ..runtime.plan import ExecutionPlan, KernelStep, StorageInfo, ValueInfo

__all__ = ["compile", "as_module", "ExecutionPlan", "KernelStep", "StorageInfo", "ValueInfo"]
