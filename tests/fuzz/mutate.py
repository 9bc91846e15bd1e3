"""tests/fuzz/mutate.py: hypothesis strategies that mutate a seed ONNX model into a fuzz case.

    case = data.draw(fuzz_cases())   # FuzzCase(model bytes, seed name, mutations, input seed)

A case is a seed (seeds.py) with one to four mutations, each drawn by hypothesis:
op types, attributes (values and types), input counts, declared shapes (zero,
negative, huge dims, other ranks), dtypes, initializer contents and shapes, names
(duplicates, empty, undefined, reordered nodes), opset and IR versions, graph
outputs; and sometimes a byte-level mutation of the serialized model (truncation,
flipped bytes, garbage).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st
from onnx import AttributeProto, TensorProto, helper

from .seeds import SEEDS

__all__ = ["FuzzCase", "fuzz_cases"]

OP_TYPES = ("Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Floor", "Ceil", "Reciprocal",
            "Softmax", "Identity", "Not", "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Mod", "Equal", "Less",
            "And", "Where", "MatMul", "Gemm", "Conv", "ConvTranspose", "MaxPool", "AveragePool",
            "GlobalAveragePool", "BatchNormalization", "Gather", "GatherElements", "Reshape", "Transpose",
            "Flatten", "Concat", "Split", "Slice", "Squeeze", "Unsqueeze", "Expand", "Tile", "Pad", "Cast",
            "ReduceSum", "ReduceMean", "ReduceMax", "ArgMax", "TopK", "Clip", "LeakyRelu", "Range",
            "ConstantOfShape", "Shape", "Size", "OneHot", "Resize", "CumSum", "Einsum", "LayerNormalization",
            "Trilu", "Dropout", "Sum", "Mean", "NoSuchOp")
ATTRIBUTE_NAMES = ("axis", "axes", "perm", "kernel_shape", "pads", "strides", "dilations", "group", "alpha",
                   "beta", "to", "keepdims", "epsilon", "mode", "auto_pad", "transA", "transB", "value",
                   "ceil_mode", "largest", "k", "exclusive", "allowzero", "foo")
DTYPES = (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.INT32, TensorProto.INT64,
          TensorProto.INT8, TensorProto.UINT8, TensorProto.BOOL, TensorProto.STRING, TensorProto.BFLOAT16,
          TensorProto.UNDEFINED, 99)
DIMS = (0, 1, 2, 3, 4, 5, 7, 16, -1, -7, 2**31, 2**40, 10**12, 2**63 - 1)
OPSETS = (0, 1, 6, 7, 9, 11, 13, 14, 17, 18, 21, 23, 28, 29, 99, -1)


@dataclass
class FuzzCase:
    """One generated case: the model as bytes (possibly not a valid protobuf) and how it was made."""

    model: bytes
    seed: str
    mutations: list[str]
    input_seed: int


_SEED_BYTES: dict[str, bytes] = {}


def _seed_model(name: str):
    import onnx
    if name not in _SEED_BYTES:
        _SEED_BYTES[name] = SEEDS[name]().SerializeToString()
    return onnx.load_model_from_string(_SEED_BYTES[name])


def _pick(draw, items):
    return items[draw(st.integers(0, len(items) - 1))]


def _node(draw, graph):
    return _pick(draw, graph.node) if len(graph.node) else None


def _value_names(graph) -> list[str]:
    names = [v.name for v in graph.input] + [t.name for t in graph.initializer]
    return names + [o for n in graph.node for o in n.output]


def mutate_op_type(draw, model) -> str:
    node = _node(draw, model.graph)
    if node is None:
        return "op_type: no node"
    old, node.op_type = node.op_type, draw(st.sampled_from(OP_TYPES))
    return f"op_type: {node.name or '?'} {old} -> {node.op_type}"


def _attribute_value(draw):
    kind = draw(st.sampled_from(("int", "ints", "float", "floats", "string", "strings", "tensor", "empty_ints")))
    small = st.integers(-3, 5) | st.sampled_from((0, 2**31, -(2**63), 2**63 - 1))
    if kind == "int":
        return draw(small)
    if kind == "ints":
        return draw(st.lists(small, min_size=1, max_size=6))
    if kind == "float":
        return draw(st.floats(allow_nan=True, allow_infinity=True, width=32))
    if kind == "floats":
        return draw(st.lists(st.floats(-4, 4, width=32), min_size=1, max_size=4))
    if kind == "string":
        return draw(st.sampled_from(("", "NOTSET", "SAME_UPPER", "VALID", "constant", "reflect", "nearest", "x")))
    if kind == "strings":
        return ["a", ""]
    if kind == "tensor":
        from onnx import numpy_helper
        dtype = draw(st.sampled_from((np.float32, np.int64, np.bool_)))
        return numpy_helper.from_array(np.ones(draw(st.lists(st.integers(0, 3), max_size=2)), dtype), "t")
    return []


def mutate_attribute(draw, model) -> str:
    node = _node(draw, model.graph)
    if node is None:
        return "attribute: no node"
    action = draw(st.sampled_from(("set", "remove", "retype")))
    if action == "remove" and len(node.attribute):
        index = draw(st.integers(0, len(node.attribute) - 1))
        name = node.attribute[index].name
        del node.attribute[index]
        return f"attribute: {node.name or '?'} remove {name}"
    names = [a.name for a in node.attribute] + list(ATTRIBUTE_NAMES)
    name = _pick(draw, names)
    value = _attribute_value(draw)
    for index, attribute in enumerate(node.attribute):
        if attribute.name == name:
            del node.attribute[index]
            break
    try:
        attribute = helper.make_attribute(name, value)
    except (ValueError, TypeError):
        attribute = helper.make_attribute(name, 0)
    if action == "retype":  # a type field that disagrees with the value it holds
        attribute.type = draw(st.sampled_from((AttributeProto.INT, AttributeProto.FLOAT, AttributeProto.STRING,
                                               AttributeProto.INTS, AttributeProto.TENSOR, AttributeProto.GRAPH)))
    node.attribute.append(attribute)
    return f"attribute: {node.name or '?'} {action} {name}={value!r}"[:200]


def mutate_inputs(draw, model) -> str:
    node = _node(draw, model.graph)
    if node is None:
        return "inputs: no node"
    action = draw(st.sampled_from(("drop", "add", "empty", "swap")))
    if action == "drop" and len(node.input):
        del node.input[draw(st.integers(0, len(node.input) - 1))]
    elif action == "add":
        node.input.append(_pick(draw, _value_names(model.graph) + [""]))
    elif action == "empty" and len(node.input):
        node.input[draw(st.integers(0, len(node.input) - 1))] = ""
    elif action == "swap" and len(node.input) >= 2:
        node.input[0], node.input[1] = node.input[1], node.input[0]
    return f"inputs: {node.name or '?'} {action} -> {list(node.input)}"


def _value_infos(graph):
    return list(graph.input) + list(graph.output)


def mutate_shape(draw, model) -> str:
    infos = _value_infos(model.graph)
    info = _pick(draw, infos) if infos else None
    if info is None:
        return "shape: no value"
    shape = info.type.tensor_type.shape
    action = draw(st.sampled_from(("dim", "rank", "symbolic", "clear")))
    if action == "dim" and len(shape.dim):
        dim = shape.dim[draw(st.integers(0, len(shape.dim) - 1))]
        dim.dim_value = draw(st.sampled_from(DIMS))
    elif action == "rank":
        del shape.dim[:]
        for _ in range(draw(st.integers(0, 6))):
            shape.dim.add().dim_value = draw(st.sampled_from(DIMS[:8]))
    elif action == "symbolic" and len(shape.dim):
        shape.dim[draw(st.integers(0, len(shape.dim) - 1))].dim_param = draw(st.sampled_from(("N", "", "batch")))
    elif action == "clear":
        info.type.tensor_type.ClearField("shape")
    return f"shape: {info.name} {action} -> {[d.dim_value or d.dim_param for d in shape.dim]}"


def mutate_dtype(draw, model) -> str:
    infos = _value_infos(model.graph)
    if not infos:
        return "dtype: no value"
    info = _pick(draw, infos)
    info.type.tensor_type.elem_type = draw(st.sampled_from(DTYPES))
    return f"dtype: {info.name} -> {info.type.tensor_type.elem_type}"


def mutate_initializer(draw, model) -> str:
    graph = model.graph
    if not len(graph.initializer):
        return "initializer: none"
    tensor = _pick(draw, graph.initializer)
    action = draw(st.sampled_from(("values", "special", "dims", "dtype", "truncate", "drop")))
    if action in ("values", "special"):
        from onnx import numpy_helper
        try:
            array = numpy_helper.to_array(tensor).copy()
        except Exception:  # an earlier mutation made it unreadable; leave it so
            return f"initializer: {tensor.name} unreadable"
        if array.size:
            flat = array.reshape(-1)
            if action == "special":
                pool = ((np.nan, np.inf, -np.inf, 0.0, -0.0, 1e38) if array.dtype.kind == "f"
                        else (-(2**31), 2**31 - 1, -1, 0, 10**6))
                flat[draw(st.integers(0, flat.size - 1))] = draw(st.sampled_from(pool))
            else:
                rng = np.random.default_rng(draw(st.integers(0, 2**16)))
                flat[:] = (rng.standard_normal(flat.size) * 3 if array.dtype.kind == "f"
                           else rng.integers(-10, 10, flat.size))
            tensor.CopyFrom(numpy_helper.from_array(array, tensor.name))
    elif action == "dims":
        del tensor.dims[:]
        tensor.dims.extend(draw(st.lists(st.sampled_from(DIMS[:9]), max_size=4)))
    elif action == "dtype":
        tensor.data_type = draw(st.sampled_from(DTYPES))
    elif action == "truncate" and tensor.raw_data:
        tensor.raw_data = tensor.raw_data[: draw(st.integers(0, len(tensor.raw_data) - 1))]
    elif action == "drop":
        name = tensor.name
        graph.initializer.remove(tensor)
        return f"initializer: drop {name}"
    return f"initializer: {tensor.name} {action} dims={list(tensor.dims)} dtype={tensor.data_type}"


def mutate_names(draw, model) -> str:
    graph = model.graph
    action = draw(st.sampled_from(("duplicate_output", "empty", "undefined", "reorder", "rename_input")))
    node = _node(draw, graph)
    if node is None:
        return "names: no node"
    if action == "duplicate_output" and len(graph.node) >= 2:
        other = _pick(draw, graph.node)
        if len(other.output) and len(node.output):
            node.output[0] = other.output[0]
    elif action == "empty" and len(node.output):
        node.output[0] = ""
    elif action == "undefined" and len(node.input):
        node.input[0] = "undefined_value"
    elif action == "reorder" and len(graph.node) >= 2:
        nodes = list(graph.node)
        i, j = draw(st.integers(0, len(nodes) - 1)), draw(st.integers(0, len(nodes) - 1))
        nodes[i], nodes[j] = nodes[j], nodes[i]
        del graph.node[:]
        graph.node.extend(nodes)
    elif action == "rename_input" and len(graph.input):
        graph.input[0].name = draw(st.sampled_from(("", "y", "x2", graph.input[0].name)))
    return f"names: {action} at {node.name or '?'}"


def mutate_opset(draw, model) -> str:
    action = draw(st.sampled_from(("version", "domain", "add", "ir_version")))
    if action == "ir_version":
        model.ir_version = draw(st.sampled_from((0, 1, 3, 7, 9, 10, 11, 99)))
        return f"ir_version -> {model.ir_version}"
    if action == "add":
        entry = model.opset_import.add()
        entry.domain = draw(st.sampled_from(("", "ai.onnx", "ai.onnx.ml", "com.microsoft")))
        entry.version = draw(st.sampled_from(OPSETS))
        return f"opset: add {entry.domain!r} {entry.version}"
    entry = model.opset_import[0]
    if action == "version":
        entry.version = draw(st.sampled_from(OPSETS))
    else:
        entry.domain = draw(st.sampled_from(("ai.onnx", "ai.onnx.ml", "com.x")))
    return f"opset: {entry.domain!r} {entry.version}"


def mutate_outputs(draw, model) -> str:
    graph = model.graph
    action = draw(st.sampled_from(("duplicate", "remove_all", "nonexistent", "intermediate", "dtype")))
    if action == "duplicate" and len(graph.output):
        graph.output.append(graph.output[0])
    elif action == "remove_all":
        del graph.output[:]
    elif action == "nonexistent":
        graph.output.append(helper.make_tensor_value_info("nowhere", TensorProto.FLOAT, [1]))
    elif action == "intermediate" and len(graph.node):
        name = _pick(draw, [o for n in graph.node for o in n.output if o] or ["x"])
        graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, None))
    elif action == "dtype" and len(graph.output):
        graph.output[0].type.tensor_type.elem_type = draw(st.sampled_from(DTYPES))
    return f"outputs: {action} -> {[o.name for o in graph.output]}"


MUTATIONS = (mutate_op_type, mutate_attribute, mutate_inputs, mutate_shape, mutate_dtype, mutate_initializer,
             mutate_names, mutate_opset, mutate_outputs)


def _mutate_bytes(draw, data: bytes) -> tuple[bytes, str]:
    action = draw(st.sampled_from(("truncate", "flip", "garbage", "empty")))
    if action == "truncate":
        cut = draw(st.integers(0, max(len(data) - 1, 0)))
        return data[:cut], f"bytes: truncate at {cut}"
    if action == "flip" and data:
        buffer = bytearray(data)
        for _ in range(draw(st.integers(1, 8))):
            buffer[draw(st.integers(0, len(buffer) - 1))] = draw(st.integers(0, 255))
        return bytes(buffer), "bytes: flip"
    if action == "garbage":
        return draw(st.binary(min_size=1, max_size=64)), "bytes: garbage"
    return b"", "bytes: empty"


@st.composite
def fuzz_cases(draw) -> FuzzCase:
    """A seed with 1-4 drawn mutations (and, one time in ten, a byte-level mutation)."""
    seed = draw(st.sampled_from(sorted(SEEDS)))
    model = _seed_model(seed)
    mutations = []
    for _ in range(draw(st.integers(1, 4))):
        mutation = draw(st.sampled_from(MUTATIONS))
        mutations.append(mutation(draw, model))
    data = model.SerializeToString()
    if draw(st.integers(0, 9)) == 0:
        data, note = _mutate_bytes(draw, data)
        mutations.append(note)
    return FuzzCase(data, seed, mutations, draw(st.integers(0, 2**31 - 1)))
