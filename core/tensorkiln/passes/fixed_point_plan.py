"""passes/fixed_point_plan.py: a fixed-point format per kernel tensor, from calibrated ranges.

For targets whose kernels compute in fixed point (an FPGA's ap_fixed): after fusion, every float
input and output of every fused group gets a `FixedPoint` (tensorkiln.sdk) of `width` bits whose
integer bits hold the tensor's calibrated range:

    config = {"width": 16, "calibration": [x0, x1, ...], "method": "minmax"}
    lib = tk.compile(model, target="fpga_hls",
                     context=tk.PassContext(config={"assign_fixed_point": config}))
    expected = fixed_point_reference(lib.graph, {"x": x})       # what the kernels must return, exactly

The ranges of activations come from running the fused graph on the calibration samples with the
numpy references, reduced by the calibration methods of `calibrate.py` (minmax, percentile,
entropy); weights and other constants use their own min and max. Formats sit on each group
Function (attribute TENSOR_FORMATS_ATTR: one per input, then per output), so groups of equal ops
but different formats are different kernels; lowering writes them on the kernel's PrimFunc.

Integer bits: the fewest that hold max(|low|, |high|) (sign included), at least 1 and at most
`width`; values past them at run time saturate. A group with no float tensor gets no formats.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Mapping

import numpy as np

from ..graph import Call, Constant, Function, Module, Tuple, TupleGetItem, Var, post_order
from ..graph.interpreter import evaluate_call
from ..graph.traversal import with_operands
from ..graph.types import TensorType, TupleType
from ..ir.errors import TensorkilnError
from ..sdk.fixed_point import TENSOR_FORMATS_ATTR, FixedPoint
from .value_ranges import BINS, METHODS, Range, _edges, _percentile_range, as_feeds, entropy_threshold

__all__ = ["assign_fixed_point", "fixed_point_reference", "format_for_range", "integer_bits", "group_formats"]


def integer_bits(low: float, high: float, width: int, signed: bool = True) -> int:
    """The fewest integer bits (sign included when `signed`) whose range holds [low, high], in 1..width."""
    top = max(abs(float(low)), abs(float(high)))
    if not math.isfinite(top):
        raise TensorkilnError(f"fixed point: the calibrated range [{low}, {high}] is not finite")
    if top == 0.0:
        return 1
    bits = math.floor(math.log2(top)) + 1 + (1 if signed else 0)   # 2**(bits - sign) > top
    return max(1, min(width, bits))


def format_for_range(calibrated: Range, width: int, rounding: str = "nearest_even",
                     overflow: str = "saturate") -> FixedPoint:
    return FixedPoint(width, integer_bits(calibrated.low, calibrated.high, width), True, rounding, overflow)


def group_formats(function: Function) -> tuple[FixedPoint | None, ...]:
    """The formats of a fused group: one per input, then per output (() when it has none)."""
    return tuple(function.attr(TENSOR_FORMATS_ATTR) or ())


def _is_float(tensor_type) -> bool:
    return isinstance(tensor_type, TensorType) and str(tensor_type.dtype).startswith("float")


def _output_types(function: Function) -> tuple:
    ret = function.ret_type
    return tuple(ret.fields) if isinstance(ret, TupleType) else (ret,)


def _outputs(value, function: Function) -> tuple:
    return tuple(value) if isinstance(function.ret_type, TupleType) else (value,)


def _group_calls(mod: Module) -> list[Call]:
    return [n for n in post_order(mod.main.body) if isinstance(n, Call) and isinstance(n.op, Function)]


def _observe(mod: Module, samples: list[dict[str, np.ndarray]]):
    """Yield, per sample, {id(node): value} of every group call's outputs (a tuple) and every input."""
    for feeds in samples:
        values: dict[int, Any] = {id(p): feeds[p.name] for p in mod.main.params}
        for node in post_order(mod.main.body):
            if isinstance(node, Constant):
                values[id(node)] = node.value
            elif isinstance(node, Call):
                values[id(node)] = evaluate_call(node, [values[id(a)] for a in node.args])
            elif isinstance(node, Tuple):
                values[id(node)] = tuple(values[id(f)] for f in node.fields)
            elif isinstance(node, TupleGetItem):
                values[id(node)] = values[id(node.tuple_value)][node.index]
        yield values


def _ranges(mod: Module, samples, method: str, percentile: float) -> dict[tuple[int, int], Range]:
    """Calibrated range of each non-constant value: keyed (id(node), output index)."""
    watched: list[tuple[int, int]] = [(id(p), 0) for p in mod.main.params]
    watched += [(id(c), i) for c in _group_calls(mod) for i in range(len(_output_types(c.op)))]

    def pick(values, key):
        node_value = values[key[0]]
        return np.asarray(node_value[key[1]] if isinstance(node_value, tuple) else node_value, dtype=np.float64)

    low = {k: np.inf for k in watched}
    high = {k: -np.inf for k in watched}
    for values in _observe(mod, samples):
        for key in watched:
            data = pick(values, key)
            if data.size and data.dtype.kind == "f":
                low[key], high[key] = min(low[key], float(data.min())), max(high[key], float(data.max()))
    if method == "minmax":
        return {k: Range(low[k], high[k]) for k in watched if np.isfinite(low[k])}
    # symmetric histogram methods, as calibrate() does them: a second pass bins |x|
    edges = {k: _edges(low[k], high[k], True) for k in watched if np.isfinite(low[k])}
    histograms = {k: np.zeros(BINS, np.int64) for k in edges}
    for values in _observe(mod, samples):
        for key in edges:
            histograms[key] += np.histogram(np.abs(pick(values, key)), bins=edges[key])[0]
    ranges = {}
    for key in edges:
        if method == "percentile":
            ranges[key] = _percentile_range(histograms[key], edges[key], percentile, True, low[key], high[key])
        else:
            threshold = entropy_threshold(histograms[key], edges[key])
            ranges[key] = Range(-threshold, threshold)
    return ranges


def assign_fixed_point(mod: Module, calibration: Iterable[Any], width: int = 16, method: str = "minmax",
                       percentile: float = 99.99, rounding: str = "nearest_even",
                       overflow: str = "saturate") -> Module:
    """The fused `mod` (main calls one primitive Function per kernel) with TENSOR_FORMATS_ATTR on
    every group that has a float input or output (see the module docstring)."""
    if method not in METHODS:
        raise TensorkilnError(f"assign_fixed_point: unknown calibration method {method!r}; use one of "
                              f"{', '.join(METHODS)}")
    if not 2 <= int(width) <= 53:
        raise TensorkilnError(f"assign_fixed_point: width {width} must be 2..53 (values are checked through float64)")
    samples = [as_feeds(mod, s) for s in calibration]
    if not samples:
        raise TensorkilnError("assign_fixed_point needs at least one calibration sample (config 'calibration')")
    ranges = _ranges(mod, samples, method, percentile)

    def range_of(node, index: int = 0) -> Range | None:
        if isinstance(node, TupleGetItem):
            return range_of(node.tuple_value, node.index)
        if isinstance(node, Constant):
            value = np.asarray(node.value, dtype=np.float64)
            return Range(float(value.min()), float(value.max())) if value.size else Range(0.0, 0.0)
        return ranges.get((id(node), index))

    def fmt(tensor_type, calibrated: Range | None) -> FixedPoint | None:
        if not _is_float(tensor_type) or calibrated is None:
            return None
        return format_for_range(calibrated, int(width), rounding, overflow)

    replaced: dict[int, Function] = {}
    for call in _group_calls(mod):
        function = call.op
        formats = [fmt(p.checked_type, range_of(a)) for p, a in zip(function.params, call.args)]
        formats += [fmt(t, range_of(call, i)) for i, t in enumerate(_output_types(function))]
        if any(f is not None for f in formats):
            attrs = {**dict(function.attrs), TENSOR_FORMATS_ATTR: tuple(formats)}
            replaced[id(call)] = dataclasses.replace(function, attrs=attrs)
    if not replaced:
        return mod
    return _with_functions(mod, replaced)


def _with_functions(mod: Module, replaced: dict[int, Function]) -> Module:
    """`mod` with the group calls in `replaced` (by identity of the original call) calling their new
    functions. Keyed by call, not by function: equal groups may share one Function object and still
    get different formats."""
    memo: dict[int, Any] = {}
    body = mod.main.body
    for node in post_order(body):
        rebuilt = with_operands(node, memo, False)
        if id(node) in replaced:
            rebuilt = dataclasses.replace(rebuilt, op=replaced[id(node)])   # keeps span and placement
        memo[id(node)] = rebuilt
    main = dataclasses.replace(mod.main, body=memo[id(body)])
    return Module(tuple((name, main if function is mod.main else function) for name, function in mod))


def fixed_point_reference(mod: Module, inputs: Mapping[str, Any]) -> Any:
    """Run a fused module as its fixed-point kernels do: each group quantises its formatted inputs,
    computes its ops' numpy references in float64, and quantises its formatted outputs. Returns
    float32 arrays like `lib.run`: one array, or a list for several outputs."""
    values: dict[int, Any] = {}
    for param in mod.main.params:
        values[id(param)] = np.asarray(inputs[param.name])
    for node in post_order(mod.main.body):
        if id(node) in values:
            continue
        if isinstance(node, Constant):
            values[id(node)] = node.value
        elif isinstance(node, Call) and isinstance(node.op, Function):
            values[id(node)] = _run_group(node.op, [values[id(a)] for a in node.args])
        elif isinstance(node, Call):
            values[id(node)] = evaluate_call(node, [values[id(a)] for a in node.args])
        elif isinstance(node, Tuple):
            values[id(node)] = tuple(values[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            values[id(node)] = values[id(node.tuple_value)][node.index]
        elif isinstance(node, Var):
            raise TensorkilnError(f"fixed_point_reference: variable %{node.name} has no value")
    result = values[id(mod.main.body)]
    return list(result) if isinstance(result, tuple) else result


def _run_group(function: Function, args: list) -> Any:
    formats = group_formats(function)
    if not formats:
        return _float_group(function, args)
    count = len(function.params)
    exact = [f.quantize(a) if f is not None else a for f, a in zip(formats[:count], args)]
    bound: dict[int, Any] = {id(p): v for p, v in zip(function.params, exact)}
    for node in post_order(function.body):
        if id(node) in bound:
            continue
        if isinstance(node, Constant):
            value = np.asarray(node.value)
            bound[id(node)] = value.astype(np.float64) if value.dtype.kind == "f" else value
        elif isinstance(node, Call):
            with np.errstate(all="ignore"):
                bound[id(node)] = node.op.reference(*(bound[id(a)] for a in node.args), node.attrs)
        elif isinstance(node, Tuple):
            bound[id(node)] = tuple(bound[id(f)] for f in node.fields)
        elif isinstance(node, TupleGetItem):
            bound[id(node)] = bound[id(node.tuple_value)][node.index]
    outputs = _outputs(bound[id(function.body)], function)
    results = []
    for f, value, t in zip(formats[count:], outputs, _output_types(function)):
        value = f.quantize(value) if f is not None else value
        results.append(np.asarray(value).astype(str(t.dtype)))
    return tuple(results) if isinstance(function.ret_type, TupleType) else results[0]


def _float_group(function: Function, args: list) -> Any:
    from ..graph.interpreter import _run
    return _run(function.body, {id(p): v for p, v in zip(function.params, args)})
