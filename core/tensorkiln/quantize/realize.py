"""quantize/realize.py: post-training INT8 quantization of a float graph.

    qmod = tk.quantize.quantize(mod, calibration_inputs, method="entropy")
    lib = tk.compile(qmod, "cpu_llvm")

1. The graph is simplified as the compiler would (batch norms fold into the conv weights).
2. Every nn.conv2d (NCHW) and nn.dense with a constant float32 weight is an *anchor*: its
   weight becomes int8, symmetric per output channel (scale = max |w| / 127), and its data
   input is calibrated (`calibrate.py`) and quantized per tensor: symmetric int8 or
   asymmetric uint8 with a zero point.
3. The anchor then reads `dequantize(quantize(x))` and `dequantize(int8 weight)`: the QDQ form
   the ONNX importer also produces, which the compiler's `fold_qdq` pass turns into an
   int8 x int8 -> int32 conv / dense with the requantization in the epilogue.

Everything else runs in float between a dequantize and the next quantize: the fallback for
ops without an int8 kernel. `QuantizedModel.pairs` keeps each float anchor beside its
quantized twin, for the per-layer error report.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterable

import numpy as np

from ..graph import Call, Constant, Expr, Function, Module, Op, Tuple, TupleGetItem, post_order
from ..graph import call as graph_call
from ..ir.errors import TensorkilnError
from ..passes import PassContext, PassManager
from ..passes.fold_qdq import QUANTIZED_RANGES, dequantize, quantize as quantize_expr
from .calibrate import Range, calibrate

__all__ = ["QuantizeConfig", "QuantizedModel", "quantize", "prepare", "anchors_of", "weight_scales",
           "activation_params"]

# What the compiler would run before fusion, minus layout and mixed precision: BN folds into the convs.
_PREPARE = ("simplify_inference", "fold_constants", "fold_scale_axis", "eliminate_dead_code",
            "eliminate_common_subexpr", "fold_constants")


@dataclass(frozen=True)
class QuantizeConfig:
    """How to quantize: calibration `method` ("minmax", "percentile", "entropy"), `activations`
    "symmetric" (int8, zero point 0) or "asymmetric" (uint8 with a zero point), the percentile
    of the "percentile" method, and the target calibration runs on."""

    method: str = "minmax"
    activations: str = "symmetric"
    percentile: float = 99.99
    target: str = "cpu_llvm"

    def __post_init__(self) -> None:
        if self.activations not in ("symmetric", "asymmetric"):
            raise TensorkilnError(f"activations must be 'symmetric' or 'asymmetric', got {self.activations!r}")


@dataclass(frozen=True)
class QuantizedModel:
    """The QDQ graph (`module`), the simplified float graph it came from (`float_module`) and, per
    anchor, (float anchor, quantized anchor) in graph order."""

    module: Module
    float_module: Module
    pairs: tuple[tuple[Call, Call], ...] = field(default=())
    ranges: tuple[Range, ...] = field(default=())


def prepare(mod: Module) -> Module:
    """`mod` simplified as the compiler would before quantizing (batch norms folded into weights)."""
    return PassManager(PassContext(opt_level=2)).run(mod, _PREPARE)


def anchors_of(mod: Module) -> list[Call]:
    """The convs (NCHW) and dense layers with constant float32 weights, in graph order."""
    found = []
    for node in post_order(mod.main.body):
        if not (isinstance(node, Call) and isinstance(node.op, Op)) or node.dtype != "float32":
            continue
        weight = node.args[1] if len(node.args) > 1 else None
        if not isinstance(weight, Constant) or weight.dtype != "float32":
            continue
        if node.op.name == "nn.conv2d" and (node.attrs.data_layout, node.attrs.kernel_layout) == ("NCHW", "OIHW"):
            found.append(node)
        elif node.op.name == "nn.dense" and weight.ndim == 2:
            found.append(node)
    return found


def weight_scales(weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(int8 weight, float32 scale per output channel): symmetric, in [-127, 127] (axis 0 of OIHW / NK)."""
    flat = np.abs(weight.reshape(weight.shape[0], -1)).max(axis=1).astype(np.float64)
    scale = np.where(flat > 0, flat / 127.0, 1.0)
    shape = (-1,) + (1,) * (weight.ndim - 1)
    quantized = np.clip(np.rint(weight / scale.reshape(shape)), -127, 127).astype(np.int8)
    return quantized, scale.astype(np.float32)


def activation_params(calibrated: Range, symmetric: bool) -> tuple[float, int, str]:
    """(scale, zero point, dtype) of an activation whose calibrated range is `calibrated`."""
    low, high = min(calibrated.low, 0.0), max(calibrated.high, 0.0)
    if symmetric:
        top = max(-low, high)
        return (top / 127.0 if top > 0 else 1.0), 0, "int8"
    qmin, qmax = QUANTIZED_RANGES["uint8"]
    scale = (high - low) / (qmax - qmin) if high > low else 1.0
    zero = int(np.clip(np.rint(qmin - low / scale), qmin, qmax))
    return scale, zero, "uint8"


def quantize(model: Any, calibration: Iterable[Any], config: QuantizeConfig | None = None, **options) -> QuantizedModel:
    """Post-training quantization of `model` (graph Module, ONNX model or path) calibrated on the inputs of
    `calibration` (arrays, sequences or dicts per sample); `options` are QuantizeConfig fields."""
    from ..compiler.driver import as_module

    config = config or QuantizeConfig(**options)
    float_module = prepare(as_module(model))
    anchors = anchors_of(float_module)
    if not anchors:
        raise TensorkilnError("nothing to quantize: the model has no conv2d or dense with a constant float32 weight")
    inputs = list(dict.fromkeys(a.args[0] for a in anchors))   # a tensor feeding several anchors is one entry
    symmetric = config.activations == "symmetric"
    ranges = calibrate(float_module, inputs, calibration, config.method, symmetric, config.percentile, config.target)
    params = {id(x): activation_params(r, symmetric) for x, r in zip(inputs, ranges)}
    rewriter = _Rewriter(params, {id(a) for a in anchors})
    module = rewriter.run(float_module)
    pairs = tuple((a, rewriter.rebuilt[id(a)]) for a in anchors)
    return QuantizedModel(module, float_module, pairs, tuple(ranges))


class _Rewriter:
    """Rebuilds the graph bottom-up, the anchors reading dequantize(quantize(x)) and an int8 weight."""

    def __init__(self, params: dict[int, tuple[float, int, str]], anchors: set[int]) -> None:
        self.params, self.anchors = params, anchors
        self.rebuilt: dict[int, Expr] = {}
        self.fake_quantized: dict[int, Expr] = {}   # id(original input) -> its shared Q/DQ pair

    def run(self, mod: Module) -> Module:
        for node in post_order(mod.main.body):
            self.rebuilt[id(node)] = self._visit(node)
        main = mod.main
        return mod.with_function("main", Function(main.params, self.rebuilt[id(main.body)], main.attrs))

    def _qdq(self, original: Expr) -> Expr:
        if id(original) not in self.fake_quantized:
            scale, zero, dtype = self.params[id(original)]
            value = self.rebuilt[id(original)]
            scale_c = Constant(np.float32(scale))
            zero_c = Constant(np.asarray(zero, dtype=dtype))
            self.fake_quantized[id(original)] = dequantize(quantize_expr(value, scale_c, zero_c, dtype), scale_c, zero_c)
        return self.fake_quantized[id(original)]

    def _visit(self, node: Expr) -> Expr:
        if isinstance(node, Call) and id(node) in self.anchors:
            values, scale = weight_scales(node.args[1].value)
            weight = dequantize(Constant(values), Constant(scale), Constant(np.zeros(scale.shape, np.int8)), axis=0)
            return graph_call(node.op.name, self._qdq(node.args[0]), weight, attrs=node.attrs, span=node.span)
        if isinstance(node, Call):
            return dataclasses.replace(node, args=tuple(self.rebuilt[id(a)] for a in node.args))
        if isinstance(node, Tuple):
            return Tuple(tuple(self.rebuilt[id(f)] for f in node.fields))
        if isinstance(node, TupleGetItem):
            return TupleGetItem(self.rebuilt[id(node.tuple_value)], node.index)
        return node
