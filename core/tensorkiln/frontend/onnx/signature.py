"""The input signature of an ONNX model with symbolic dimensions kept: one SymbolicTensorType per graph input.

    input_signature(model)                               # {"x": float32(batch[1..], 3, 224, 224)}
    input_signature(model, shape={"x": "?x3x224x224"})   # the user's bounds override the declaration

A dimension the model declares with a `dim_param` ("batch") becomes Dim("batch"); one with neither
value nor param becomes Dim("<input>[<axis>]"). A `shape=` entry (a tuple of ints/Dims/None/"?" or
a string for graph.types.parse_shape) replaces the declared shape; its "?" dimensions keep the model's
dim_param name, so inputs that share a symbol still share it.

A sequence input has a SymbolicSequenceType and an optional one a SymbolicOptionalType
(graph/sequence_types.py): a model taking one is specialised at run time on the value's structure.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...graph.sequence_types import SymbolicOptionalType, SymbolicSequenceType, is_structured_type
from ...graph.types import Dim, SymbolicTensorType, parse_shape
from ...ir.dtypes import from_numpy
from ...ir.errors import DTypeError, FrontendError, ShapeError, UnsupportedOpError

__all__ = ["input_signature", "output_signature", "is_static_signature", "load_model"]

_AUTO = "?auto"  # prefix of the names parse_shape gives "?" dimensions here


def load_model(model_or_path: Any):
    """The ModelProto of a ModelProto, bytes or path (FrontendError when it cannot be read)."""
    from .importer import _load  # the importer's reader, which turns every read failure into FrontendError
    return _load(model_or_path)[0]


def input_signature(model, shape: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The graph inputs (initializers left out) and their types, in graph order: a SymbolicTensorType per
    tensor, a SymbolicSequenceType or SymbolicOptionalType per sequence or optional input."""
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    shape = dict(shape or {})
    signature = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            if value.name in shape:
                raise FrontendError(f"shape= names {value.name!r}, a sequence or optional input; its elements' "
                                    "shapes are taken at run time")
            signature[value.name] = _structured_type(value.name, value.type)
            continue
        tensor_type = value.type.tensor_type
        dtype = _dtype(tensor_type, f"graph input {value.name!r}")
        declared = _declared_dims(value.name, tensor_type)
        dims = declared if value.name not in shape else _user_dims(value.name, shape[value.name], declared)
        signature[value.name] = SymbolicTensorType(dims, dtype)
    for name in shape:
        if name not in signature:
            raise FrontendError(f"shape= names {name!r}, which is not a graph input; inputs are {sorted(signature)}")
    return _tightest_bounds(signature)


def _structured_type(name: str, type_proto) -> SymbolicSequenceType | SymbolicOptionalType:
    """The type of a sequence or optional input (of tensors, or an optional sequence), specialised on at
    run time; maps, and sequences of sequences, are refused."""
    what = f"graph input {name!r}"
    if type_proto.HasField("optional_type"):
        element = type_proto.optional_type.elem_type
        if element.HasField("tensor_type"):
            return SymbolicOptionalType(_element_type(name, element.tensor_type, f"{what} (an optional)"))
        if element.HasField("sequence_type"):
            return SymbolicOptionalType(_sequence_type(name, element, what))
    elif type_proto.HasField("sequence_type"):
        return _sequence_type(name, type_proto, what)
    raise UnsupportedOpError(f"{what} has type {_type_text(type_proto)}; tensorkiln takes tensors, sequences of "
                             "tensors and optional tensors or sequences (maps and nested sequences are not "
                             "supported)")


def _sequence_type(name: str, type_proto, what: str) -> SymbolicSequenceType:
    element = type_proto.sequence_type.elem_type
    if not element.HasField("tensor_type"):
        raise UnsupportedOpError(f"{what} has type {_type_text(type_proto)}; only sequences of tensors are "
                                 "supported")
    return SymbolicSequenceType(_element_type(name, element.tensor_type, f"{what} (a sequence)"))


def _element_type(name: str, tensor_type, what: str) -> SymbolicTensorType:
    """An element's declared type; its symbols are named after the input, so they bind nothing shared."""
    dims = _declared_dims(f"{name}.element", tensor_type)
    if dims is not None:
        dims = tuple(Dim(f"{name}.element[{axis}]", 0) if isinstance(d, Dim) else d for axis, d in enumerate(dims))
    return SymbolicTensorType(dims, _dtype(tensor_type, f"{what}'s elements"))


def _type_text(type_proto) -> str:
    return " ".join(str(type_proto).split())[:200]


def _tightest_bounds(signature: dict[str, Any]) -> dict[str, Any]:
    """A symbol named in several inputs gets the intersection of the bounds given for it."""
    bounds: dict[str, Dim] = {}
    for ttype in signature.values():
        for dim in ttype.symbols:
            known = bounds.get(dim.name, dim)
            uppers = [u for u in (known.upper, dim.upper) if u is not None]
            bounds[dim.name] = Dim(dim.name, max(known.lower, dim.lower), min(uppers) if uppers else None)
    return {name: t if is_structured_type(t) else
            SymbolicTensorType(None if t.shape is None else
                               tuple(bounds[d.name] if isinstance(d, Dim) else d for d in t.shape), t.dtype)
            for name, t in signature.items()}


def output_signature(model) -> dict[str, SymbolicTensorType | None]:
    """The graph outputs' types as onnx's shape inference gives them, symbols kept ("batch" in, "batch"
    out); None for an output whose type it cannot tell or tensorkiln cannot represent."""
    import onnx
    try:
        model = onnx.shape_inference.infer_shapes(model)
    except Exception:  # the declared output types are still there to read
        pass
    outputs: dict[str, SymbolicTensorType | None] = {}
    for value in model.graph.output:
        try:
            tensor_type = value.type.tensor_type
            outputs[value.name] = SymbolicTensorType(_declared_dims(value.name, tensor_type),
                                                     _dtype(tensor_type, f"graph output {value.name!r}"))
        except (DTypeError, ShapeError):
            outputs[value.name] = None
    return outputs


def _dtype(tensor_type, what: str) -> str:
    from onnx import helper

    from .narrow_types import carrier_of_onnx_type
    if carrier_of_onnx_type(tensor_type.elem_type) is not None:   # float8, int4, ...: carried as uint8/int8
        return carrier_of_onnx_type(tensor_type.elem_type)
    try:
        return str(from_numpy(helper.tensor_dtype_to_np_dtype(tensor_type.elem_type)))
    except (DTypeError, KeyError, TypeError, ValueError):
        raise DTypeError(f"{what} has ONNX element type {tensor_type.elem_type}, which tensorkiln does not "
                         "support") from None


def is_static_signature(signature: Mapping[str, SymbolicTensorType]) -> bool:
    return all(t.is_static for t in signature.values())


def _declared_dims(name: str, tensor_type) -> tuple[int | Dim, ...] | None:
    if not tensor_type.HasField("shape"):
        return None
    dims: list[int | Dim] = []
    for axis, dim in enumerate(tensor_type.shape.dim):
        if dim.HasField("dim_value"):
            dims.append(int(dim.dim_value))
        else:
            # a model's symbol says nothing about its lower bound: an empty batch is valid
            dims.append(Dim(dim.dim_param or f"{name}[{axis}]", 0))
    return tuple(dims)


def _user_dims(name: str, given: Any, declared) -> tuple[int | Dim, ...]:
    if isinstance(given, str):
        dims = parse_shape(given, _AUTO)
    else:
        dims = tuple(_one_dim(d, axis) for axis, d in enumerate(given))
    if declared is not None and len(declared) != len(dims):
        raise ShapeError(f"shape= gives input {name!r} {len(dims)} dimensions, the model declares {len(declared)}")
    named = []
    for axis, dim in enumerate(dims):
        if isinstance(dim, Dim) and dim.name.startswith(_AUTO):
            model_dim = declared[axis] if declared is not None else None
            symbol = model_dim.name if isinstance(model_dim, Dim) else f"{name}[{axis}]"
            dim = Dim(symbol, dim.lower, dim.upper)
        named.append(dim)
    return tuple(named)


def _one_dim(value: Any, axis: int) -> int | Dim:
    if isinstance(value, Dim):
        return value
    if value is None or value == "?":
        return Dim(f"{_AUTO}{axis}")
    if isinstance(value, str):
        return parse_shape(value, _AUTO)[0]
    return int(value)
