"""conformance/op_cases.py: input generators for every graph op the ops level checks.

One entry per registered op name: `OpCase(kinds, make)` where `make(dtype, variant,
rng)` returns an `OpInstance` (named input arrays in call order plus attributes)
for shape variant 0, 1, 2. `kinds` says which element kinds the case is meant
for ("float", "int", "bool"); the target's claimed dtypes of those kinds are
tried, and the op's type rule has the last word. The table is driven by the
registry: `missing_cases()` lists registered ops without an entry, which the kit
reports as "no case" so a new op cannot go unchecked silently.

Value domains keep references finite: `log` gets positive inputs, `acos` values
in (-1, 1), `divide` a nonzero divisor, shifts small amounts.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

__all__ = ["OpInstance", "OpCase", "CASES", "case_for", "missing_cases", "data"]

FLOAT, INT, BOOL = ("float",), ("int",), ("bool",)
NUMERIC = ("float", "int")
ANY = ("float", "int", "bool")


@dataclass(frozen=True)
class OpInstance:
    """One call of an op: inputs (name, array) in argument order, keyword attributes."""

    inputs: tuple[tuple[str, np.ndarray], ...]
    attrs: dict = field(default_factory=dict)


@dataclass(frozen=True)
class OpCase:
    kinds: tuple[str, ...]
    make: Callable[[str, int, np.random.Generator], OpInstance]


def kind_of(dtype: str) -> str:
    return "bool" if dtype == "bool" else "float" if dtype.startswith("float") else "int"


def data(shape: tuple[int, ...], dtype: str, rng: np.random.Generator, domain: str = "any") -> np.ndarray:
    """Random values of `dtype` in `domain`: any, positive, unit, above_one, nonzero, small, shift."""
    from ..ir.dtypes import to_numpy

    np_dtype = to_numpy(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(np_dtype, np.integer):
        unsigned = dtype.startswith("uint")
        if domain == "shift":
            return rng.integers(0, 4, size=shape).astype(np_dtype)
        if domain in ("positive", "above_one"):
            return rng.integers(1, 10, size=shape).astype(np_dtype)
        if domain == "nonzero":
            values = rng.integers(1, 10, size=shape)
            return (values if unsigned else values * rng.choice([-1, 1], size=shape)).astype(np_dtype)
        return rng.integers(0 if unsigned else -10, 10, size=shape).astype(np_dtype)
    if domain == "positive":
        values = rng.uniform(0.5, 3.0, shape)
    elif domain == "unit":
        values = rng.uniform(-0.9, 0.9, shape)
    elif domain == "above_one":
        values = rng.uniform(1.1, 3.0, shape)
    elif domain == "nonzero":
        values = rng.uniform(0.5, 2.0, shape) * rng.choice([-1.0, 1.0], size=shape)
    elif domain in ("small", "shift"):
        values = rng.uniform(-2.0, 2.0, shape)
    else:
        values = rng.standard_normal(shape)
        values = np.where(np.abs(values - np.round(values)) < 0.05, values + 0.1, values)  # no round/floor ties
    return values.astype(np_dtype)


_UNARY_SHAPES = ((7,), (3, 5), (2, 3, 4))
_BINARY_SHAPES = (((7,), (7,)), ((3, 5), (5,)), ((2, 1, 4), (3, 1)))


def _unary(domain: str = "any", **attrs: Any):
    def make(dtype, variant, rng):
        return OpInstance((("x", data(_UNARY_SHAPES[variant], dtype, rng, domain)),), dict(attrs))
    return make


def _binary(lhs_domain: str = "any", rhs_domain: str = "any"):
    def make(dtype, variant, rng):
        lhs, rhs = _BINARY_SHAPES[variant]
        return OpInstance((("lhs", data(lhs, dtype, rng, lhs_domain)), ("rhs", data(rhs, dtype, rng, rhs_domain))))
    return make


def _fixed(*inputs: tuple[str, tuple, str] | tuple[str, tuple, str, str], variants: tuple[dict, ...] = ({},),
           shapes: tuple[tuple, ...] | None = None):
    """Inputs (name, shape, domain[, fixed dtype]) per variant; attrs per variant (repeated when fewer)."""
    def make(dtype, variant, rng):
        specs = shapes[variant % len(shapes)] if shapes is not None else inputs
        arrays = []
        for spec in specs:
            name, shape, domain = spec[:3]
            arrays.append((name, data(shape, spec[3] if len(spec) > 3 else dtype, rng, domain)))
        return OpInstance(tuple(arrays), dict(variants[variant % len(variants)]))
    return make


def _indices(name: str, shape: tuple, high: int):
    def make(rng):
        return (name, rng.integers(0, high, size=shape).astype("int64"))
    return make


def _with_indices(data_shape: tuple, index: Callable, variants: tuple[dict, ...] = ({},), domain: str = "any"):
    def make(dtype, variant, rng):
        return OpInstance((("data", data(data_shape, dtype, rng, domain)), index(variant, rng)),
                          dict(variants[variant % len(variants)]))
    return make


CASES: dict[str, OpCase] = {}


def _register(names: tuple[str, ...] | str, kinds: tuple[str, ...], make: Callable) -> None:
    for name in (names,) if isinstance(names, str) else names:
        CASES[name] = OpCase(kinds, make)


# -- elementwise -----------------------------------------------------------------------------
for _name, _domain in {
    "acos": "unit", "asin": "unit", "atanh": "unit", "tan": "unit", "acosh": "above_one", "log": "positive",
    "sqrt": "positive", "rsqrt": "positive", "exp": "small", "cosh": "small", "sinh": "small",
    "reciprocal": "nonzero", "asinh": "any", "atan": "any", "ceil": "any", "cos": "any", "erf": "any",
    "floor": "any", "round": "any", "sigmoid": "any", "sin": "any", "tanh": "any", "isnan": "any",
    "isinf": "any",
}.items():
    _register(_name, FLOAT, _unary(_domain))
_register(("abs", "negative", "sign", "copy"), NUMERIC, _unary())
_register("logical_not", BOOL, _unary())
_register("bitwise_not", INT, _unary())    # the op's type rule refuses bool (logical_not is its bool twin)
_register(("nn.relu", "nn.gelu", "nn.mish", "nn.softplus", "nn.softsign", "nn.hard_swish", "nn.selu"), FLOAT, _unary())
_register("nn.celu", FLOAT, _unary(alpha=0.7))
_register("nn.elu", FLOAT, _unary(alpha=0.8))
_register("nn.leaky_relu", FLOAT, _unary(alpha=0.1))
_register("nn.thresholded_relu", FLOAT, _unary(alpha=0.3))
_register("nn.hard_sigmoid", FLOAT, _unary(alpha=0.2, beta=0.5))
_register("clip", NUMERIC, _unary(a_min=-0.5, a_max=0.5))
_register(("add", "subtract", "multiply", "maximum", "minimum", "equal", "not_equal", "less", "less_equal",
           "greater", "greater_equal"), NUMERIC, _binary())
_register(("divide", "mod", "fmod"), NUMERIC, _binary(rhs_domain="nonzero"))
_register("power", FLOAT, _binary("positive", "small"))
_register(("logical_and", "logical_or", "logical_xor"), BOOL, _binary())
_register(("bitwise_and", "bitwise_or", "bitwise_xor"), INT + BOOL, _binary())
_register(("left_shift", "right_shift"), INT, _binary("positive", "shift"))


def _cast(dtype, variant, rng):
    to = "int32" if dtype.startswith("float") else "float32"
    return OpInstance((("x", data(_UNARY_SHAPES[variant], dtype, rng, "small")),), {"dtype": to})


_register("cast", ANY, _cast)


def _where(dtype, variant, rng):
    shape = _UNARY_SHAPES[variant]
    return OpInstance((("condition", data(shape, "bool", rng)), ("x", data(shape, dtype, rng)),
                       ("y", data(shape[-1:], dtype, rng))))


_register("where", ANY, _where)
_register("nn.prelu", FLOAT, _fixed(shapes=((("x", (1, 3, 4, 4), "any"), ("alpha", (3, 1, 1), "positive")),
                                            (("x", (2, 2, 3), "any"), ("alpha", (3,), "positive")),
                                            (("x", (1, 4, 2, 5), "any"), ("alpha", (4, 1, 1), "positive")))))
_register("nn.bias_add", NUMERIC, _fixed(shapes=((("x", (2, 3, 4), "any"), ("bias", (3,), "any")),
                                                 (("x", (1, 4, 2, 2), "any"), ("bias", (4,), "any")),
                                                 (("x", (5, 6), "any"), ("bias", (6,), "any")))))

# -- reductions ------------------------------------------------------------------------------
for _name in ("sum", "mean", "max", "min", "prod"):
    _register(_name, NUMERIC if _name != "mean" else FLOAT,
              _fixed(("x", (3, 4, 5), "small" if _name == "prod" else "any"),
                     variants=({"axis": None}, {"axis": (1,), "keepdims": True}, {"axis": (0, 2)})))
for _name in ("argmax", "argmin"):
    _register(_name, NUMERIC, lambda dtype, variant, rng: OpInstance(
        (("x", rng.permutation(60).reshape(3, 4, 5).astype(_np(dtype)) if dtype != "float16" else
          data((3, 4, 5), dtype, rng)),),
        ({"axis": 0}, {"axis": 1, "keepdims": False}, {"axis": 2, "select_last_index": True})[variant]))
_register("cumsum", NUMERIC, _fixed(("x", (3, 4), "small"), variants=(
    {"axis": 0}, {"axis": 1, "exclusive": True}, {"axis": 1, "reverse": True})))


def _np(dtype: str):
    from ..ir.dtypes import to_numpy
    return to_numpy(dtype)


def _topk(dtype, variant, rng):
    values = rng.permutation(36).reshape(3, 12).astype(_np(dtype))
    return OpInstance((("x", values),), ({"k": 2}, {"k": 3, "axis": 0, "largest": False}, {"k": 1})[variant])


_register("topk", NUMERIC, _topk)

# -- tensor manipulation ---------------------------------------------------------------------
_register("reshape", ANY, _fixed(("x", (2, 3, 4), "any"), variants=(
    {"newshape": (6, 4)}, {"newshape": (4, -1)}, {"newshape": (24,)})))
_register("transpose", ANY, _fixed(("x", (2, 3, 4), "any"), variants=(
    {"axes": (2, 0, 1)}, {"axes": None}, {"axes": (0, 2, 1)})))
_register("squeeze", ANY, _fixed(("x", (1, 3, 1, 2), "any"), variants=({"axis": None}, {"axis": (0,)}, {"axis": (2,)})))
_register("expand_dims", ANY, _fixed(("x", (3, 4), "any"), variants=(
    {"axis": 0}, {"axis": 1, "num_newaxis": 2}, {"axis": 2})))
_register("reverse", ANY, _fixed(("x", (3, 4), "any"), variants=({"axis": (0,)}, {"axis": (1,)}, {"axis": (0, 1)})))
_register("tile", ANY, _fixed(("x", (2, 3), "any"), variants=({"reps": (2, 1)}, {"reps": (1, 3)}, {"reps": (3, 2)})))
_register("broadcast_to", ANY, _fixed(("x", (3, 1), "any"), variants=(
    {"shape": (2, 3, 4)}, {"shape": (3, 5)}, {"shape": (1, 3, 2)})))
_register("strided_slice", ANY, _fixed(("x", (5, 6), "any"), variants=(
    {"begin": (1, 0), "end": (4, 6)}, {"begin": (0, 1), "end": (5, 6), "strides": (2, 2)},
    {"begin": (2,), "end": (5,), "axes": (1,)})))
_register("nn.pad", NUMERIC, _fixed(("x", (2, 3), "any"), variants=(
    {"pad_width": ((0, 0), (1, 2))}, {"pad_width": ((1, 1), (2, 0)), "pad_value": 1.5},
    {"pad_width": ((1, 0), (1, 1)), "pad_mode": "edge"})))
_register("shape_of", ANY, _fixed(("x", (2, 3), "any"), variants=({}, {"dtype": "int32"}, {})))
_register("split", ANY, _fixed(("x", (6, 4), "any"), variants=(
    {"indices_or_sections": 2}, {"indices_or_sections": (1, 3)}, {"indices_or_sections": 2, "axis": 1})))


def _concatenate(dtype, variant, rng):
    shapes = (((2, 3), (4, 3)), ((2, 3), (2, 1), (2, 2)), ((1, 2, 2), (1, 2, 2)))[variant]
    axis = (0, 1, 2)[variant]
    return OpInstance(tuple((f"x{i}", data(s, dtype, rng)) for i, s in enumerate(shapes)), {"axis": axis})


_register("concatenate", ANY, _concatenate)
_register("take", ANY, _with_indices((5, 4), lambda v, rng: ("indices", rng.integers(0, 4, size=((3,), (2, 2), (4,))[v]).astype("int64")),
                                     variants=({"axis": 0}, {"axis": 1}, {"axis": 0})))
_register("gather_elements", ANY, _with_indices(
    (3, 4), lambda v, rng: ("indices", rng.integers(0, 3, size=((3, 4), (2, 4), (3, 2))[v]).astype("int64")),
    variants=({"axis": 0}, {"axis": 0}, {"axis": 1})))
_register("gather_nd", ANY, _with_indices(
    (3, 4, 2), lambda v, rng: ("indices", rng.integers(0, 2, size=((2, 2), (3, 1), (2, 3))[v]).astype("int64"))))
_register("layout_transform", ANY, _fixed(("x", (1, 8, 2, 3), "any"), variants=(
    {"src_layout": "NCHW", "dst_layout": "NHWC"}, {"src_layout": "NCHW", "dst_layout": "NCHW4c"},
    {"src_layout": "NHWC", "dst_layout": "NCHW"})))

# -- neural-network ops ----------------------------------------------------------------------
_register("nn.dense", NUMERIC, _fixed(shapes=((("x", (2, 5), "small"), ("weight", (3, 5), "small")),
                                              (("x", (4, 8), "small"), ("weight", (6, 8), "small")),
                                              (("x", (1, 3), "small"), ("weight", (7, 3), "small")))))
_register("nn.matmul", NUMERIC, _fixed(shapes=((("a", (2, 3), "small"), ("b", (3, 4), "small")),
                                               (("a", (2, 2, 3), "small"), ("b", (2, 3, 4), "small")),
                                               (("a", (5, 1), "small"), ("b", (1, 6), "small")))))
# a packed weight (N / n, K, n) with its units: whole blocks, a padded last block, a block of one
_register("nn.dense_pack", FLOAT, _fixed(
    shapes=((("x", (2, 5), "small"), ("weight", (2, 5, 4), "small")),
            (("x", (3, 8), "small"), ("weight", (3, 8, 8), "small")),
            (("x", (2, 3, 6), "small"), ("weight", (5, 6, 1), "small"))),
    variants=({"units": 8}, {"units": 21}, {"units": 5})))
_register("nn.conv2d", FLOAT, _fixed(
    shapes=((("x", (1, 3, 6, 6), "any"), ("weight", (4, 3, 3, 3), "any")),
            (("x", (1, 2, 7, 7), "any"), ("weight", (3, 2, 3, 3), "any")),
            (("x", (1, 4, 5, 5), "any"), ("weight", (4, 2, 3, 3), "any"))),
    variants=({}, {"strides": (2, 2), "padding": (1, 1, 1, 1)}, {"groups": 2, "dilation": (1, 1), "padding": (1, 0, 1, 0)})))
# a transformed weight (a, a, K / nb, C, nb) of F(2x2) (a = 4) and F(4x4) (a = 6); any values are a valid U
_register("nn.conv2d_winograd", FLOAT, _fixed(
    shapes=((("x", (1, 6, 6, 4), "any"), ("weight", (4, 4, 2, 4, 4), "any")),
            (("x", (1, 7, 5, 3), "any"), ("weight", (6, 6, 1, 3, 8), "any")),
            (("x", (2, 5, 6, 2), "any"), ("weight", (4, 4, 3, 2, 2), "any"))),
    variants=({"tile_size": 2}, {"tile_size": 4}, {"tile_size": 2, "padding": (0, 2, 1, 0)})))
_register("nn.conv2d_transpose", FLOAT, _fixed(
    shapes=((("x", (1, 2, 4, 4), "any"), ("weight", (2, 3, 3, 3), "any")),
            (("x", (1, 3, 3, 3), "any"), ("weight", (3, 2, 2, 2), "any")),
            (("x", (1, 2, 3, 4), "any"), ("weight", (2, 2, 3, 3), "any"))),
    variants=({}, {"strides": (2, 2)}, {"padding": (1, 1, 1, 1)})))
_POOL = ({"pool_size": (2, 2), "strides": (2, 2)}, {"pool_size": (3, 3), "padding": (1, 1, 1, 1)},
         {"pool_size": (2, 3), "strides": (1, 2), "ceil_mode": True})
_register("nn.max_pool2d", NUMERIC, _fixed(("x", (1, 2, 6, 6), "any"), variants=_POOL))
_register("nn.avg_pool2d", FLOAT, _fixed(("x", (1, 2, 6, 6), "any"), variants=(
    _POOL[0], {**_POOL[1], "count_include_pad": True}, _POOL[2])))
_register(("nn.global_avg_pool2d", "nn.global_max_pool2d"), FLOAT, _fixed(
    shapes=((("x", (1, 3, 4, 5), "any"),), (("x", (2, 2, 3, 3), "any"),), (("x", (1, 1, 7, 2), "any"),))))
_register(("nn.softmax", "nn.log_softmax"), FLOAT, _fixed(("x", (3, 5), "any"), variants=(
    {"axis": -1}, {"axis": 0}, {"axis": 1})))
_register("nn.batch_norm", FLOAT, _fixed(("x", (1, 3, 4, 4), "any"), ("gamma", (3,), "positive"),
                                         ("beta", (3,), "any"), ("mean", (3,), "any"), ("var", (3,), "positive"),
                                         variants=({}, {"epsilon": 1e-3}, {})))
_register("nn.layer_norm", FLOAT, _fixed(("x", (2, 3, 4), "any"), ("gamma", (4,), "positive"), ("beta", (4,), "any"),
                                         variants=({}, {"epsilon": 1e-3}, {})))
_register("nn.lrn", FLOAT, _fixed(("x", (1, 4, 3, 3), "any"), variants=({"size": 3}, {"size": 5}, {"size": 1})))
_register("image.resize", FLOAT, _fixed(("x", (1, 2, 4, 4), "any"), variants=(
    {"size": (1, 2, 8, 8), "scales": (1.0, 1.0, 2.0, 2.0)},
    {"size": (1, 2, 6, 5), "scales": (1.0, 1.0, 1.5, 1.25), "method": "linear"},
    {"size": (1, 2, 2, 3), "scales": (1.0, 1.0, 0.5, 0.75)})))


# -- ops added for ONNX coverage (issue 18) --------------------------------------------------------
# products of two: a longer running product rounds at every stored stage in bfloat16 (8 mantissa bits),
# the reference once (op tests in tests/onnx_ops cover long axes in float32)
_register("cumprod", NUMERIC, _fixed(("x", (2, 3), "positive"), variants=(
    {"axis": 0}, {"axis": 0, "exclusive": True}, {"axis": 0, "reverse": True})))
_register("image.grid_sample", FLOAT, _fixed(("data", (1, 2, 5, 4), "any"), ("grid", (1, 3, 4, 2), "unit"), variants=(
    {"mode": "linear"}, {"mode": "nearest", "padding_mode": "border", "align_corners": True},
    {"mode": "linear", "padding_mode": "reflection"})))


def _scatter(data_shape: tuple, index_shapes: tuple, update_shapes: tuple, high: int, reductions: tuple):
    """data, in-range indices (no two updates of one element decide a "none" result) and updates."""
    def make(dtype, variant, rng):
        index = rng.integers(0, high, size=index_shapes[variant]).astype("int64")
        return OpInstance((("data", data(data_shape, dtype, rng)), ("indices", index),
                           ("updates", data(update_shapes[variant], dtype, rng))), {"reduction": reductions[variant]})
    return make


_register("scatter_elements", NUMERIC, _scatter((4, 5), ((3, 5), (2, 5), (4, 3)), ((3, 5), (2, 5), (4, 3)), 4,
                                                ("add", "max", "min")))
_register("scatter_nd", NUMERIC, _scatter((4, 3, 2), ((5, 2), (3, 1), (2, 2)), ((5, 2), (3, 3, 2), (2, 2)), 2,
                                          ("max", "min", "max")))   # add rounds per update in bfloat16


def _bitcast(dtype, variant, rng):
    from ..ir.dtypes import dtype_of
    bits = dtype_of(dtype).bits
    return OpInstance((("x", data((3, 4), dtype, rng)),), {"dtype": (f"int{bits}", f"uint{bits}", f"int{bits}")[variant]})


_register("bitcast", FLOAT, _bitcast)
_register("col2im", FLOAT, _fixed(
    shapes=((("x", (1, 6, 9), "any"),), (("x", (2, 4, 6), "any"),), (("x", (1, 2, 20), "any"),)),
    variants=({"image_shape": (4, 5), "block_shape": (2, 3), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0)},
              {"image_shape": (3, 4), "block_shape": (2, 2), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0)},
              {"image_shape": (4, 5), "block_shape": (1, 1), "strides": (1, 1), "dilations": (1, 1), "pads": (0, 0, 0, 0)})))


def _ngram_counts(dtype, variant, rng):
    pool = np.array([[1, 0, 0], [2, 3, 0], [3, 3, 1], [0, 1, 2]], dtype=np.int64)
    lengths = np.array([1, 2, 3, 3], dtype=np.int64)
    tokens = rng.integers(0, 4, (3, 12)).astype(_np(dtype))
    return OpInstance((("tokens", tokens), ("pool", pool.astype(_np(dtype))), ("lengths", lengths)),
                      {"max_skip": (0, 1, 2)[variant]})


_register("ngram_counts", INT, _ngram_counts)

# N-d windows (3-D volumes, 1-D sequences) and the max pool's indices
_POOL_ND = ({"pool_size": (2, 2, 2), "strides": (2, 2, 2), "padding": (0,) * 6, "dilation": (1, 1, 1)},
            {"pool_size": (3, 2, 2), "strides": (1, 2, 1), "padding": (1, 0, 1, 1, 1, 0), "dilation": (1, 1, 2)},
            {"pool_size": (2, 3, 2), "strides": (2, 1, 2), "padding": (0, 1, 0, 0, 1, 0), "dilation": (1, 1, 1),
             "ceil_mode": True})
_register("nn.max_pool", NUMERIC, _fixed(("x", (1, 2, 5, 5, 6), "any"), variants=_POOL_ND))
_register("nn.avg_pool", FLOAT, _fixed(("x", (1, 2, 5, 5, 6), "any"), variants=(
    _POOL_ND[0], {**_POOL_ND[1], "count_include_pad": True}, _POOL_ND[2])))
_register("nn.max_pool_indices", FLOAT, _fixed(("x", (2, 2, 5, 6), "any"), variants=(
    {"pool_size": (2, 2), "strides": (2, 2), "padding": (0, 0, 0, 0), "dilation": (1, 1)},
    {"pool_size": (3, 3), "strides": (1, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "storage_order": 1},
    {"pool_size": (2, 2), "strides": (2, 1), "padding": (0, 0, 1, 0), "dilation": (2, 1), "ceil_mode": True})))
_register("nn.conv_transpose", FLOAT, _fixed(
    shapes=((("x", (1, 2, 3, 3, 2), "any"), ("weight", (2, 3, 2, 2, 2), "any")),
            (("x", (1, 4, 2, 3, 2), "any"), ("weight", (4, 1, 3, 2, 2), "any")),
            (("x", (2, 2, 5), "any"), ("weight", (2, 2, 3), "any"))),
    variants=({"strides": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1), "output_padding": (0, 0, 0)},
              {"strides": (2, 1, 2), "padding": (1, 0, 0, 0, 1, 1), "dilation": (1, 2, 1), "groups": 2,
               "output_padding": (1, 0, 0)},
              {"strides": (2,), "padding": (1, 0), "dilation": (1,), "output_padding": (1,)})))


_register("nn.conv", FLOAT, _fixed(
    shapes=((("x", (1, 3, 4, 5, 4), "any"), ("weight", (4, 3, 2, 3, 2), "any")),
            (("x", (1, 4, 5, 4, 6), "any"), ("weight", (6, 2, 3, 2, 2), "any")),
            (("x", (1, 4, 4, 5, 3), "any"), ("weight", (4, 1, 3, 3, 2), "any"))),
    variants=({"strides": (1, 1, 1), "padding": (0,) * 6, "dilation": (1, 1, 1)},
              {"strides": (2, 1, 2), "padding": (1, 0, 1, 0, 1, 1), "dilation": (1, 2, 1), "groups": 2},
              {"strides": (1, 2, 1), "padding": (1, 1, 0, 1, 1, 1), "dilation": (1, 1, 1), "groups": 4})))


def _roi_align(dtype, variant, rng):
    """Regions partly outside the input too (their samples there weigh 0), one per batch index."""
    corners = rng.uniform(-1.0, 6.0, (3, 2, 2))
    rois = np.concatenate([corners.min(axis=1), corners.max(axis=1)], axis=1)
    attrs = ({"output_height": 2, "output_width": 3},
             {"output_height": 3, "output_width": 2, "mode": "max", "sampling_ratio": 2, "half_pixel": False},
             {"output_height": 2, "output_width": 2, "spatial_scale": 0.5, "sampling_ratio": 0})[variant]
    return OpInstance((("x", data((2, 2, 6, 5), dtype, rng)), ("rois", rois.astype(_np(dtype))),
                       ("batch_indices", np.array([0, 1, 1], dtype=np.int64))), attrs)


_register("image.roi_align", FLOAT, _roi_align)

def case_for(op_name: str) -> OpCase | None:
    """The case of `op_name`, or None when the table has none yet."""
    return CASES.get(op_name)


def missing_cases() -> list[str]:
    """Registered ops without a case (the kit reports each as "no case"); control flow (if, loop, scan)
    is no kernel a target runs, so it has none."""
    from ..graph.ops.control_flow import is_control_flow
    from ..graph.registry import list_ops
    return [op.name for op in list_ops() if op.name not in CASES and not is_control_flow(op)]
