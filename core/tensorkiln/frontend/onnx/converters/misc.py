"""Converters for ONNX ops of no larger family: CumProd, BitCast."""
from __future__ import annotations

from ....graph.expr import Expr
from ..node import OnnxNode
from ._registry import converter


@converter("CumProd")
def _cumprod(node: OnnxNode) -> Expr:
    axis = int(node.const(1, "axis").reshape(-1)[0])
    return node.call("cumprod", node.required(0), axis=axis, exclusive=bool(node.attr("exclusive", 0)),
                     reverse=bool(node.attr("reverse", 0)))
