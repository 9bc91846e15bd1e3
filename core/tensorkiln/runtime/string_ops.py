"""string_ops.py: the ONNX string operators, evaluated on the host with numpy object arrays.

Strings have no place in a kernel, so tensorkiln runs the nodes of an ONNX model that take or make
strings on the host, before and after the compiled part (frontend/onnx/string_stages.py splits the
model; `StagedModel` runs it). Each op here is `op(inputs, attrs) -> outputs` on numpy arrays, with
attributes as onnx.helper.get_attribute_value gives them (bytes decoded to str).

Supported: Identity, Equal, StringConcat, RegexFullMatch (Python `re`: RE2 syntax without RE2-only
features), StringSplit, StringNormalizer, LabelEncoder (ai.onnx.ml) and Cast from string to a number.
"""
from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import numpy as np

from ..ir.errors import UnsupportedOpError

__all__ = ["STRING_OPS", "run_string_node", "as_strings"]


def as_strings(array) -> np.ndarray:
    """`array` (str, bytes or object) as a numpy object array of Python str."""
    array = np.asarray(array)
    if array.dtype.kind == "S" or (array.dtype == object and array.size and isinstance(array.flat[0], bytes)):
        return np.vectorize(lambda s: s.decode() if isinstance(s, bytes) else str(s), otypes=[object])(array) \
            if array.size else array.astype(object)
    return array.astype(object)


def _elementwise(fn: Callable, otype) -> Callable:
    vectorized = np.vectorize(fn, otypes=[otype])

    def apply(*arrays):
        shape = np.broadcast_shapes(*(a.shape for a in arrays))
        if 0 in shape:
            return np.zeros(shape, otype)
        return vectorized(*arrays)
    return apply


def _identity(inputs, attrs):
    return [inputs[0]]


def _equal(inputs, attrs):
    return [_elementwise(lambda a, b: a == b, np.bool_)(as_strings(inputs[0]), as_strings(inputs[1]))]


def _string_concat(inputs, attrs):
    return [_elementwise(lambda a, b: a + b, object)(as_strings(inputs[0]), as_strings(inputs[1]))]


def _regex_full_match(inputs, attrs):
    pattern = re.compile(attrs.get("pattern", ""))
    return [_elementwise(lambda s: pattern.fullmatch(s) is not None, np.bool_)(as_strings(inputs[0]))]


def _string_split(inputs, attrs):
    """Y: the pieces, padded with "" to the longest split along a new last axis; Z: the piece counts.
    No (or an empty) delimiter splits at runs of whitespace, as Python's str.split()."""
    data = as_strings(inputs[0])
    delimiter = attrs.get("delimiter") or None
    maxsplit = attrs.get("maxsplit")
    pieces = [s.split(delimiter, -1 if maxsplit is None else int(maxsplit)) for s in data.reshape(-1)]
    counts = np.array([len(p) for p in pieces], np.int64).reshape(data.shape)
    width = max((len(p) for p in pieces), default=0)
    padded = np.full((len(pieces), width), "", dtype=object)
    for row, piece in enumerate(pieces):
        padded[row, :len(piece)] = piece
    return [padded.reshape(*data.shape, width), counts]


def _string_normalizer(inputs, attrs):
    """Drop the elements that are stop words (case-insensitively unless is_case_sensitive), change case,
    and return the remaining elements ([C] or [1, C]); [""] (or [[""]]) when none remain."""
    data = as_strings(inputs[0])
    if data.ndim not in (1, 2) or (data.ndim == 2 and data.shape[0] != 1):
        raise UnsupportedOpError(f"StringNormalizer: input of shape {data.shape}; ONNX takes [C] or [1, C]")
    action = attrs.get("case_change_action", "NONE")
    sensitive = bool(attrs.get("is_case_sensitive", 0))
    stops = set(attrs.get("stopwords", []) or [])
    if not sensitive:
        stops = {w.lower() for w in stops}
    kept = [s for s in data.reshape(-1) if (s if sensitive else s.lower()) not in stops]
    if action == "LOWER":
        kept = [s.lower() for s in kept]
    elif action == "UPPER":
        kept = [s.upper() for s in kept]
    elif action != "NONE":
        raise UnsupportedOpError(f"StringNormalizer: case_change_action={action!r}; use LOWER, UPPER or NONE")
    result = np.array(kept or [""], dtype=object)
    return [result.reshape(1, -1) if data.ndim == 2 else result]


def _tensor_values(tensor) -> np.ndarray:
    from onnx import TensorProto, numpy_helper
    if tensor.data_type == TensorProto.STRING:
        return as_strings(np.array(list(tensor.string_data), dtype=object))
    return numpy_helper.to_array(tensor)


def _label_encoder(inputs, attrs):
    """ai.onnx.ml LabelEncoder: each element's value in the keys -> values map, else the default."""
    def first(*names):
        for name in names:
            if attrs.get(name) is not None:
                return name, attrs[name]
        raise UnsupportedOpError(f"LabelEncoder: none of {', '.join(names)} is given")

    key_name, keys = first("keys_strings", "keys_int64s", "keys_floats", "keys_tensor")
    value_name, values = first("values_strings", "values_int64s", "values_floats", "values_tensor")
    keys = _tensor_values(keys) if key_name == "keys_tensor" else np.asarray(keys)
    if value_name == "values_tensor":
        values = _tensor_values(values)
        default_tensor = attrs.get("default_tensor")
        dtype = values.dtype
        default = _tensor_values(default_tensor).reshape(-1)[0] if default_tensor is not None else \
            ("_Unused" if dtype == object else 0)
    else:
        dtype = {"values_strings": object, "values_int64s": np.int64, "values_floats": np.float32}[value_name]
        default = {"values_strings": attrs.get("default_string", "_Unused"),
                   "values_int64s": attrs.get("default_int64", -1),
                   "values_floats": attrs.get("default_float", -0.0)}[value_name]
    if keys.dtype.kind in "SU" or keys.dtype == object:
        keys = as_strings(keys)
    table = dict(zip(keys.tolist(), np.asarray(values).tolist()))
    data = inputs[0]
    data = as_strings(data) if data.dtype.kind in "SUO" else data
    out = np.empty(data.shape, dtype=dtype)
    for index, key in enumerate(data.reshape(-1).tolist()):
        out.reshape(-1)[index] = table.get(key, default)
    return [out]


def _cast(inputs, attrs):
    from onnx import helper
    data = inputs[0]
    to = attrs["to"]
    if to == 8:   # to string: numpy's shortest repr in the value's own dtype ("0.1" for float32), as onnx's reference
        return [data.astype(np.str_).astype(object)]
    return [as_strings(data).astype(np.float64).astype(helper.tensor_dtype_to_np_dtype(to))]


STRING_OPS: dict[str, Callable[[Sequence[np.ndarray], dict[str, Any]], list[np.ndarray]]] = {
    "Identity": _identity, "Equal": _equal, "StringConcat": _string_concat, "RegexFullMatch": _regex_full_match,
    "StringSplit": _string_split, "StringNormalizer": _string_normalizer, "LabelEncoder": _label_encoder,
    "Cast": _cast,
}


def run_string_node(op_type: str, inputs: Sequence[np.ndarray], attrs: dict[str, Any], name: str = "") -> list:
    """Evaluate one string node; UnsupportedOpError naming it when tensorkiln has no host version of its op."""
    if op_type not in STRING_OPS:
        raise UnsupportedOpError(f"ONNX node {name!r} ({op_type}) takes or makes strings; tensorkiln runs only "
                                 f"{', '.join(sorted(STRING_OPS))} on strings")
    return STRING_OPS[op_type](list(inputs), attrs)
