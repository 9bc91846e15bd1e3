"""Converters for ONNX ops of no larger family: CumProd, ScatterElements (and Scatter), ScatterND, LpPool, BitCast, Col2Im, Det, TfIdfVectorizer."""
from __future__ import annotations

import dataclasses

import numpy as np

from ....graph.expr import Constant, Expr
from ..node import OnnxNode
from ._registry import converter
from ._util import onnx_dtype, scalar
from .nn import _pool


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


@converter("LpPool")
def _lp_pool(node: OnnxNode) -> Expr:
    """(sum over the window of |x|^p)^(1/p): an average pool that counts the padding, times the
    window's size (padding contributes 0, as in ONNX)."""
    data = node.required(0)
    p = float(node.attr("p", 2))
    if p <= 0:
        raise node.unsupported(f"p={p} must be positive")
    magnitude = node.call("abs", data)
    powered = magnitude if p == 1 else node.call("power", magnitude, scalar(p, data.dtype))
    pooled = _pool(dataclasses.replace(node, inputs=[powered]), "nn.avg_pool2d", count_include_pad=True)
    window = float(np.prod(node.attr("kernel_shape")))
    total = node.call("multiply", pooled, scalar(window, data.dtype))
    return total if p == 1 else node.call("power", total, scalar(1.0 / p, data.dtype))


@converter("BitCast")
def _bitcast(node: OnnxNode) -> Expr:
    return node.call("bitcast", node.required(0), dtype=onnx_dtype(node.attr("to"), node))


@converter("Col2Im")
def _col2im(node: OnnxNode) -> Expr:
    image = node.const_ints(1, "image_shape")
    block = node.const_ints(2, "block_shape")
    rank = len(image)
    return node.call("col2im", node.required(0), image_shape=image, block_shape=block,
                     strides=tuple(node.attr("strides", [1] * rank)), dilations=tuple(node.attr("dilations", [1] * rank)),
                     pads=tuple(node.attr("pads", [0] * (2 * rank))))


_DET_MAX_SIZE = 8


@converter("Det")
def _det(node: OnnxNode) -> Expr:
    """Laplace expansion along the rows, each minor (a set of columns of the last rows) computed once:
    2^n minors of n terms. Exact for the small matrices models carry (n <= 8); larger ones would
    want an LU kernel."""
    data = node.required(0)
    rank, n = len(data.shape), data.shape[-1]
    if rank < 2 or data.shape[-2] != n:
        raise node.unsupported(f"the input {tuple(data.shape)} must end in a square matrix")
    if n > _DET_MAX_SIZE:
        raise node.unsupported(f"{n}x{n} matrices: the expansion is built for n <= {_DET_MAX_SIZE}")

    def element(i: int, j: int) -> Expr:
        entry = node.call("strided_slice", data, begin=(i, j), end=(i + 1, j + 1), axes=(rank - 2, rank - 1))
        return node.call("squeeze", entry, axis=(rank - 2, rank - 1))
    entries = [[element(i, j) for j in range(n)] for i in range(n)]
    minors: dict[tuple[int, ...], Expr] = {}

    def minor(columns: tuple[int, ...]) -> Expr:
        """Determinant of the last len(columns) rows restricted to `columns`."""
        if columns not in minors:
            row = n - len(columns)
            if len(columns) == 1:
                minors[columns] = entries[row][columns[0]]
            else:
                total = None
                for k, column in enumerate(columns):
                    term = node.call("multiply", entries[row][column], minor(columns[:k] + columns[k + 1:]))
                    total = term if total is None else node.call("subtract" if k % 2 else "add", total, term)
                minors[columns] = total
        return minors[columns]
    return minor(tuple(range(n)))


@converter("TfIdfVectorizer")
def _tfidf_vectorizer(node: OnnxNode) -> Expr:
    """Count the pool's n-grams (graph op ngram_counts), place each count at its output index, weight."""
    tokens = node.required(0)
    if node.attr("pool_strings") is not None:
        raise node.unsupported("string pools (pool_strings): tensorkiln has no string tensors")
    pool = list(node.attr("pool_int64s", []))
    starts = list(node.attr("ngram_counts", [])) + [len(pool)]
    low, high = node.attr("min_gram_length", 1), node.attr("max_gram_length", 1)
    grams, lengths = [], []
    for size, (begin, end) in enumerate(zip(starts[:-1], starts[1:]), start=1):
        for offset in range(begin, end, size):
            grams.append(pool[offset:offset + size] + [0] * (high - size))
            lengths.append(size if low <= size <= high else 0)   # length 0 never matches: outside the range
    indexes = list(node.attr("ngram_indexes", []))
    width = max(indexes) + 1 if indexes else 0
    counts = node.call("ngram_counts", tokens, Constant(np.array(grams, dtype=np.int64).reshape(len(grams), high)),
                       Constant(np.array(lengths, dtype=np.int64)), max_skip=int(node.attr("max_skip_count", 0)))
    # output j reads pool n-gram source[j], or a zero column appended at the end
    source = np.full(width, len(grams), dtype=np.int64)
    source[np.array(indexes, dtype=np.int64)] = np.arange(len(indexes))
    zero = node.call("broadcast_to", scalar(0.0, "float32"), shape=(*counts.shape[:-1], 1))
    counts = node.call("take", node.call("concatenate", counts, zero, axis=len(counts.shape) - 1), Constant(source),
                       axis=len(counts.shape) - 1)
    weights = node.attr("weights")
    mode = node.attr("mode", "TF")
    if mode == "TF" or (weights is None and mode == "TFIDF"):
        return counts
    weight = np.zeros(width, dtype=np.float32)
    weight[np.array(indexes, dtype=np.int64)] = weights if weights is not None else 1.0
    if mode == "IDF":
        return node.call("where", node.call("greater", counts, scalar(0.0, "float32")), Constant(weight),
                         scalar(0.0, "float32"))
    return node.call("multiply", counts, Constant(weight))
