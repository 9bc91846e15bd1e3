"""Frontends: import models from other formats into graph.Module."""
from .onnx import from_onnx

__all__ = ["from_onnx"]
