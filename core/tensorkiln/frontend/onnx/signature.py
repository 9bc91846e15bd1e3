"""The input signature of an ONNX model with symbolic dimensions kept: one SymbolicTensorType per graph input.

    input_signature(model)                               # {"x": float32(batch[1..], 3, 224, 224)}
    input_signature(model, shape={"x": "?x3x224x224"})   # the user's bounds override the declaration

A dimension the model declares with a `dim_param` ("batch") becomes Dim("batch"); one with neither
value nor param becomes Dim("<input>[<axis>]"). A `shape=` entry (a tuple of ints/Dims/None/"?" or
a string for graph.types.parse_shape) replaces the declared shape; its "?" dimensions keep the model's
dim_param name, so inputs that share a symbol still share it.
"""
from __future__ import annotations

from typing import Any, Mapping

from ...graph.types import Dim, SymbolicTensorType, parse_shape
from ...ir.dtypes import from_numpy
from ...ir.errors import DTypeError, FrontendError, ShapeError, UnsupportedOpError

__all__ = ["input_signature", "output_signature", "is_static_signature", "load_model"]

_AUTO = "?auto"  # prefix of the names parse_shape gives "?" dimensions here


def load_model(model_or_path: Any):
    """The ModelProto of a ModelProto, bytes or path (FrontendError when it cannot be read)."""
    from .importer import _load  # the importer's reader, which turns every read failure into FrontendError
    return _load(model_or_path)[0]


def input_signature(model, shape: Mapping[str, Any] | None = None) -> dict[str, SymbolicTensorType]:
    """The graph inputs (initializers left out) and their types, in graph order."""
    graph = model.graph
    initializers = {tensor.name for tensor in graph.initializer}
    shape = dict(shape or {})
    signature = {}
    for value in graph.input:
        if value.name in initializers:
            continue
        if not value.type.HasField("tensor_type"):
            raise UnsupportedOpError(f"graph input {value.name!r} is not a tensor (sequences, maps and optionals "
                                     "are not supported)")
        tensor_type = value.type.tensor_type
        dtype = _dtype(tensor_type, f"graph input {value.name!r}")
        declared = _declared_dims(value.name, tensor_type)
        dims = declared if value.name not in shape else _user_dims(value.name, shape[value.name], declared)
        signature[value.name] = SymbolicTensorType(dims, dtype)
    for name in shape:
        if name not in signature:
            raise FrontendError(f"shape= names {name!r}, which is not a graph input; inputs are {sorted(signature)}")
    return _tightest_bounds(signature)


def _tightest_bounds(signature: dict[str, SymbolicTensorType]) -> dict[str, SymbolicTensorType]:
    """A symbol named in several inputs gets the intersection of the bounds given for it."""
    bounds: dict[str, Dim] = {}
    for ttype in signature.values():
        for dim in ttype.symbols:
            known = bounds.get(dim.name, dim)
            uppers = [u for u in (known.upper, dim.upper) if u is not None]
            bounds[dim.name] = Dim(dim.name, max(known.lower, dim.lower), min(uppers) if uppers else None)
    return {name: SymbolicTensorType(None if t.shape is None else
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
