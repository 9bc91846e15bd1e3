"""Error types shared by every layer of tensorkiln.

Two kinds, two roots: the user's fault raises a `TensorkilnError` subclass with a
message that names what was wrong and how to fix it; a bug in tensorkiln raises
`InternalError`.
"""
from __future__ import annotations

__all__ = [
    "TensorkilnError", "ShapeError", "DTypeError", "UnsupportedOpError", "ScheduleError",
    "PluginError", "TargetError", "CompileError", "RuntimeLaunchError", "ArtifactError",
    "FrontendError", "MemoryLimitError", "InternalError",
]


class TensorkilnError(Exception):
    """Base of every error caused by user input (a model, a schedule, a plugin, an argument)."""

    def __init__(self, message: str, *, node: object | None = None) -> None:
        self.node = node
        if node is not None:
            message = f"{message}\n  in {node}"
        super().__init__(message)


class ShapeError(TensorkilnError, ValueError):
    """Shapes do not fit together (op, node and both shapes are named)."""


class DTypeError(TensorkilnError, TypeError):
    """A dtype is unknown or does not fit the op."""


class UnsupportedOpError(TensorkilnError):
    """An op (or op configuration) is not supported by the frontend or the target."""


class ScheduleError(TensorkilnError):
    """An illegal schedule request; names stage, axis and why."""


class PluginError(TensorkilnError):
    """A plugin failed to load or validate; names plugin, phase/field, reason and fix."""

    def __init__(self, plugin: str, phase: str, reason: str, fix: str = "") -> None:
        self.plugin, self.phase, self.reason, self.fix = plugin, phase, reason, fix
        text = f"plugin {plugin!r} ({phase}): {reason}"
        if fix:
            text = f"{text}; fix: {fix}"
        super().__init__(text)


class TargetError(TensorkilnError, ValueError):
    """A target string is unknown or its options are invalid."""


class CompileError(TensorkilnError):
    """A target's compiler (LLVM, OpenCL build, nvcc, ...) rejected generated code."""


class RuntimeLaunchError(TensorkilnError, ValueError):
    """A compiled function was called with wrong arguments (count, shape, dtype, layout)."""


class ArtifactError(TensorkilnError):
    """A saved artifact is corrupt, incompatible or unreadable."""


class FrontendError(TensorkilnError):
    """A model file is malformed or cannot be imported."""


class MemoryLimitError(TensorkilnError):
    """A tensor, or the memory a compiled model plans, exceeds the memory limit (names the tensor and the limit)."""


class InternalError(Exception):
    """A bug in tensorkiln; please report it with the IR printed below."""
