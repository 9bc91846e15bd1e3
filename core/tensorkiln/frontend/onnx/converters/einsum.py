"""Einsum as graph ops: per operand, diagonals of repeated letters (where + sum) and a transpose to
one letter order; operands broadcast against each other (reshape with size-1 axes), multiply, and
sum the letters the output lacks. Memory is the product of every letter's extent, so large
contractions (a batched matmul of big matrices) are better written as MatMul."""
from __future__ import annotations

import string

import numpy as np

from ....graph.expr import Constant, Expr
from ....ir.errors import FrontendError
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar


def _parse(node: OnnxNode, equation: str, ranks: list[int]) -> tuple[list[str], str]:
    """Operand and output subscripts with '...' replaced by capital letters (broadcast from the right)."""
    text = equation.replace(" ", "")
    inputs_text, arrow, output = text.partition("->")
    terms = inputs_text.split(",")
    if len(terms) != len(ranks):
        raise FrontendError(f"ONNX node {node.name!r} (Einsum): equation {equation!r} names {len(terms)} "
                            f"operands, the node has {len(ranks)}")
    ellipsis_rank = max((rank - len(term.replace("...", "")) for term, rank in zip(terms, ranks) if "..." in term),
                        default=0)
    spare = string.ascii_uppercase[:ellipsis_rank]
    expanded = []
    for term, rank in zip(terms, ranks):
        if "..." in term:
            term = term.replace("...", spare[ellipsis_rank - (rank - len(term.replace("...", ""))):])
        if len(term) != rank or not all(c in string.ascii_lowercase or c in spare for c in term):
            raise FrontendError(f"ONNX node {node.name!r} (Einsum): subscripts {term!r} do not fit an operand "
                                f"of rank {rank} in {equation!r}")
        expanded.append(term)
    if arrow:
        output = output.replace("...", spare)
    else:
        letters = "".join(expanded)
        output = spare + "".join(sorted(c for c in set(letters) if letters.count(c) == 1 and c not in spare))
    return expanded, output


def _diagonals(node: OnnxNode, value: Expr, term: str) -> tuple[Expr, str]:
    """Take the diagonal over each repeated letter: 'ii' -> 'i'."""
    while len(set(term)) < len(term):
        letter = next(c for c in term if term.count(c) > 1)
        first, second = [k for k, c in enumerate(term) if c == letter][:2]
        size = value.shape[first]
        shape = [1] * len(term)
        shape[first] = shape[second] = size
        eye = Constant(np.eye(size, dtype=bool).reshape(shape))
        value = node.call("sum", node.call("where", eye, value, scalar(0, value.dtype)), axis=(second,))
        term = term[:second] + term[second + 1:]
    return value, term


@converter("Einsum")
def _einsum(node: OnnxNode) -> Expr:
    operands = [node.required(k) for k in range(len(node.inputs))]
    terms, output = _parse(node, node.attr("equation", ""), [len(v.shape) for v in operands])
    letters = "".join(dict.fromkeys("".join(terms) + output))
    sizes = {}
    aligned = []
    for value, term in zip(operands, terms):
        value, term = _diagonals(node, value, term)
        for c, d in zip(term, value.shape):
            if d != 1:
                sizes[c] = d
        order = sorted(range(len(term)), key=lambda k: letters.index(term[k]))
        if order != list(range(len(term))):
            value = node.call("transpose", value, axes=tuple(order))
        present = "".join(term[k] for k in order)
        shape = tuple(value.shape[present.index(c)] if c in present else 1 for c in letters)
        aligned.append(node.call("reshape", value, newshape=shape))
    product = aligned[0]
    for value in aligned[1:]:
        product = node.call("multiply", product, value)
    summed = tuple(k for k, c in enumerate(letters) if c not in output)
    if summed:
        product = node.call("sum", product, axis=summed)
    remaining = "".join(c for c in letters if c in output)
    if remaining != output:
        product = node.call("transpose", product, axes=tuple(remaining.index(c) for c in output))
    full = tuple(sizes.get(c, 1) for c in output)
    if tuple(product.shape) != full:   # letters of size 1 everywhere but broadcast elsewhere
        product = node.call("broadcast_to", product, shape=full)
    return product
