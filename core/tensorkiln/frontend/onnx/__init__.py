"""ONNX frontend: `from_onnx(model_or_path, shape={...}) -> graph.Module`; `input_signature(model)`
for the inputs' types with symbolic dimensions kept."""
from .importer import from_onnx, supported_ops
from .node import ValueNotStaticError
from .signature import input_signature, is_static_signature, load_model, output_signature

__all__ = ["from_onnx", "load_model", "supported_ops", "input_signature", "output_signature", "is_static_signature",
           "ValueNotStaticError"]
