"""string_staging.py: `tk.compile` of an ONNX model with strings: host string nodes around a compiled core.

See frontend/onnx/string_stages.py (the split) and runtime/staged_model.py (the run).
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

__all__ = ["staging_strings"]


def _loaded(model: Any):
    """The ModelProto of an ONNX model given as a proto, bytes or a path (external data left on disk)."""
    import onnx
    if type(model).__name__ == "ModelProto":
        return model
    try:
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_model_from_string(bytes(model))
        if isinstance(model, (str, Path)) and Path(model).is_file():
            return onnx.load(str(model), load_external_data=False)
    except Exception:   # from_onnx reports an unreadable model with its own error
        return None
    return None


def staging_strings(compile_onnx: Callable) -> Callable:
    """Wrap `tk.compile` so an ONNX model that uses strings compiles as a StagedModel."""
    @functools.wraps(compile_onnx)
    def compile(model: Any, target: Any = "cpu_llvm", **options: Any):
        from ..frontend.onnx.string_stages import has_string_values, split_string_stages
        from ..runtime.staged_model import StagedModel

        loaded = _loaded(model)
        if loaded is None or not has_string_values(loaded):
            return compile_onnx(model, target, **options)
        stages = split_string_stages(loaded)
        core = None
        if stages.core is not None:
            shape = options.pop("shape", None) or {}
            core_shape = {k: v for k, v in shape.items() if k in stages.core_inputs} or None
            core = compile_onnx(stages.core, target, shape=core_shape, **options)
        graph = loaded.graph
        initializers = {t.name for t in graph.initializer}
        return StagedModel([v.name for v in graph.input if v.name not in initializers],
                           [v.name for v in graph.output], stages.prelude, core, stages.core_inputs,
                           stages.core_outputs, stages.postlude, stages.constants)
    return compile
