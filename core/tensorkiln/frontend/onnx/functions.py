"""Expand ONNX function ops into the nodes of their function body.

An op without a converter may still import: when its schema defines it as a
function (Swish, RMSNormalization, Attention, ...) or the model carries a local
function of that name, the importer converts the body's nodes instead, as
onnxruntime does. `function_for` finds the body (a context-dependent one is built
from the node and its input types), `inline` renames its values into the
caller's scope and binds the attributes it references.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from ...graph.types import TensorType

__all__ = ["FunctionBody", "function_for", "function_key", "has_function", "inline", "static_body"]

_DEFAULT_DOMAINS = ("", "ai.onnx")


@dataclass(frozen=True)
class FunctionBody:
    """A function ready to inline: the FunctionProto and the opsets its nodes use, by domain."""

    proto: Any  # onnx.FunctionProto
    opsets: dict[str, int]


def function_key(domain: str, op_type: str) -> tuple[str, str]:
    return ("" if domain in _DEFAULT_DOMAINS else domain, op_type)


def has_function(node, opsets: Mapping[str, int], local_functions: Mapping[tuple[str, str], Any]) -> bool:
    """Whether `node` can be expanded: a model-local function or a schema with a function body."""
    if function_key(node.domain, node.op_type) in local_functions:
        return True
    schema = _schema(node, opsets)
    return schema is not None and (schema.has_function or schema.has_context_dependent_function)


def static_body(node, opsets: Mapping[str, int],
                local_functions: Mapping[tuple[str, str], Any]) -> FunctionBody | None:
    """The body of `node` when it does not depend on input types (local functions and plain
    schema functions); None for context-dependent ones or when there is no function."""
    local = local_functions.get(function_key(node.domain, node.op_type))
    if local is not None:
        return FunctionBody(local, _body_opsets(local, opsets))
    schema = _schema(node, opsets)
    if schema is None or not schema.has_function:
        return None
    return _schema_body(schema, _opset_for(node.domain, opsets), None, None, opsets)


def function_for(node, opsets: Mapping[str, int], local_functions: Mapping[tuple[str, str], Any],
                 input_types: Sequence[Any]) -> FunctionBody | None:
    """The body to inline for `node` (an onnx.NodeProto) given the graph types of its inputs
    (TensorType, or None for an absent input); None when the op is not a function."""
    body = static_body(node, opsets, local_functions)
    if body is not None:
        return body
    schema = _schema(node, opsets)
    if schema is None or not schema.has_context_dependent_function:
        return None
    return _schema_body(schema, _opset_for(node.domain, opsets), node, input_types, opsets)


def inline(node, body: FunctionBody, prefix: str) -> list[Any]:
    """The body's nodes with formal inputs/outputs renamed to the node's actual values,
    intermediates to `prefix` + name, and `ref_attr_name` attributes bound to the node's."""
    import onnx
    function = body.proto
    rename: dict[str, str] = {"": ""}
    for index, formal in enumerate(function.input):
        rename[formal] = node.input[index] if index < len(node.input) else ""
    for index, formal in enumerate(function.output):
        actual = node.output[index] if index < len(node.output) else ""
        rename[formal] = actual or prefix + formal
    caller_attrs = {a.name: a for a in node.attribute}
    defaults = {a.name: a for a in function.attribute_proto}
    nodes = []
    for index, inner in enumerate(function.node):
        copy = onnx.NodeProto()
        copy.CopyFrom(inner)
        copy.name = f"{prefix}{inner.name or f'{inner.op_type}_{index}'}"
        copy.input[:] = [_renamed(name, rename, prefix) for name in inner.input]
        copy.output[:] = [_renamed(name, rename, prefix) for name in inner.output]
        del copy.attribute[:]
        for attribute in inner.attribute:
            bound = _bind_attribute(attribute, caller_attrs, defaults)
            if bound is not None:
                copy.attribute.append(_renamed_subgraphs(bound, rename, prefix))
        nodes.append(copy)
    return nodes


def _renamed_subgraphs(attribute, rename: dict[str, str], prefix: str):
    """`attribute`, with the names an If/Loop/Scan subgraph reads from the function body renamed
    like the body's own (the subgraph's local names stay)."""
    import onnx
    if attribute.type not in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
        return attribute
    copy = onnx.AttributeProto()
    copy.CopyFrom(attribute)
    for graph in ([copy.g] if attribute.type == onnx.AttributeProto.GRAPH else list(copy.graphs)):
        _rename_free_names(graph, rename, prefix, set())
    return copy


def _rename_free_names(graph, rename: dict[str, str], prefix: str, local: set[str]) -> None:
    import onnx
    local = local | {v.name for v in graph.input} | {t.name for t in graph.initializer} | {
        name for node in graph.node for name in node.output}
    for node in graph.node:
        node.input[:] = [name if not name or name in local else _renamed(name, rename, prefix) for name in node.input]
        for attribute in node.attribute:
            inner = [attribute.g] if attribute.type == onnx.AttributeProto.GRAPH else \
                list(attribute.graphs) if attribute.type == onnx.AttributeProto.GRAPHS else []
            for subgraph in inner:
                _rename_free_names(subgraph, rename, prefix, local)
    for output in graph.output:
        if output.name not in local:
            output.name = _renamed(output.name, rename, prefix)


def _renamed(name: str, rename: dict[str, str], prefix: str) -> str:
    if name not in rename:
        rename[name] = prefix + name
    return rename[name]


def _bind_attribute(attribute, caller_attrs, defaults):
    """`attribute` itself, or for a reference (`ref_attr_name`) the caller's value or the
    function's default under the attribute's own name; None when neither is given."""
    import onnx
    if not attribute.ref_attr_name:
        return attribute
    source = caller_attrs.get(attribute.ref_attr_name) or defaults.get(attribute.ref_attr_name)
    if source is None:
        return None
    bound = onnx.AttributeProto()
    bound.CopyFrom(source)
    bound.name = attribute.name
    return bound


def _opset_for(domain: str, opsets: Mapping[str, int]) -> int:
    return opsets.get("" if domain in _DEFAULT_DOMAINS else domain, 1)


def _schema(node, opsets: Mapping[str, int]):
    import onnx.defs
    domain = "" if node.domain in _DEFAULT_DOMAINS else node.domain
    try:
        return onnx.defs.get_schema(node.op_type, _opset_for(domain, opsets), domain)
    except onnx.defs.SchemaError:
        return None


def _schema_body(schema, opset: int, node, input_types, opsets: Mapping[str, int]) -> FunctionBody:
    """The schema's function for the newest function version not newer than `opset`
    (as onnxruntime picks it); context-dependent when `node` is given."""
    import onnx
    versions = (schema.context_dependent_function_opset_versions if node is not None
                else schema.function_opset_versions)
    eligible = [v for v in versions if v <= opset]
    version = max(eligible) if eligible else None
    proto = onnx.FunctionProto()
    if node is None:
        if version is None:
            proto.CopyFrom(schema.function_body)
        else:
            proto.ParseFromString(schema.get_function_with_opset_version(version))
    else:
        types = [_type_proto(t).SerializeToString() for t in input_types]
        if version is None:
            data = schema.get_context_dependent_function(node.SerializeToString(), types)
        else:
            data = schema.get_context_dependent_function_with_opset_version(version, node.SerializeToString(),
                                                                            types)
        proto.ParseFromString(data)
    _add_schema_defaults(proto, schema)
    return FunctionBody(proto, _body_opsets(proto, opsets))


def _add_schema_defaults(proto, schema) -> None:
    """A body references attributes (`@periodic`, `@output_datatype`) whose defaults onnx keeps in the
    schema, not in the FunctionProto: copy them there, so a caller that leaves one out gets the default."""
    present = {a.name for a in proto.attribute_proto}
    for name, attribute in schema.attributes.items():
        default = attribute.default_value
        if name not in present and default.type != 0:  # 0: AttributeProto.UNDEFINED, no default
            entry = proto.attribute_proto.add()
            entry.CopyFrom(default)
            entry.name = name


def _body_opsets(function, outer: Mapping[str, int]) -> dict[str, int]:
    """The opsets the function's nodes use: its own imports, else the caller's."""
    opsets = dict(outer)
    for entry in function.opset_import:
        opsets["" if entry.domain in _DEFAULT_DOMAINS else entry.domain] = entry.version
    return opsets


def _type_proto(tensor_type: TensorType | None):
    """An onnx.TypeProto for a graph tensor type; an empty one for an absent input."""
    import onnx
    from onnx import helper

    from ...ir.dtypes import to_numpy
    proto = onnx.TypeProto()
    if tensor_type is None:
        return proto
    try:
        elem_type = helper.np_dtype_to_tensor_dtype(to_numpy(tensor_type.dtype))
    except (KeyError, TypeError, ValueError):
        elem_type = onnx.TensorProto.UNDEFINED
    proto.tensor_type.elem_type = elem_type
    for dim in tensor_type.shape:
        proto.tensor_type.shape.dim.add().dim_value = dim
    return proto
