"""Import an ONNX model as a graph.Module with static shapes.

    mod = from_onnx("resnet50.onnx", shape={"data": (1, 3, 224, 224)})

Initializers become Constants; Constant, Shape of static tensors, ConstantOfShape
and any node whose inputs are all constant are evaluated at import time with the
ops' numpy references, so Reshape/Expand/Slice/... get static parameters.
An op without a converter that is an ONNX function (a schema with a function body,
such as Attention or RMSNormalization, or a model-local function) is expanded into
its body's nodes, recursively (see functions.py).
"""
from __future__ import annotations

import itertools
import os
from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from ...graph.expr import Constant, Expr, Function, Module, Tuple, TupleGetItem, Var
from ...graph.types import TensorType, TupleType
from ...ir.dtypes import from_numpy
from ...ir.narrow_dtypes import to_carrier
from ...ir.errors import DTypeError, FrontendError, TensorkilnError, UnsupportedOpError
from ...ir.memory import check_tensor_fits, physical_memory_bytes
from .converters import CONVERTERS
from .converters.sequence import NoneValue, SequenceOutputError, SequenceValue
from .functions import function_for, function_key, has_function, inline, static_body
from .narrow_types import carrier_of_onnx_type, value_formats
from .node import OnnxNode
from .subgraph import SubgraphScope
from .validate import check_outputs, check_structure, check_with_onnx

__all__ = ["from_onnx", "supported_ops"]

_MIN_OPSET = 1
_MAX_FUNCTION_DEPTH = 32  # function bodies that expand into themselves stop here


@dataclass
class _Context:
    """What converting a node needs besides its inputs: the model's local functions (by
    (domain, name)) and a counter that keeps inlined names unique."""

    local_functions: dict[tuple[str, str], Any]
    memory_limit: int | None = None
    counter: Iterator[int] = field(default_factory=itertools.count)
    formats: dict[str, Any] = field(default_factory=dict)   # narrow_types.value_formats: float8, int4, ... values


def supported_ops() -> list[str]:
    """The ONNX op types (default domain) this frontend converts."""
    return sorted(CONVERTERS)


def from_onnx(model_or_path: Any, shape: Mapping[str, tuple[int, ...]] | None = None,
              dtype: str | Mapping[str, str] | None = None,
              constants: Mapping[str, Any] | None = None, memory_limit: int | None = None) -> Module:
    """Convert an ONNX ModelProto, a path or bytes into a Module whose "main" takes the graph inputs.

    `shape` binds input shapes (needed for symbolic dimensions); `dtype` overrides
    input dtypes (one dtype for all inputs, or a dict by input name); `constants`
    binds graph inputs to fixed values (e.g. an `axes` or `shape` input), which
    then are not parameters of "main".

    The model is validated (validate.py: opsets, names, onnx.checker with its full
    check, attributes), and each declared output dtype is compared with the computed
    one (unless `dtype` overrides input dtypes); an invalid model raises FrontendError. A tensor whose shape alone needs more than
    `memory_limit` bytes (default: the machine's physical memory) raises
    MemoryLimitError before anything is allocated or folded.
    """
    model, path = _load(model_or_path)
    import onnx
    check_structure(model)
    graph = model.graph
    opsets = _opsets(model)
    limit = physical_memory_bytes() if memory_limit is None else int(memory_limit)
    context = _Context({function_key(f.domain, f.name): f for f in model.functions}, limit)
    context.formats.update(value_formats(model))
    # Unsupported ops are listed together before the checker, which stops at an op onnx lacks.
    _check_supported(graph.node, opsets, context)
    deferred = check_with_onnx(model, path, shape)
    shape = dict(shape or {})
    values: dict[str, Expr] = {}
    for tensor in graph.initializer:
        check_tensor_fits(tuple(tensor.dims), _initializer_dtype(tensor), limit, f"initializer {tensor.name!r}")
        values[tensor.name] = Constant(_tensor_to_array(tensor))
    for name, value in (constants or {}).items():
        if name not in {v.name for v in graph.input}:
            raise FrontendError(f"constants= names {name!r}, which is not a graph input")
        values[name] = Constant(np.asarray(value))
    for tensor in graph.sparse_initializer:
        raise FrontendError(f"sparse initializer {tensor.values.name!r} is not supported")
    params = []
    input_names = {value.name for value in graph.input}
    for unknown in set(shape) - input_names - set(constants or {}):
        raise FrontendError(f"shape= names {unknown!r}, which is not a graph input; inputs are "
                            f"{sorted(input_names - set(values))}")
    for value_info in graph.input:
        if value_info.name in values:
            continue
        param = _input_var(value_info, shape.get(value_info.name), _input_dtype(dtype, value_info.name))
        check_tensor_fits(param.checked_type.shape, param.checked_type.dtype, limit,
                          f"graph input {value_info.name!r}")
        values[value_info.name] = param
        params.append(param)
    for onnx_node in graph.node:
        _convert_node(onnx_node, values, opsets, context, onnx)
    outputs = []
    for output in graph.output:
        if output.name not in values:
            raise FrontendError(f"graph output {output.name!r} is not produced by any node")
        if not isinstance(values[output.name], Expr):   # converters/sequence.py: import-time values only
            raise SequenceOutputError.of(graph.output, values)   # tk.compile re-imports with the elements
        outputs.append(values[output.name])
    if not outputs:
        raise FrontendError("the ONNX graph has no outputs")
    # With dtype= the user asks for other dtypes than the model declares.
    check_outputs(graph, values, check_dtypes=dtype is None)
    if deferred is not None:
        raise deferred
    body = outputs[0] if len(outputs) == 1 else Tuple(tuple(outputs))
    return Module((("main", Function(tuple(params), body)),))


def _load(model_or_path: Any):
    """The ModelProto, and the file it came from (None for a ModelProto or bytes)."""
    import onnx
    from google.protobuf.message import DecodeError
    path = None
    if isinstance(model_or_path, onnx.ModelProto):
        model = model_or_path
    else:
        try:
            if isinstance(model_or_path, (bytes, bytearray)):
                model = onnx.load_model_from_string(bytes(model_or_path))
            else:
                try:
                    path = os.fspath(model_or_path)
                except TypeError:
                    raise FrontendError(f"cannot import an object of type {type(model_or_path).__name__}; pass an "
                                        "onnx.ModelProto, the bytes of one or the path of an .onnx file") from None
                if not os.path.exists(path):
                    raise FrontendError(f"ONNX file {path!r} does not exist")
                model = onnx.load(path)
        except FrontendError:
            raise
        except (DecodeError, ValueError, OSError, RuntimeError, TypeError) as error:
            raise FrontendError(f"cannot read the ONNX model {str(model_or_path)[:200]!r}: it is malformed or "
                                f"truncated ({type(error).__name__}: {error})") from None
        except Exception as error:  # protobuf raises several private types on garbage input
            raise FrontendError(f"cannot read the ONNX model {str(model_or_path)[:200]!r}: "
                                f"{type(error).__name__}: {error}") from None
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise FrontendError("the ONNX model has no graph (empty, truncated or not an ONNX file)")
    return model, path


def _opsets(model) -> dict[str, int]:
    """The model's opset version by domain; the default domain is "" (also for "ai.onnx")."""
    opsets = {entry.domain: entry.version for entry in model.opset_import if entry.domain not in ("", "ai.onnx")}
    opsets[""] = _default_opset(model)
    return opsets


def _default_opset(model) -> int:
    for entry in model.opset_import:
        if entry.domain in ("", "ai.onnx"):
            if entry.version < _MIN_OPSET:
                raise FrontendError(f"ONNX opset {entry.version} is older than the oldest supported "
                                    f"({_MIN_OPSET}); upgrade it with onnx.version_converter")
            return entry.version
    if not model.opset_import:
        raise FrontendError("the ONNX model declares no opset_import")
    return _MIN_OPSET


def _initializer_dtype(tensor) -> str:
    """The dtype used to size an initializer before reading it (uint8 for types tensorkiln lacks: any
    1-byte lower bound will do, reading it reports the real problem)."""
    from onnx import helper
    try:
        return str(from_numpy(helper.tensor_dtype_to_np_dtype(tensor.data_type)))
    except Exception:
        return "uint8"


def _tensor_to_array(tensor) -> np.ndarray:
    from onnx import numpy_helper
    try:
        array = to_carrier(numpy_helper.to_array(tensor))   # float8, int4, ...: as their carrier
    except Exception as error:
        raise FrontendError(f"initializer {tensor.name!r} cannot be read: {error}") from None
    try:
        from_numpy(array.dtype)
    except DTypeError:
        raise DTypeError(f"tensor {tensor.name!r} has dtype {array.dtype}, which tensorkiln does not support") from None
    return array


def _input_dtype(dtype: str | Mapping[str, str] | None, name: str) -> str | None:
    if dtype is None:
        return None
    if isinstance(dtype, str):
        return dtype
    return dtype.get(name)


def _input_var(value_info, bound_shape, dtype_override: str | None) -> Var:
    from onnx import helper
    type_proto = value_info.type
    if type_proto.HasField("optional_type") and type_proto.optional_type.elem_type.HasField("tensor_type"):
        type_proto = type_proto.optional_type.elem_type   # an optional tensor input is given a tensor at run time
    if not type_proto.HasField("tensor_type"):
        raise UnsupportedOpError(f"graph input {value_info.name!r} is not a tensor (sequences, maps and optionals "
                                 "are not supported)")
    tensor_type = type_proto.tensor_type
    if dtype_override is not None:
        dtype = dtype_override
    elif carrier_of_onnx_type(tensor_type.elem_type) is not None:   # float8, int4, ...: narrow_types.py
        dtype = carrier_of_onnx_type(tensor_type.elem_type)
    else:
        try:
            dtype = from_numpy(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type))
        except (DTypeError, KeyError, TypeError, ValueError):
            raise DTypeError(f"graph input {value_info.name!r} has ONNX element type {tensor_type.elem_type}, "
                             "which tensorkiln does not support") from None
    if bound_shape is not None:
        return Var(value_info.name, TensorType(tuple(int(d) for d in bound_shape), dtype))
    if not tensor_type.HasField("shape"):
        raise FrontendError(f"graph input {value_info.name!r} has no shape; bind it with "
                            f"from_onnx(..., shape={{{value_info.name!r}: (...)}})")
    dims = []
    for index, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(dim.dim_value)
        else:
            label = dim.dim_param or "?"
            raise FrontendError(
                f"graph input {value_info.name!r} has symbolic dimension {index} ({label!r}); bind its shape "
                f"with from_onnx(..., shape={{{value_info.name!r}: (...)}})")
    return Var(value_info.name, TensorType(tuple(dims), dtype))


def _op_key(node) -> str:
    return node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}::{node.op_type}"


def _check_supported(nodes, opsets: dict[str, int], context: _Context, where: str = "") -> None:
    """Raise one UnsupportedOpError listing every op type in `nodes` that neither has a
    converter nor expands (through function bodies known without input types) into
    supported ops. Context-dependent bodies are checked when they are built."""
    missing: dict[str, list[str]] = {}
    for node, label in _unsupported_nodes(nodes, opsets, context, 0):
        missing.setdefault(_op_key(node), []).append(label)
    if missing:
        listing = "; ".join(f"{op} (nodes: {', '.join(names[:5])}{', ...' if len(names) > 5 else ''})"
                            for op, names in sorted(missing.items()))
        raise UnsupportedOpError(f"the ONNX model uses {len(missing)} unsupported op type(s){where}: {listing}")


def _unsupported_nodes(nodes, opsets: dict[str, int], context: _Context, depth: int):
    for node in nodes:
        label = node.name or f"<unnamed {node.op_type}>"
        if _op_key(node) in CONVERTERS:
            continue
        if depth >= _MAX_FUNCTION_DEPTH or not has_function(node, opsets, context.local_functions):
            yield node, label
            continue
        body = static_body(node, opsets, context.local_functions)
        if body is not None:
            for inner, inner_label in _unsupported_nodes(body.proto.node, body.opsets, context, depth + 1):
                yield inner, f"{label}/{inner_label}"


def _attributes(node, onnx) -> dict[str, Any]:
    attrs = {}
    for attribute in node.attribute:
        if attribute.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            # the GraphProto itself: the converter converts it in a scope of its own (subgraph.py)
            attrs[attribute.name] = attribute.g if attribute.type == onnx.AttributeProto.GRAPH else list(attribute.graphs)
            continue
        try:
            value = onnx.helper.get_attribute_value(attribute)
            if isinstance(value, bytes):
                value = value.decode("utf-8")
            elif isinstance(value, list) and value and isinstance(value[0], bytes):
                value = [v.decode("utf-8") for v in value]
        except (UnicodeDecodeError, ValueError, TypeError) as error:
            raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}): attribute {attribute.name!r} cannot "
                                f"be read: {error}") from None
        if isinstance(value, onnx.TensorProto):
            value = _tensor_to_array(value)
        attrs[attribute.name] = value
    return attrs


def _convert_node(onnx_node, values: dict[str, Expr], opsets: dict[str, int], context: _Context, onnx,
                  depth: int = 0) -> None:
    inputs: list[Expr | None] = []
    for name in onnx_node.input:
        if not name:
            inputs.append(None)
        elif name in values:
            inputs.append(values[name])
        else:
            raise FrontendError(f"ONNX node {onnx_node.name!r} ({onnx_node.op_type}) reads {name!r}, which no "
                                "node, initializer or graph input produces (the graph is malformed or not "
                                "topologically sorted)")
    if _op_key(onnx_node) not in CONVERTERS:
        _expand_function(onnx_node, inputs, values, opsets, context, onnx, depth)
        return
    opset = opsets[""]
    node = OnnxNode(onnx_node.op_type, onnx_node.name, inputs, _attributes(onnx_node, onnx), opset,
                    len(onnx_node.output), list(onnx_node.output), context.memory_limit,
                    SubgraphScope(values, opsets, context, depth),
                    input_formats=[context.formats.get(name) for name in onnx_node.input])
    try:
        result = CONVERTERS[_op_key(onnx_node)](node)
    except TensorkilnError:
        raise
    except Exception as error:
        raise FrontendError(f"ONNX node {onnx_node.name!r} ({onnx_node.op_type}) could not be converted: "
                            f"{type(error).__name__}: {error}") from error
    if isinstance(result, Expr) and isinstance(result.checked_type, TupleType):
        result = tuple(_item(result, i) for i in range(len(result.checked_type.fields)))
    if isinstance(result, (Expr, SequenceValue, NoneValue)):   # one value (Identity passes a sequence on)
        result = (result,)
    for index, name in enumerate(onnx_node.output):
        if not name:
            continue
        if index >= len(result) or result[index] is None:
            raise node.unsupported(f"output {index} ({name!r}) is not supported")
        values[name] = result[index]


def _expand_function(onnx_node, inputs: list[Expr | None], values: dict[str, Expr], opsets: dict[str, int],
                     context: _Context, onnx, depth: int) -> None:
    """Convert a function op by inlining its body's nodes (each converted, or expanded in turn)."""
    label = f"ONNX node {onnx_node.name or '<unnamed>'!r} ({_op_key(onnx_node)})"
    input_types = [None if value is None else value.checked_type for value in inputs]
    body = None
    if depth < _MAX_FUNCTION_DEPTH and all(t is None or isinstance(t, TensorType) for t in input_types):
        try:
            body = function_for(onnx_node, opsets, context.local_functions, input_types)
        except TensorkilnError:
            raise
        except Exception as error:  # onnx raises plain exceptions for attributes its builder rejects
            raise UnsupportedOpError(f"{label}: onnx could not build its function body: "
                                     f"{type(error).__name__}: {_first_line(error)}") from None
    if depth >= _MAX_FUNCTION_DEPTH:
        raise UnsupportedOpError(f"{label}: function bodies nest deeper than {_MAX_FUNCTION_DEPTH} levels "
                                 "(a function that expands into itself?)")
    if body is None:
        raise UnsupportedOpError(f"{label} has no converter and no function body to expand")
    prefix = f"{onnx_node.name or onnx_node.op_type}/{next(context.counter)}/"
    nodes = inline(onnx_node, body, prefix)
    _check_supported(nodes, body.opsets, context, f" (in the function body of {label})")
    for inner in nodes:
        _convert_node(inner, values, body.opsets, context, onnx, depth + 1)
    for index, name in enumerate(onnx_node.output):
        if name and name not in values:
            raise UnsupportedOpError(f"{label}: its function body does not compute output {index} ({name!r})")


def _first_line(error: BaseException) -> str:
    return str(error).strip().splitlines()[0][:300] if str(error).strip() else ""


def _item(value: Expr, index: int) -> Expr:
    if isinstance(value, Tuple):
        return value.fields[index]
    item = TupleGetItem(value, index)
    return item
