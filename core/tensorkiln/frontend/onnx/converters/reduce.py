"""Converters for ONNX reductions (ReduceSum, ReduceMean, ..., ReduceL2, ReduceLogSumExp)."""
from __future__ import annotations

from ....graph.expr import Expr
from ..node import OnnxNode
from ._registry import converter
from ._util import ints

_AXES_AS_INPUT_SINCE = {"ReduceSum": 13}  # the others moved axes to an input in opset 18


def _reduce_axes(node: OnnxNode):
    """The axes to reduce (None: all), or () when noop_with_empty_axes leaves the input as is."""
    since = _AXES_AS_INPUT_SINCE.get(node.op_type, 18)
    if node.opset >= since:
        value = node.const(1, "axes")
        axes = None if value is None or value.size == 0 else ints(value)
    else:
        axes = node.attr("axes")
        axes = None if not axes else tuple(axes)
    if axes is None and node.attr("noop_with_empty_axes", 0):
        return ()
    return axes


@converter("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")
def _reduce(node: OnnxNode) -> Expr:
    data = node.required(0)
    axes = _reduce_axes(node)
    keepdims = bool(node.attr("keepdims", 1))
    kind = node.op_type[len("Reduce"):]
    if axes == ():
        pre = {"L1": "abs", "SumSquare": None, "L2": None}.get(kind)
        if kind == "SumSquare":
            return node.call("multiply", data, data)
        if kind == "L2":
            return node.call("abs", data)
        if kind == "LogSum":
            return node.call("log", data)
        if kind == "LogSumExp":
            return data
        return node.call(pre, data) if pre else data

    def reduce(op: str, value: Expr) -> Expr:
        return node.call(op, value, axis=axes, keepdims=keepdims)

    simple = {"Sum": "sum", "Mean": "mean", "Max": "max", "Min": "min", "Prod": "prod"}
    if kind in simple:
        return reduce(simple[kind], data)
    if kind == "L1":
        return reduce("sum", node.call("abs", data))
    if kind == "SumSquare":
        return reduce("sum", node.call("multiply", data, data))
    if kind == "L2":
        return node.call("sqrt", reduce("sum", node.call("multiply", data, data)))
    if kind == "LogSum":
        return node.call("log", reduce("sum", data))
    # LogSumExp, shifted by the max for stability.
    peak = node.call("max", data, axis=axes, keepdims=True)
    summed = node.call("sum", node.call("exp", node.call("subtract", data, peak)), axis=axes, keepdims=keepdims)
    shift = peak if keepdims else node.call("squeeze", peak, axis=tuple(range(data.ndim)) if axes is None else axes)
    return node.call("add", node.call("log", summed), shift)
