"""ngram_counts: how often each pool n-gram occurs in each row of token ids, the counting step of ONNX
TfIdfVectorizer. An n-gram may skip up to `max_skip` tokens between its items (the same gap between
every pair); a 1-gram counts once whatever the skips; a length of 0 never counts."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...ir.errors import DTypeError, ShapeError
from ..attrs import Attrs
from ..registry import OpPattern, register_op
from ..types import TensorType
from ._rules import shape_text, tensor_args

__all__ = ["NgramAttrs"]


@dataclass(frozen=True, slots=True)
class NgramAttrs(Attrs):
    max_skip: int = 0


def _ngram_type(arg_types, attrs: NgramAttrs) -> TensorType:
    tokens, pool, lengths = tensor_args("ngram_counts", arg_types)
    if tokens.ndim not in (1, 2) or pool.ndim != 2 or lengths.shape != pool.shape[:1]:
        raise ShapeError(f"ngram_counts: tokens {shape_text(tokens.shape)} must be (C,) or (N, C), the pool "
                         f"{shape_text(pool.shape)} (G, max n) and lengths {shape_text(lengths.shape)} (G,)")
    if not all(t.dtype.startswith("int") for t in (tokens, pool, lengths)):
        raise DTypeError(f"ngram_counts: tokens, pool and lengths must be integers, got {tokens.dtype}, "
                         f"{pool.dtype}, {lengths.dtype}")
    return TensorType((*tokens.shape[:-1], pool.shape[0]), "float32")


def _ngram_counts(tokens, pool, lengths, attrs: NgramAttrs):
    rows = np.atleast_2d(tokens)
    counts = np.zeros((rows.shape[0], pool.shape[0]), dtype=np.float32)
    for g, (gram, n) in enumerate(zip(pool, lengths)):
        if n < 1:
            continue   # length 0: an n-gram outside the counted sizes
        for skip in range(attrs.max_skip + 1 if n > 1 else 1):
            span = (n - 1) * (skip + 1) + 1
            for start in range(rows.shape[1] - span + 1):
                window = rows[:, start:start + span:skip + 1]
                counts[:, g] += np.all(window == gram[:n], axis=1)
    return counts.reshape((*tokens.shape[:-1], pool.shape[0]))


register_op("ngram_counts", attrs=NgramAttrs, type_rule=_ngram_type, reference=_ngram_counts,
            pattern=OpPattern.OPAQUE, num_inputs=3,
            doc="Occurrences of each pool n-gram (rows of `pool`, `lengths` items each) in each row of tokens.")
