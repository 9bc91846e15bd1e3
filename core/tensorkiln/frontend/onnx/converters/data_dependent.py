"""Ops whose output shape depends on input values: NonZero, Compress, Unique, NonMaxSuppression.

The graph IR has static shapes and the executor runs kernels only, so these are computed with
numpy when their inputs are constants (folding). When an input comes from the graph inputs,
`node.const` raises ValueNotStaticError naming those inputs, and tk.compile's run-time
specialisation (compiler/dynamic.py) imports the model again with their values bound, so the
op folds there: correct for any input, but each new input value costs an import and a compile
(cached per value). Compress needs only its condition constant: it becomes a static gather.
"""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr, Tuple
from ..node import OnnxNode
from ._registry import converter


@converter("NonZero")
def _nonzero(node: OnnxNode) -> Expr:
    data = node.const(0, "the input (the output's length is its count of nonzeros)")
    return Constant(np.array(np.nonzero(np.atleast_1d(data) if data.ndim == 0 else data), dtype=np.int64))


@converter("Compress")
def _compress(node: OnnxNode) -> Expr:
    data = node.required(0)
    condition = np.asarray(node.const(1, "condition (it sets the output's length)")).astype(bool).reshape(-1)
    axis = node.attr("axis")
    if axis is None:
        data = node.call("reshape", data, newshape=(-1,))
        axis = 0
    axis %= len(data.shape)
    kept = np.nonzero(condition[:data.shape[axis]])[0].astype(np.int64)
    return node.call("take", data, Constant(kept), axis=axis)


@converter("Unique")
def _unique(node: OnnxNode) -> Tuple:
    data = np.asarray(node.const(0, "the input (the output's length is its count of distinct values)"))
    axis = node.attr("axis")
    values, first, inverse, counts = np.unique(data, return_index=True, return_inverse=True, return_counts=True,
                                               axis=axis, equal_nan=False) if axis is not None else \
        np.unique(data.reshape(-1), return_index=True, return_inverse=True, return_counts=True)
    if not node.attr("sorted", 1):
        # ONNX's unsorted order: by first occurrence
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        values = np.take(values, order, axis=0 if axis is None else axis)
        first, counts, inverse = first[order], counts[order], rank[inverse.reshape(-1)]
    outputs = (values, first, inverse.reshape(-1), counts)
    return Tuple(tuple(Constant(np.asarray(v) if k == 0 else np.asarray(v, dtype=np.int64))
                       for k, v in enumerate(outputs)))


def _corners(boxes: np.ndarray, center_point_box: int) -> np.ndarray:
    """(y_min, x_min, y_max, x_max) per box, from either corner order or (x_c, y_c, w, h)."""
    if center_point_box:
        xc, yc, w, h = np.moveaxis(boxes.astype(np.float64), -1, 0)
        return np.stack([yc - h / 2, xc - w / 2, yc + h / 2, xc + w / 2], axis=-1)
    y1, x1, y2, x2 = np.moveaxis(boxes.astype(np.float64), -1, 0)
    return np.stack([np.minimum(y1, y2), np.minimum(x1, x2), np.maximum(y1, y2), np.maximum(x1, x2)], axis=-1)


def _overlaps(box: np.ndarray, others: np.ndarray, threshold: float) -> np.ndarray:
    """Whether IoU(box, each of others) > threshold; empty boxes and disjoint pairs never suppress."""
    height = np.minimum(box[2], others[:, 2]) - np.maximum(box[0], others[:, 0])
    width = np.minimum(box[3], others[:, 3]) - np.maximum(box[1], others[:, 1])
    inter = np.where((height > 0) & (width > 0), height * width, 0.0)
    area = (box[2] - box[0]) * (box[3] - box[1])
    areas = (others[:, 2] - others[:, 0]) * (others[:, 3] - others[:, 1])
    union = area + areas - inter
    valid = (inter > 0) & (area > 0) & (areas > 0) & (union > 0)
    with np.errstate(all="ignore"):
        return valid & (inter / np.where(valid, union, 1.0) > threshold)


@converter("NonMaxSuppression")
def _non_max_suppression(node: OnnxNode) -> Expr:
    boxes = _corners(np.asarray(node.const(0, "boxes (they set how many are selected)")),
                     node.attr("center_point_box", 0))
    scores = np.asarray(node.const(1, "scores (they set how many boxes are selected)"))

    def scalar_input(index: int, default):
        value = node.const(index, node.op_type + f" input {index}") if node.input(index) is not None else None
        return default if value is None or np.asarray(value).size == 0 else np.asarray(value).reshape(-1)[0]
    limit = max(int(scalar_input(2, 0)), 0)
    iou, score_floor = float(scalar_input(3, 0.0)), scalar_input(4, None)
    selected = []
    for batch in range(scores.shape[0]):
        for cls in range(scores.shape[1]):
            candidates = np.arange(scores.shape[2])
            if score_floor is not None:
                candidates = candidates[scores[batch, cls] > score_floor]
            # best score first; equal scores keep the lower index first
            order = candidates[np.argsort(-scores[batch, cls, candidates], kind="stable")]
            kept: list[int] = []
            for index in order:
                if len(kept) >= limit:
                    break
                if not kept or not _overlaps(boxes[batch, index], boxes[batch, kept], iou).any():
                    kept.append(int(index))
            selected += [(batch, cls, index) for index in kept]
    return Constant(np.array(selected, dtype=np.int64).reshape(-1, 3))
