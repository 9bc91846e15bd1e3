"""Inputs for tests/ops' per-op numerics tests (test_op_numerics, the conformance kit's cases) of the
ops added for ONNX coverage (issue 18); tests/ops/op_inputs.py merges CASES into its table."""
from __future__ import annotations

import numpy as np

from tensorkiln.graph.ops.bitcast import BitcastAttrs
from tensorkiln.graph.ops.col2im import Col2ImAttrs, block_counts
from tensorkiln.graph.ops.ngram import NgramAttrs
from tensorkiln.graph.ops.sampling import GridSampleAttrs
from tensorkiln.graph.ops.scatter import ScatterElementsAttrs, ScatterNDAttrs
from tensorkiln.graph.ops.tensor import CumsumAttrs


def _case(*args, **kwargs):
    from ..ops.op_inputs import Case   # op_inputs imports this module: import at call time
    return Case(*args, **kwargs)


def _cumprod(rng, size):
    x = rng.uniform(0.5, 1.5, (3, 5) if size == "tiny" else (16, 300)).astype("float32")
    return [_case([x], CumsumAttrs(axis=1), atol=1e-4),
            _case([x], CumsumAttrs(axis=0, exclusive=True, reverse=True), label="exclusive reverse", atol=1e-4)]


def _grid_sample(rng, size):
    data = rng.uniform(-2, 2, (1, 2, 5, 4) if size == "tiny" else (2, 8, 32, 32)).astype("float32")
    grid = rng.uniform(-1.3, 1.3, (data.shape[0], 3, 4, 2) if size == "tiny" else (2, 16, 16, 2)).astype("float32")
    return [_case([data, grid], GridSampleAttrs(mode=mode, padding_mode=padding, align_corners=align),
                  label=f"{mode} {padding} align={align}", atol=1e-4)
            for mode, padding, align in (("linear", "zeros", False), ("nearest", "border", True),
                                         ("cubic", "reflection", False))]


def _scatter_elements(rng, size):
    data = rng.uniform(-2, 2, (4, 5) if size == "tiny" else (64, 128)).astype("float32")
    indices = rng.integers(-4, 4, (3, data.shape[1] - 1))   # repeats and negative indices
    updates = rng.uniform(-2, 2, indices.shape).astype("float32")
    return [_case([data, indices, updates], ScatterElementsAttrs(axis=0, reduction=r), label=r)
            for r in ("none", "add", "mul", "max", "min")]


def _scatter_nd(rng, size):
    data = rng.uniform(-2, 2, (4, 3, 2) if size == "tiny" else (32, 16, 8)).astype("float32")
    indices = rng.integers(-3, 3, (5, 2))
    updates = rng.uniform(-2, 2, (5, data.shape[2])).astype("float32")
    return [_case([data, indices, updates], ScatterNDAttrs(reduction=r), label=r) for r in ("none", "add", "max")]


def _bitcast(rng, size):
    floats = np.array([0.0, -0.0, 1.5, np.inf, -np.inf, np.nan, 1e-45, -3.4e38], dtype="float32")
    return [_case([floats], BitcastAttrs(dtype="int32"), label="float32 -> int32"),
            _case([rng.integers(-128, 128, (3, 4)).astype("int8")], BitcastAttrs(dtype="uint8"), label="int8 -> uint8"),
            _case([rng.integers(0, 2, (5,)).astype(bool)], BitcastAttrs(dtype="uint8"), label="bool -> uint8"),
            _case([rng.integers(-2 ** 62, 2 ** 62, (4,))], BitcastAttrs(dtype="float64"), label="int64 -> float64")]


def _col2im(rng, size):
    out = []
    for attrs in (Col2ImAttrs(image_shape=(5, 6), block_shape=(2, 3), strides=(1, 2), dilations=(2, 1),
                              pads=(1, 0, 2, 1)),
                  Col2ImAttrs(image_shape=(4, 3, 5), block_shape=(2, 1, 2), strides=(2, 1, 1), dilations=(1, 1, 2),
                              pads=(0, 1, 1, 1, 0, 0))):
        volume, blocks = int(np.prod(attrs.block_shape)), int(np.prod(block_counts(attrs)))
        x = rng.uniform(-2, 2, (2, 3 * volume, blocks)).astype("float32")
        out.append(_case([x], attrs, label=f"{len(attrs.image_shape)}-D", atol=1e-5))
    return out


def _ngram_counts(rng, size):
    tokens = rng.integers(0, 4, (3, 12) if size == "tiny" else (64, 256)).astype("int32")
    pool = np.array([[1, 0, 0], [2, 3, 0], [3, 3, 1], [0, 1, 2], [2, 2, 2]], dtype=np.int64)
    lengths = np.array([1, 2, 3, 3, 0], dtype=np.int64)
    return [_case([tokens, pool, lengths], NgramAttrs(max_skip=skip), label=f"skip {skip}") for skip in (0, 2)]


CASES = {"cumprod": _cumprod, "bitcast": _bitcast, "col2im": _col2im, "ngram_counts": _ngram_counts, "image.grid_sample": _grid_sample, "scatter_elements": _scatter_elements,
         "scatter_nd": _scatter_nd}

from .op_cases_windows import CASES as _WINDOW_CASES  # noqa: E402  (N-d windows, RoiAlign)

CASES.update(_WINDOW_CASES)
