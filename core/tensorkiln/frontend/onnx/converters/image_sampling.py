"""Converters for ONNX sampling ops: GridSample."""
from __future__ import annotations

from ....graph.expr import Expr
from ..node import OnnxNode
from ._registry import converter

_MODES = {"bilinear": "linear", "bicubic": "cubic", "linear": "linear", "cubic": "cubic", "nearest": "nearest"}


@converter("GridSample")
def _grid_sample(node: OnnxNode) -> Expr:
    mode = node.attr("mode", "linear" if node.opset >= 20 else "bilinear")
    if mode not in _MODES:
        raise node.unsupported(f"mode {mode!r}; use one of {', '.join(_MODES)}")
    return node.call("image.grid_sample", node.required(0), node.required(1), mode=_MODES[mode],
                     padding_mode=node.attr("padding_mode", "zeros"),
                     align_corners=bool(node.attr("align_corners", 0)))
