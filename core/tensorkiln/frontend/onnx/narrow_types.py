"""narrow_types.py: which ONNX values hold a narrow storage format (float8, float4, int4, int2), and their carriers.

The importer gives each converter the format of its inputs (`OnnxNode.input_format`), read from the
types the model declares and, when the model uses a narrow format at all, from onnx's shape
inference (which types the values between nodes: a Reshape of a float8 input is float8 too).
"""
from __future__ import annotations

from typing import Any

from ...ir.narrow_dtypes import NarrowFormat, format_of_onnx_type

__all__ = ["carrier_of_onnx_type", "value_formats", "boundary_formats"]

_TYPE_ATTRIBUTES = ("to", "output_dtype")


def carrier_of_onnx_type(elem_type: int) -> str | None:
    """The carrier dtype of a narrow ONNX element type ("uint8" for FLOAT8E4M3FN), None for another type."""
    found = format_of_onnx_type(elem_type)
    return None if found is None else found.carrier


def _tensor_format(type_proto) -> NarrowFormat | None:
    if type_proto is None or not type_proto.HasField("tensor_type"):
        return None
    return format_of_onnx_type(type_proto.tensor_type.elem_type)


def _declared(graph) -> dict[str, NarrowFormat]:
    formats = {}
    for value in (*graph.input, *graph.output, *graph.value_info):
        found = _tensor_format(value.type)
        if found is not None:
            formats[value.name] = found
    for tensor in graph.initializer:
        found = format_of_onnx_type(tensor.data_type)
        if found is not None:
            formats[tensor.name] = found
    return formats


def _mentions_narrow(graph) -> bool:
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.name in _TYPE_ATTRIBUTES and format_of_onnx_type(attribute.i) is not None:
                return True
            if attribute.name == "value" and attribute.HasField("t") and format_of_onnx_type(attribute.t.data_type):
                return True
    return False


def value_formats(model: Any) -> dict[str, NarrowFormat]:
    """{ONNX value name: its NarrowFormat} for every value of the main graph that holds one."""
    graph = model.graph
    formats = _declared(graph)
    if not formats and not _mentions_narrow(graph):
        return formats
    import onnx
    try:
        inferred = onnx.shape_inference.infer_shapes(model)
    except Exception:   # the checker reports a broken model; declared types are what we have then
        return formats
    return {**_declared(inferred.graph), **formats}


def boundary_formats(model: Any) -> tuple[dict[str, str], dict[int, str]]:
    """({graph input name: format name}, {graph output index: format name}) of a model's narrow inputs and
    outputs: what a caller converts with ir.narrow_dtypes.to_carrier / from_carrier."""
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    inputs = {v.name: f.name for v in graph.input if v.name not in initializers
              for f in (_tensor_format(v.type),) if f is not None}
    outputs = {i: f.name for i, v in enumerate(graph.output) for f in (_tensor_format(v.type),) if f is not None}
    return inputs, outputs
