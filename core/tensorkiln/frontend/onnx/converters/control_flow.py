"""If, Loop and Scan -> the graph ops `if`, `loop` and `scan` (graph/ops/control_flow.py).

Subgraphs become closed Functions (subgraph.py). An If whose condition is known at
import time is not an op at all: the chosen branch's nodes are converted in place.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Call, Constant, Expr, Function, Var
from ....graph.registry import get_op
from ....graph.types import TensorType
from ....ir.errors import FrontendError, UnsupportedOpError
from ..node import OnnxNode
from ..subgraph import union_functions
from ._registry import converter


def _subgraph(node: OnnxNode, name: str):
    graph = node.attr(name)
    if graph is None or not hasattr(graph, "node"):
        raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}) lacks its subgraph attribute {name!r}")
    return graph


def _where(node: OnnxNode, what: str) -> str:
    return f"ONNX node {node.name!r} ({node.op_type}) {what}"


def _results(value: Expr, count: int):
    """The call's results as a tuple the importer names one by one."""
    return value if count > 1 else (value,)


@converter("If")
def convert_if(node: OnnxNode):
    cond = node.required(0)
    then_graph, else_graph = _subgraph(node, "then_branch"), _subgraph(node, "else_branch")
    if isinstance(cond, Constant):
        # folded at import: only the branch taken is converted, its values join the enclosing graph
        chosen = then_graph if bool(np.asarray(cond.value).reshape(-1)[0]) else else_graph
        branch = node.scope.convert(chosen, [], capture=False, where=_where(node, "branch"))
        return tuple(branch.outputs)
    branches = [node.scope.convert(graph, [], where=_where(node, label))
                for graph, label in ((then_graph, "then_branch"), (else_graph, "else_branch"))]
    if not all(isinstance(v, Expr) and isinstance(v.checked_type, TensorType) for b in branches for v in b.outputs):
        # sequences and optionals exist at import only, so the branch must be chosen then: this raises
        # ValueNotStaticError, on which tk.compile specialises (the condition's value compiled in)
        node.const(0, "the condition of an If whose branches produce sequences or optionals")
    _check_tensor_outputs(node, branches)
    (then_fn, else_fn), captured = union_functions(branches)
    result = node.call("if", cond, *captured, then_branch=then_fn, else_branch=else_fn)
    return _results(result, len(branches[0].outputs))


def _check_tensor_outputs(node: OnnxNode, subgraphs) -> None:
    for subgraph in subgraphs:
        for index, value in enumerate(subgraph.outputs):
            if not isinstance(value, Expr) or not isinstance(value.checked_type, TensorType):
                raise node.unsupported(f"subgraph output {index} is a sequence or an optional; control flow "
                                       "with non-tensor results is not supported")


def _declared_scalar_type(value_info, dtype: str) -> TensorType:
    """The type a body gives its iteration count or condition: its declared static shape, else a scalar."""
    tensor_type = value_info.type.tensor_type
    if tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in tensor_type.shape.dim):
        return TensorType(tuple(d.dim_value for d in tensor_type.shape.dim), dtype)
    return TensorType((), dtype)


@converter("Loop")
def convert_loop(node: OnnxNode):
    body_graph = _subgraph(node, "body")
    trip, cond = node.input(0), node.input(1)
    carried = [node.required(i) for i in range(2, len(node.inputs))]
    if len(body_graph.input) != 2 + len(carried):
        raise FrontendError(f"{_where(node, 'body')} has {len(body_graph.input)} inputs; it must take the "
                            f"iteration count, the condition and the {len(carried)} carried values")
    counter_types = [_declared_scalar_type(body_graph.input[0], "int64"),
                     _declared_scalar_type(body_graph.input[1], "bool")]
    max_trip = int(np.asarray(trip.value).reshape(-1)[0]) if isinstance(trip, Constant) else -1
    if not all(isinstance(v, Expr) and isinstance(v.checked_type, TensorType) for v in carried):
        # a carried sequence or optional exists at import only: the loop unrolls, or it cannot be converted
        unrolled = _unroll(node, body_graph, counter_types, max_trip, cond, carried)
        if unrolled is None:
            if trip is not None and max_trip < 0:
                node.const(0, "the trip count of a Loop that carries a sequence")
            if cond is not None and not isinstance(cond, Constant):
                node.const(1, "the condition of a Loop that carries a sequence")
            raise node.unsupported(f"a Loop that carries a sequence or an optional unrolls, which needs a static "
                                   f"trip count <= {UNROLL_LIMIT} and conditions known at import")
        return unrolled
    param_types = [*counter_types, *(v.checked_type for v in carried)]
    try:
        body = node.scope.convert(body_graph, param_types, where=_where(node, "body"))
    except UnsupportedOpError as error:
        # the body needs a value it computes from the iteration count (a Slice start, ...) statically:
        # with a static trip count the loop unrolls, each iteration's count a constant
        unrolled = _unroll(node, body_graph, param_types, max_trip, cond, carried)
        if unrolled is not None:
            return unrolled
        body_names = {value_info.name for value_info in body_graph.input}
        if set(getattr(error, "inputs", ())) & body_names:
            # the loop would unroll with these known: ask for them (a caller may specialise on them)
            if trip is not None and max_trip < 0:
                node.const(0, "the trip count of a Loop whose body needs its iteration count statically")
            if cond is not None and max_trip <= UNROLL_LIMIT:
                node.const(1, "the condition of a Loop whose body needs its iteration count statically")
            raise node.unsupported(f"its body needs a value known at import time that it computes from the "
                                   f"iteration count or a carried value ({error}); a static trip count "
                                   f"<= {UNROLL_LIMIT} with a constant condition unrolls such a loop") from None
        raise
    _check_tensor_outputs(node, [body])
    (function,), captured = union_functions([body])
    num_scans = len(body.outputs) - 1 - len(carried)
    if num_scans and max_trip < 0:
        if trip is None:
            raise node.unsupported("a Loop with scan outputs and no trip count has outputs whose length "
                                   "only the run decides; tensorkiln needs static shapes")
        node.const(0, "the trip count of a Loop with scan outputs")  # raises: not known at import time
    trip_arg = trip if trip is not None else Constant(np.array(0, np.int64))
    cond_arg = cond if cond is not None else Constant(np.array(True))
    result = node.call("loop", trip_arg, cond_arg, *carried, *captured, body=function, num_carried=len(carried),
                       max_trip_count=max_trip, has_trip_count=trip is not None, has_cond=cond is not None)
    return _results(result, len(carried) + num_scans)


UNROLL_LIMIT = 64
"""A Loop whose body needs its iteration count statically unrolls up to this many iterations."""


def _unroll(node: OnnxNode, body_graph, param_types, max_trip: int, cond: Expr | None, carried: list):
    """The Loop's results with its body converted once per iteration (iteration count and condition
    constants), or None when it cannot unroll: no static trip count, too many iterations, or a
    condition only the run decides."""
    if not 0 <= max_trip <= UNROLL_LIMIT or (cond is not None and not isinstance(cond, Constant)):
        return None
    keep_going = cond is None or bool(np.asarray(cond.value).reshape(-1)[0])
    scans: list[list[Expr]] = []
    for iteration in range(max_trip):
        if not keep_going:
            break
        scope = node.scope.child()
        values = [Constant(np.full(param_types[0].shape, iteration, np.int64)),
                  Constant(np.full(param_types[1].shape, keep_going)), *carried]
        for value_info, value in zip(body_graph.input, values):
            scope.values[value_info.name] = value
        outputs = scope.convert_inline(body_graph, where=_where(node, f"body (iteration {iteration})"))
        if not isinstance(outputs[0], Constant):
            return None
        keep_going = bool(np.asarray(outputs[0].value).reshape(-1)[0])
        carried = outputs[1:1 + len(carried)]
        for index, element in enumerate(outputs[1 + len(carried):]):
            if index == len(scans):
                scans.append([])
            scans[index].append(node.call("expand_dims", element, axis=0))
    num_scans = len(body_graph.output) - 1 - len(carried)
    if num_scans and not all(scans[:num_scans]):
        raise node.unsupported("a Loop that runs no iteration has scan outputs of unknown shape")
    stacked = [items[0] if len(items) == 1 else node.call("concatenate", *items, axis=0) for items in scans]
    return (*carried, *stacked)


@converter("Scan")
def convert_scan(node: OnnxNode):
    body_graph = _subgraph(node, "body")
    num_inputs = int(node.attr("num_scan_inputs", 0))
    if node.opset < 9:
        return _convert_scan8(node, body_graph, num_inputs)
    values = [node.required(i) for i in range(len(node.inputs))]
    num_states = len(values) - num_inputs
    if num_states < 0 or num_inputs < 1:
        raise FrontendError(f"{_where(node, '')}: num_scan_inputs={num_inputs} but it has {len(values)} inputs")
    states, inputs = values[:num_states], values[num_states:]
    num_outputs = len(body_graph.output) - num_states
    input_axes = _axes(node, "scan_input_axes", [v.ndim for v in inputs])
    input_dirs = tuple(node.attr("scan_input_directions", [0] * num_inputs))
    output_dirs = tuple(node.attr("scan_output_directions", [0] * num_outputs))
    slice_types = [TensorType(v.shape[:a] + v.shape[a + 1:], v.dtype) for v, a in zip(inputs, input_axes)]
    body = node.scope.convert(body_graph, [*(s.checked_type for s in states), *slice_types],
                              where=_where(node, "body"))
    _check_tensor_outputs(node, [body])
    output_axes = _axes(node, "scan_output_axes", [o.checked_type.ndim + 1 for o in body.outputs[num_states:]])
    (function,), captured = union_functions([body])
    result = node.call("scan", *states, *inputs, *captured, body=function, num_states=num_states,
                       input_axes=input_axes, input_directions=input_dirs, output_axes=output_axes,
                       output_directions=output_dirs)
    return _results(result, len(body.outputs))


def _axes(node: OnnxNode, name: str, ranks: list[int]) -> tuple[int, ...]:
    axes = list(node.attr(name, [0] * len(ranks)))
    if len(axes) != len(ranks):
        raise FrontendError(f"{_where(node, '')}: {name} has {len(axes)} entries, expected {len(ranks)}")
    out = []
    for axis, rank in zip(axes, ranks):
        if not -rank <= axis < rank:
            raise FrontendError(f"{_where(node, '')}: {name} entry {axis} is out of range for rank {rank}")
        out.append(axis % rank)
    return tuple(out)


def _convert_scan8(node: OnnxNode, body_graph, num_inputs: int):
    """Scan-8 has a batch axis 0 on every value: an outer scan over the batch whose body is the
    Scan-9 form (time on axis 0 of each batch slice). Only full-length sequences are supported."""
    lengths = node.input(0)
    values = [node.required(i) for i in range(1, len(node.inputs))]
    num_states = len(values) - num_inputs
    states, inputs = values[:num_states], values[num_states:]
    time = inputs[0].shape[1]
    if lengths is not None:
        if not isinstance(lengths, Constant) or not np.all(np.asarray(lengths.value) == time):
            raise node.unsupported("Scan-8 with sequence_lens shorter than the sequence is not supported")
    directions = tuple(node.attr("directions", [0] * num_inputs))
    slice_types = [TensorType(v.shape[2:], v.dtype) for v in inputs]
    state_types = [TensorType(s.shape[1:], s.dtype) for s in states]
    body = node.scope.convert(body_graph, [*state_types, *slice_types], where=_where(node, "body"))
    _check_tensor_outputs(node, [body])
    (function,), captured = union_functions([body])
    num_outputs = len(body.outputs) - num_states
    inner_states = [Var(f"state{i}", t) for i, t in enumerate(state_types)]
    inner_inputs = [Var(f"input{i}", TensorType((time, *t.shape), t.dtype)) for i, t in enumerate(slice_types)]
    inner_captured = [Var(f"captured{i}", c.checked_type) for i, c in enumerate(captured)]
    op = get_op("scan")
    inner = Call(op, (*inner_states, *inner_inputs, *inner_captured), op.make_attrs(
        body=function, num_states=num_states, input_axes=(0,) * num_inputs, input_directions=directions,
        output_axes=(0,) * num_outputs, output_directions=(0,) * num_outputs))
    # over the batch the states are scanned like inputs: no state crosses from one batch row to the next
    per_batch = Function((*inner_states, *inner_inputs, *inner_captured), inner)
    result = node.call("scan", *states, *inputs, *captured, body=per_batch,
                       num_states=0, input_axes=(0,) * (num_states + num_inputs),
                       input_directions=(0,) * (num_states + num_inputs),
                       output_axes=(0,) * len(body.outputs), output_directions=(0,) * len(body.outputs))
    return _results(result, len(body.outputs))

