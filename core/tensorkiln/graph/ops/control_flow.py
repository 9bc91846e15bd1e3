"""Control-flow ops: `if`, `loop` and `scan`, whose bodies are closed graph Functions.

A body is a Function held in the call's attrs. It is closed: every value it reads
from an enclosing scope is one of its parameters, and the call passes that value as
an argument (the ONNX frontend does this closure conversion), so passes, fusion and
the memory plan never look inside a body, and nesting to any depth is a body whose
own calls are control flow again. The compiler compiles each body as a model of its
own and the executor runs it (compiler/control_flow.py, runtime/control_flow.py);
the numpy reference below runs a body with the reference interpreter.

    if(cond, *captured)                   then_branch(*captured) or else_branch(*captured)
    loop(trip_count, cond, *carried, *captured)
        body(iteration, cond, *carried, *captured) -> (cond, *carried, *scan_elements)
        results: final carried values, then each scan output stacked over iterations
    scan(*states, *scan_inputs, *captured)
        body(*states, *scan_slices, *captured) -> (*states, *scan_elements)

Shapes are static, so a loop with scan outputs needs its trip count when it is built
(`max_trip_count`); a loop that stops early then has shorter scan outputs than its
type says, which the executor and the reference refuse with a clear error.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.errors import RuntimeLaunchError, ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType, TupleType, Type

__all__ = ["IfAttrs", "LoopAttrs", "ScanAttrs", "CONTROL_FLOW_OPS", "is_control_flow", "body_functions",
           "scan_output_type"]

CONTROL_FLOW_OPS = ("if", "loop", "scan")


def is_control_flow(op) -> bool:
    """True for the ops whose bodies run as compiled models of their own (not as kernels)."""
    return getattr(op, "name", None) in CONTROL_FLOW_OPS


def body_functions(attrs: Attrs) -> tuple:
    """The Functions a control-flow call runs: (then, else) for if, (body,) for loop and scan."""
    if isinstance(attrs, IfAttrs):
        return (attrs.then_branch, attrs.else_branch)
    return (attrs.body,)


def _function_type():
    from ..expr import Function
    return Function


def _fields(ttype: Type) -> tuple[Type, ...]:
    return ttype.fields if isinstance(ttype, TupleType) else (ttype,)


def _as_result(types: tuple[Type, ...]) -> Type:
    return types[0] if len(types) == 1 else TupleType(tuple(types))


def _check_params(what: str, function, arg_types: tuple[Type, ...]) -> None:
    param_types = tuple(p.checked_type for p in function.params)
    if param_types != tuple(arg_types):
        raise ShapeError(f"{what} takes parameters of types {[str(t) for t in param_types]} but is called with "
                         f"{[str(t) for t in arg_types]}")


def _call_body(function, args: list) -> tuple:
    """Run `function` on numpy values with the reference interpreter; its results as a tuple."""
    from ..interpreter import evaluate_call
    from ..expr import Call
    value = evaluate_call(Call(function, tuple(_placeholder(a) for a in args)), list(args))
    return tuple(_flat(value)) if isinstance(function.ret_type, TupleType) else (value,)


def _flat(value):
    if isinstance(value, tuple):
        for item in value:
            yield from _flat(item)
    else:
        yield value


def _placeholder(value):
    """A typed stand-in for a reference argument (a Call needs typed arguments to be built)."""
    from ..expr import Var
    from ...ir.dtypes import from_numpy
    array = np.asarray(value)
    return Var("arg", TensorType(array.shape, from_numpy(array.dtype)))


# -- if ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IfAttrs(Attrs):
    """The two branches; both take the captured values as parameters and return the same types."""
    then_branch: object = None
    else_branch: object = None

    def _check(self) -> None:
        function = _function_type()
        if not isinstance(self.then_branch, function) or not isinstance(self.else_branch, function):
            self.fail("then_branch and else_branch must be graph Functions")


def _if_type(arg_types, attrs: IfAttrs) -> Type:
    cond, captured = arg_types[0], tuple(arg_types[1:])
    if not isinstance(cond, TensorType) or cond.size != 1:
        raise ShapeError(f"if: the condition must be a tensor of one element, got {cond}")
    _check_params("if: then_branch", attrs.then_branch, captured)
    _check_params("if: else_branch", attrs.else_branch, captured)
    then_type, else_type = attrs.then_branch.ret_type, attrs.else_branch.ret_type
    if then_type != else_type:
        raise ShapeError(f"if: the branches return different types ({then_type} and {else_type}); tensorkiln "
                         "needs static shapes, so both branches must return the same shapes and dtypes")
    return then_type


def _if_reference(cond, *rest):
    *captured, attrs = rest
    branch = attrs.then_branch if bool(np.asarray(cond).reshape(-1)[0]) else attrs.else_branch
    results = _call_body(branch, captured)
    return results[0] if len(results) == 1 else results


register_op("if", attrs=IfAttrs, type_rule=_if_type, reference=_if_reference, pattern=OpPattern.OPAQUE,
            doc="Run then_branch or else_branch (closed Functions of the captured values) by a run-time condition.")


# -- loop -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoopAttrs(Attrs):
    """`num_carried` loop-carried values; `max_trip_count` is the static trip count (-1: none, then
    the body may have no scan outputs); `has_trip_count`/`has_cond`: ONNX's optional M and cond."""
    body: object = None
    num_carried: int = 0
    max_trip_count: int = -1
    has_trip_count: bool = True
    has_cond: bool = True

    def _check(self) -> None:
        if not isinstance(self.body, _function_type()):
            self.fail("body must be a graph Function")


def _loop_type(arg_types, attrs: LoopAttrs) -> Type:
    trip, cond = arg_types[0], arg_types[1]
    carried = tuple(arg_types[2:2 + attrs.num_carried])
    captured = tuple(arg_types[2 + attrs.num_carried:])
    for what, ttype in (("trip count", trip), ("condition", cond)):
        if not isinstance(ttype, TensorType) or ttype.size != 1:
            raise ShapeError(f"loop: the {what} must be a tensor of one element, got {ttype}")
    body = attrs.body
    params = tuple(p.checked_type for p in body.params)
    if len(params) != 2 + len(carried) + len(captured):
        raise ShapeError(f"loop: the body takes {len(params)} parameters; the loop passes "
                         f"2 + {len(carried)} carried + {len(captured)} captured")
    _check_params("loop: body", body, (params[0], params[1], *carried, *captured))
    results = _fields(body.ret_type)
    if len(results) < 1 + len(carried):
        raise ShapeError(f"loop: the body returns {len(results)} values; it must return the condition and "
                         f"the {len(carried)} carried values first")
    if results[1:1 + len(carried)] != carried:
        raise ShapeError(f"loop: the body changes the types of its carried values from {[str(t) for t in carried]} "
                         f"to {[str(t) for t in results[1:1 + len(carried)]]}; tensorkiln needs static shapes")
    scans = results[1 + len(carried):]
    if scans and attrs.max_trip_count < 0:
        raise ShapeError("loop: a loop with scan outputs needs a static trip count (max_trip_count)")
    stacked = tuple(scan_output_type(t, attrs.max_trip_count, "loop") for t in scans)
    return _as_result((*carried, *stacked))


def scan_output_type(element: Type, count: int, what: str) -> TensorType:
    """The type of `count` scan elements of type `element` stacked along a new first axis."""
    if not isinstance(element, TensorType):
        raise ShapeError(f"{what}: a scan output must be a tensor, got {element}")
    return TensorType((count, *element.shape), element.dtype)


def _loop_reference(trip, cond, *rest):
    *args, attrs = rest
    carried = list(args[:attrs.num_carried])
    captured = list(args[attrs.num_carried:])
    results = run_loop(lambda values: _call_body(attrs.body, values), attrs, trip, cond, carried, captured)
    return results[0] if len(results) == 1 else tuple(results)


def run_loop(run_body, attrs: LoopAttrs, trip, cond, carried: list, captured: list) -> list:
    """ONNX Loop semantics on numpy values (shared by the reference and the executor).

    `run_body(values) -> results` runs the body once.
    """
    limit = int(np.asarray(trip).reshape(-1)[0]) if attrs.has_trip_count else None
    keep_going = bool(np.asarray(cond).reshape(-1)[0]) if attrs.has_cond else True
    iteration_type = attrs.body.params[0].checked_type
    cond_type = attrs.body.params[1].checked_type
    scans: list[list] = []
    iteration = 0
    while keep_going and (limit is None or iteration < limit):
        results = run_body([np.full(iteration_type.shape, iteration, np.int64),
                            np.full(cond_type.shape, keep_going, np.bool_), *carried, *captured])
        keep_going = bool(np.asarray(results[0]).reshape(-1)[0])
        carried = list(results[1:1 + len(carried)])
        for index, element in enumerate(results[1 + len(carried):]):
            if index == len(scans):
                scans.append([])
            scans[index].append(np.asarray(element))
        iteration += 1
    num_scans = len(_fields(attrs.body.ret_type)) - 1 - attrs.num_carried
    if num_scans and iteration != attrs.max_trip_count:
        raise RuntimeLaunchError(
            f"loop: ran {iteration} iterations, but its scan outputs were compiled for {attrs.max_trip_count} "
            "(the static trip count); a loop whose condition ends it early cannot have scan outputs with "
            "static shapes")
    stacked = []
    for index, element in enumerate(_fields(attrs.body.ret_type)[1 + attrs.num_carried:]):
        shape = (attrs.max_trip_count, *element.shape)
        stacked.append(np.stack(scans[index]) if scans and scans[index] else
                       np.zeros(shape, np.dtype(_numpy_dtype(element.dtype))))
    return [*carried, *stacked]


def _numpy_dtype(dtype: str):
    from ...ir.dtypes import to_numpy
    return to_numpy(dtype)


register_op("loop", attrs=LoopAttrs, type_rule=_loop_type, reference=_loop_reference, pattern=OpPattern.OPAQUE,
            doc="ONNX Loop: run the body while the trip count and the condition allow, carrying values.")


# -- scan -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ScanAttrs(Attrs):
    """`num_states` carried states, then `len(input_axes)` scan inputs, then captured values.
    Axes and directions (0 forward, 1 reverse) are per scan input / scan output, normalized."""
    body: object = None
    num_states: int = 0
    input_axes: tuple[int, ...] = ()
    input_directions: tuple[int, ...] = ()
    output_axes: tuple[int, ...] = ()
    output_directions: tuple[int, ...] = ()

    def _check(self) -> None:
        if not isinstance(self.body, _function_type()):
            self.fail("body must be a graph Function")
        if len(self.input_axes) != len(self.input_directions):
            self.fail("input_axes and input_directions need one entry per scan input")
        if len(self.output_axes) != len(self.output_directions):
            self.fail("output_axes and output_directions need one entry per scan output")


def _scan_type(arg_types, attrs: ScanAttrs) -> Type:
    num_inputs = len(attrs.input_axes)
    states = tuple(arg_types[:attrs.num_states])
    inputs = arg_types[attrs.num_states:attrs.num_states + num_inputs]
    captured = tuple(arg_types[attrs.num_states + num_inputs:])
    if not inputs:
        raise ShapeError("scan: needs at least one scan input")
    slices, lengths = [], set()
    for ttype, axis in zip(inputs, attrs.input_axes):
        if not isinstance(ttype, TensorType) or not 0 <= axis < ttype.ndim:
            raise ShapeError(f"scan: scan input of type {ttype} has no axis {axis}")
        lengths.add(ttype.shape[axis])
        slices.append(TensorType(ttype.shape[:axis] + ttype.shape[axis + 1:], ttype.dtype))
    if len(lengths) != 1:
        raise ShapeError(f"scan: the scan inputs have different lengths {sorted(lengths)} along their scan axes")
    (length,) = lengths
    _check_params("scan: body", attrs.body, (*states, *slices, *captured))
    results = _fields(attrs.body.ret_type)
    if results[:attrs.num_states] != states:
        raise ShapeError(f"scan: the body changes the types of its states from {[str(t) for t in states]} to "
                         f"{[str(t) for t in results[:attrs.num_states]]}")
    elements = results[attrs.num_states:]
    if len(elements) != len(attrs.output_axes):
        raise ShapeError(f"scan: the body returns {len(elements)} scan outputs but output_axes has "
                         f"{len(attrs.output_axes)} entries")
    outputs = []
    for element, axis in zip(elements, attrs.output_axes):
        stacked = scan_output_type(element, length, "scan")
        if not 0 <= axis < stacked.ndim:
            raise ShapeError(f"scan: output axis {axis} out of range for a scan output of type {stacked}")
        outputs.append(TensorType(_move_first(stacked.shape, axis), stacked.dtype))
    return _as_result((*states, *outputs))


def _move_first(shape: tuple, axis: int) -> tuple:
    return (*shape[1:axis + 1], shape[0], *shape[axis + 1:])


def run_scan(run_body, attrs: ScanAttrs, states: list, inputs: list, captured: list) -> list:
    """ONNX Scan semantics on numpy values (shared by the reference and the executor)."""
    inputs = [np.asarray(x) for x in inputs]
    length = inputs[0].shape[attrs.input_axes[0]]
    outputs: list[list] = [[] for _ in attrs.output_axes]
    for step in range(length):
        slices = []
        for value, axis, direction in zip(inputs, attrs.input_axes, attrs.input_directions):
            slices.append(np.take(value, length - 1 - step if direction else step, axis=axis))
        results = run_body([*states, *slices, *captured])
        states = list(results[:attrs.num_states])
        for index, element in enumerate(results[attrs.num_states:]):
            outputs[index].append(np.asarray(element))
    stacked = []
    elements = _fields(attrs.body.ret_type)[attrs.num_states:]
    for items, element, axis, direction in zip(outputs, elements, attrs.output_axes, attrs.output_directions):
        if direction:
            items = items[::-1]
        array = np.stack(items) if items else np.zeros((0, *element.shape), _numpy_dtype(element.dtype))
        stacked.append(np.moveaxis(array, 0, axis))
    return [*states, *stacked]


def _scan_reference(*rest):
    *args, attrs = rest
    num_inputs = len(attrs.input_axes)
    results = run_scan(lambda values: _call_body(attrs.body, values), attrs, list(args[:attrs.num_states]),
                       list(args[attrs.num_states:attrs.num_states + num_inputs]),
                       list(args[attrs.num_states + num_inputs:]))
    return results[0] if len(results) == 1 else tuple(results)


register_op("scan", attrs=ScanAttrs, type_rule=_scan_type, reference=_scan_reference, pattern=OpPattern.OPAQUE,
            doc="ONNX Scan: run the body once per slice of the scan inputs, carrying states.")
