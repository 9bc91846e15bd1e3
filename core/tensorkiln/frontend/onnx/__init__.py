"""ONNX frontend: `from_onnx(model_or_path, shape={...}) -> graph.Module`."""
from .importer import from_onnx, supported_ops

__all__ = ["from_onnx", "supported_ops"]
