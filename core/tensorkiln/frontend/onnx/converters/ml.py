"""Converters for the ai.onnx.ml domain's numeric ops: Binarizer, ArrayFeatureExtractor. (LabelEncoder
and the other string ops need string tensors, which tensorkiln does not have.)"""
from __future__ import annotations

from ....graph.expr import Expr
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar


@converter("ai.onnx.ml::Binarizer")
def _binarizer(node: OnnxNode) -> Expr:
    data = node.required(0)
    above = node.call("greater", data, scalar(node.attr("threshold", 0.0), data.dtype))
    return node.call("where", above, scalar(1, data.dtype), scalar(0, data.dtype))


@converter("ai.onnx.ml::ArrayFeatureExtractor")
def _array_feature_extractor(node: OnnxNode) -> Expr:
    data, indices = node.required(0), node.required(1)
    if len(data.shape) == 1:   # ONNX ML: a 1-D input gives a (1, k) output
        data = node.call("expand_dims", data, axis=0)
    indices = node.call("reshape", indices, newshape=(-1,))
    return node.call("take", data, indices, axis=len(data.shape) - 1)
