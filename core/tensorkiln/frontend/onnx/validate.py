"""frontend/onnx/validate.py: reject invalid ONNX models before import, with a message that names the culprit.

    check_structure(model)                      # opsets, value names, inputs defined before use
    deferred = check_with_onnx(model, path, shape)  # onnx.checker full check, then attributes
    ... convert; a TensorkilnError of the conversion (ShapeError naming the node) wins ...
    check_outputs(graph, values)                # each declared output dtype matches the computed one
    if deferred is not None: raise deferred     # strict shape inference failed where we did not

`onnx.checker.check_model(model, full_check=True)` runs the structural checks and
strict shape/type inference; symbolic dimensions and ops onnx cannot infer (custom
domains) pass it when the model is otherwise valid. Our own checks cover what the
checker lets through (onnxruntime rejects these too): opset versions newer than
any onnx knows (opset 99), duplicate or empty value names, duplicate graph outputs,
and a graph output whose declared element type is not what the graph computes.
Every failure is a FrontendError; a checker failure includes the checker's message.
"""
from __future__ import annotations

import re
from typing import Any, Mapping

from ...graph.types import TensorType
from ...ir.errors import FrontendError

__all__ = ["check_structure", "check_with_onnx", "check_outputs", "supported_opsets"]

# A serialized ModelProto over protobuf's 2 GB cannot go through the in-memory checker.
_PROTOBUF_LIMIT = (1 << 31) - 1


def supported_opsets() -> dict[str, tuple[int, int]]:
    """The opset versions this frontend accepts, by domain ("" is the default ONNX domain).

    Ops of other domains import only as model-local functions, which take any version.
    """
    import onnx
    return {"": (1, onnx.defs.onnx_opset_version()), "ai.onnx.ml": (1, onnx.defs.onnx_ml_opset_version()),
            "ai.onnx.preview.training": (1, 1)}


def check_structure(model) -> None:
    """Raise FrontendError for what onnx.checker misses or words less clearly: opset versions,
    duplicate or empty names, inputs read before they are defined (also cycles)."""
    _check_text(model)
    _check_opsets(model)
    _check_names(model.graph)


def check_with_onnx(model, path: str | None = None,
                    shapes: Mapping[str, tuple[int, ...]] | None = None) -> FrontendError | None:
    """Run `onnx.checker.check_model(model, full_check=True)` and check attribute names.

    A structural failure raises FrontendError with the checker's message. A failure of
    the strict shape inference is returned instead, to raise after the import: when the
    import fails too, its own error (a ShapeError naming the node and both shapes) is
    clearer. `path` is the file the model came from (a model over 2 GB is checked from
    it); `shapes` are the input shapes the user binds (from_onnx's shape=).
    """
    deferred = _run_checker(_checkable(model, shapes or {}), path)
    _check_attributes(model)
    return deferred


def _checkable(model, shapes: Mapping[str, tuple[int, ...]]):
    """`model`, or a copy the checker accepts when a graph input or output has a tensor type without a
    shape: the checker requires one on the main graph's inputs and outputs, onnxruntime does not.
    Such an output is left out of the copy (check_outputs still checks its dtype); such an input gets
    the shape the user binds, and without one it is an error here, as the import needs its shape."""
    def lacks_shape(value) -> bool:
        return value.type.HasField("tensor_type") and not value.type.tensor_type.HasField("shape")

    graph = model.graph
    if not any(lacks_shape(v) for v in (*graph.input, *graph.output)):
        return model
    initializers = {tensor.name for tensor in graph.initializer}
    for value in graph.input:
        if lacks_shape(value) and value.name not in shapes and value.name not in initializers:
            raise FrontendError(f"graph input {value.name!r} has no shape; bind it with "
                                f"from_onnx(..., shape={{{value.name!r}: (...)}})")
    copy = type(model)()
    copy.CopyFrom(model)
    for value in copy.graph.input:
        if lacks_shape(value):
            bound = shapes.get(value.name)
            dims = value.type.tensor_type.shape.dim
            if bound is None:  # an input with an initializer: its shape is the initializer's
                bound = next(tuple(t.dims) for t in graph.initializer if t.name == value.name)
            for size in bound:
                dims.add().dim_value = int(size)
    kept = [value for value in copy.graph.output if not lacks_shape(value)]
    del copy.graph.output[:]
    copy.graph.output.extend(kept)
    return copy


def check_outputs(graph, values: Mapping[str, Any], check_dtypes: bool = True) -> None:
    """Each graph output declares an element type, and (with `check_dtypes`) the one the graph computes."""
    import onnx
    for output in graph.output:
        if not output.type.HasField("tensor_type"):
            continue
        declared = output.type.tensor_type.elem_type
        if declared == 0:
            raise FrontendError(f"graph output {output.name!r} declares element type UNDEFINED (0); declare the "
                                "type it has (onnxruntime rejects this model too)")
        value = values.get(output.name)
        if not check_dtypes or value is None or not isinstance(value.checked_type, TensorType):
            continue
        computed = value.checked_type.dtype
        if _onnx_dtype_name(declared) != computed:
            name = onnx.TensorProto.DataType.Name(declared) if declared in onnx.TensorProto.DataType.values() else str(declared)
            raise FrontendError(
                f"graph output {output.name!r} declares element type {name} ({_onnx_dtype_name(declared)}), but the "
                f"graph computes {computed}; fix the output's declared type (onnxruntime rejects this model too)")


def _onnx_dtype_name(elem_type: int) -> str:
    from onnx import helper
    from ...ir.dtypes import from_numpy
    from .narrow_types import carrier_of_onnx_type
    if carrier_of_onnx_type(elem_type) is not None:   # float8, int4, ...: the graph computes their carrier
        return carrier_of_onnx_type(elem_type)
    try:
        return str(from_numpy(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # an element type numpy or tensorkiln lacks (bfloat16, float8, strings, ...)
        return f"onnx type {elem_type}"


def _check_text(model) -> None:
    """Names, op types and domains must be text: protobuf hands a string field that is not valid UTF-8
    (a corrupt file) back as bytes."""
    def check(value, what: str) -> None:
        if not isinstance(value, str):
            raise FrontendError(f"{what} is not valid UTF-8 text ({value[:40]!r}); the file is corrupt")

    for entry in model.opset_import:
        check(entry.domain, "an opset_import domain")
    graph = model.graph
    for kind, values in (("graph input", graph.input), ("graph output", graph.output),
                         ("initializer", graph.initializer)):
        for index, value in enumerate(values):
            check(value.name, f"the name of {kind} #{index}")
    for index, node in enumerate(graph.node):
        for field in ("op_type", "domain", "name"):
            check(getattr(node, field), f"the {field} of ONNX node #{index}")
        for position, name in enumerate((*node.input, *node.output)):
            check(name, f"input/output {position} of ONNX node #{index} ({node.op_type})")
        for attribute in node.attribute:
            check(attribute.name, f"an attribute name of ONNX node #{index} ({node.op_type})")


def _check_opsets(model) -> None:
    seen: dict[str, int] = {}
    supported = supported_opsets()
    for entry in model.opset_import:
        domain = "" if entry.domain == "ai.onnx" else entry.domain
        label = domain or "ai.onnx (default)"
        if domain in seen:
            raise FrontendError(f"opset_import lists domain {label!r} twice (versions {seen[domain]} and "
                                f"{entry.version}); keep one entry per domain")
        seen[domain] = entry.version
        if domain in supported:
            low, high = supported[domain]
            if not low <= entry.version <= high:
                raise FrontendError(f"opset_import: domain {label!r} version {entry.version} is not supported; "
                                    f"tensorkiln supports versions {low} to {high} of this domain (convert the "
                                    "model with onnx.version_converter)")


def _check_names(graph) -> None:
    """Every value has a non-empty name defined once (initializers may repeat a graph input, as IR < 4
    requires); every graph output is named once."""
    defined: dict[str, str] = {}

    def define(name: str, what: str) -> None:
        if not name:
            raise FrontendError(f"{what} has an empty name; every graph input, initializer and output needs one")
        if name in defined:
            raise FrontendError(f"{what} redefines {name!r}, already defined by {defined[name]}; value names "
                                "must be unique (the graph must be in SSA form)")
        defined[name] = what

    initializers = set()
    for tensor in graph.initializer:
        if tensor.name in initializers:
            raise FrontendError(f"initializer {tensor.name!r} is defined twice")
        initializers.add(tensor.name)
        define(tensor.name, f"initializer {tensor.name!r}")
    inputs: set[str] = set()
    for value in graph.input:
        if value.name in inputs:
            raise FrontendError(f"graph input {value.name!r} is listed twice; input names must be unique")
        inputs.add(value.name)
        if value.name not in initializers:  # else an input with a default value (its initializer)
            define(value.name, f"graph input {value.name!r}")
    for index, node in enumerate(graph.node):
        label = f"ONNX node {node.name or f'#{index}'!r} ({node.op_type})"
        for name in node.input:
            if name and name not in defined:
                raise FrontendError(f"{label} reads {name!r}, which no node, initializer or graph input produces "
                                    "(the graph is malformed or not topologically sorted)")
        for position, name in enumerate(node.output):
            if name:  # an empty output name is an omitted optional output
                define(name, f"{label} output {position}")
    outputs: set[str] = set()
    for output in graph.output:
        if not output.name:
            raise FrontendError("a graph output has an empty name")
        if output.name in outputs:
            raise FrontendError(f"graph output {output.name!r} is listed twice; output names must be unique")
        outputs.add(output.name)


def _run_checker(model, path: str | None) -> FrontendError | None:
    import onnx
    try:
        if model.ByteSize() <= _PROTOBUF_LIMIT:
            onnx.checker.check_model(model, full_check=True)
        elif path is not None:
            onnx.checker.check_model(path, full_check=True)
        # else: an in-memory model over 2 GB cannot be serialized for the checker; our own checks still run.
    except RecursionError:
        raise FrontendError("onnx.checker: the model nests subgraphs too deeply to check") from None
    except onnx.shape_inference.InferenceError as error:
        if _fails_inside_function_body(str(error), model):
            return None
        return FrontendError(f"{_culprit(str(error))}the ONNX model is invalid (onnx.checker's strict shape "
                             f"inference rejects it; onnxruntime would too): {_compact(str(error))}")
    except Exception as error:  # ValidationError, InferenceError, SchemaError, ValueError from the C++ checker
        raise FrontendError(f"{_culprit(str(error))}the ONNX model is invalid (onnx.checker rejects it; "
                            f"onnxruntime would too): {_compact(str(error))}") from None
    return None


def _fails_inside_function_body(message: str, model) -> bool:
    """Whether strict inference failed on a node inside the body of a function op, not on the model's own
    nodes. onnx infers the bodies it expands itself and fails on some of them (MeanVarianceNormalization
    at opset 13: "One and only one of the attributes 'value', 'value_*' ... for a Constant node", from an
    attribute reference), while onnxruntime runs the model; the import checks those bodies itself."""
    import onnx
    ops = re.findall(r"\(op_type:(\w+)", message)
    if len(ops) < 2:
        return False
    if any(f.name == ops[0] for f in model.functions):
        return True
    opset = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), 1)
    try:
        schema = onnx.defs.get_schema(ops[0], opset, "")
    except onnx.defs.SchemaError:
        return False
    return bool(schema.has_function or schema.has_context_dependent_function)


def _culprit(message: str) -> str:
    """'ONNX node 'conv0' (Conv): ' when the checker's message names a node, else ''."""
    match = re.search(r"Name:\s*(\S*)\s*OpType:\s*(\S+)", message, re.IGNORECASE)
    if match:
        name, op = match.groups()
    elif match := re.search(r"\(op_type:(\w+), node name: ([^)]*)\)", message):
        op, name = match.groups()
    elif match := re.search(r"\(op_type:(\w+)\)", message):
        op, name = match.group(1), ""
    else:
        return ""
    return f"ONNX node {name!r} ({op}): " if name else f"ONNX node <unnamed> ({op}): "


def _compact(message: str) -> str:
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    text = " | ".join(lines)
    return text if len(text) <= 2000 else f"{text[:2000]} ..."


def _check_attributes(model) -> None:
    """Attributes of the default-domain ops we convert must be ones their schema defines (the checker
    already verifies this; kept so a converter never silently ignores a misspelled attribute)."""
    import onnx
    from .converters import CONVERTERS
    opset = next((e.version for e in model.opset_import if e.domain in ("", "ai.onnx")), 1)
    for index, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in CONVERTERS:
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, opset, "")
        except onnx.defs.SchemaError:
            continue  # the checker reports an op that does not exist at this opset
        known = set(schema.attributes)
        for attribute in node.attribute:
            if attribute.name not in known:
                raise FrontendError(
                    f"ONNX node {node.name or f'#{index}'!r} ({node.op_type}, opset {opset}) has attribute "
                    f"{attribute.name!r}, which {node.op_type} does not define; known attributes: "
                    f"{', '.join(sorted(known)) or 'none'}")
