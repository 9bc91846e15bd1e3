"""Converters for ONNX ops of no larger family: CumProd, ScatterElements (and Scatter), ScatterND."""
from __future__ import annotations

from ....graph.expr import Expr
from ..node import OnnxNode
from ._registry import converter


@converter("CumProd")
def _cumprod(node: OnnxNode) -> Expr:
    axis = int(node.const(1, "axis").reshape(-1)[0])
    return node.call("cumprod", node.required(0), axis=axis, exclusive=bool(node.attr("exclusive", 0)),
                     reverse=bool(node.attr("reverse", 0)))


@converter("ScatterElements", "Scatter")
def _scatter_elements(node: OnnxNode) -> Expr:
    return node.call("scatter_elements", node.required(0), node.required(1), node.required(2),
                     axis=int(node.attr("axis", 0)), reduction=node.attr("reduction", "none"))


@converter("ScatterND")
def _scatter_nd(node: OnnxNode) -> Expr:
    return node.call("scatter_nd", node.required(0), node.required(1), node.required(2),
                     reduction=node.attr("reduction", "none"))
