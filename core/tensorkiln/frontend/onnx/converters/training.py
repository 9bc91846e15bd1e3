"""Converters for the ai.onnx.preview.training optimizers: Adagrad, Adam, Momentum.

Each is one optimizer step, elementwise over any number of tensors: the inputs are R (learning
rate), T (step count, int64), then the n tensors X, their n gradients G and n accumulators per
kind (H; V and H; V), and the outputs are the n new X then the new accumulators in the same
order. The step count decides branches (bias correction, the first step's momentum), so they
are `where`s on T > 0, evaluated at run time. Formulas follow onnx's reference
(onnx/reference/ops/aionnx_preview_training), computed in X's dtype.
"""
from __future__ import annotations

from ....graph.expr import Expr
from ....ir.errors import FrontendError
from ..node import OnnxNode
from ._registry import converter
from ._util import scalar


class _Step:
    """The scalar inputs R and T in the dtype of the tensors, and elementwise helpers."""

    def __init__(self, node: OnnxNode, kinds: int):
        self.node = node
        count = len(node.inputs) - 2
        if count <= 0 or count % kinds:
            raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}): {len(node.inputs)} inputs; expected "
                                f"R, T and {kinds} groups of n tensors (X, G{', accumulators' if kinds > 2 else ''})")
        self.n = count // kinds
        self.dtype = node.required(2).dtype
        self.rate = self.cast(node.required(0))
        self.step = node.required(1)
        self.is_later_step = node.call("greater", self.step, scalar(0, self.step.dtype))
        self.step_count = self.cast(self.step)

    def group(self, index: int) -> list[Expr]:
        """The n tensors of input group `index` (0: X, 1: G, 2: the first accumulator, ...)."""
        return [self.node.required(2 + index * self.n + i) for i in range(self.n)]

    def cast(self, value: Expr) -> Expr:
        return value if value.dtype == self.dtype else self.node.call("cast", value, dtype=self.dtype)

    def const(self, value: float) -> Expr:
        return scalar(value, self.dtype)

    def add(self, a, b): return self.node.call("add", a, b)
    def sub(self, a, b): return self.node.call("subtract", a, b)
    def mul(self, a, b): return self.node.call("multiply", a, b)
    def div(self, a, b): return self.node.call("divide", a, b)
    def sqrt(self, a): return self.node.call("sqrt", a)

    def power(self, base: float, exponent: Expr) -> Expr:
        return self.node.call("power", self.const(base), exponent)

    def if_later(self, later: Expr, first: Expr) -> Expr:
        return self.node.call("where", self.is_later_step, later, first)

    def regularized(self, x: Expr, g: Expr) -> Expr:
        """G + norm_coefficient * X: the gradient of the L2 regularization added."""
        return self.add(self.mul(self.const(self.node.attr("norm_coefficient", 0.0)), x), g)


@converter("ai.onnx.preview.training::Adagrad")
def _adagrad(node: OnnxNode) -> tuple[Expr, ...]:
    step = _Step(node, 3)
    decay = step.const(node.attr("decay_factor", 0.0))
    epsilon = step.const(node.attr("epsilon", 0.0))
    rate = step.div(step.rate, step.add(step.const(1.0), step.mul(step.step_count, decay)))
    xs, hs = [], []
    for x, g, h in zip(step.group(0), step.group(1), step.group(2)):
        g = step.regularized(x, g)
        h_new = step.add(h, step.mul(g, g))
        xs.append(step.sub(x, step.div(step.mul(rate, g), step.add(step.sqrt(h_new), epsilon))))
        hs.append(h_new)
    return (*xs, *hs)


@converter("ai.onnx.preview.training::Adam")
def _adam(node: OnnxNode) -> tuple[Expr, ...]:
    step = _Step(node, 4)
    alpha, beta = node.attr("alpha", 0.9), node.attr("beta", 0.999)
    epsilon = step.const(node.attr("epsilon", 0.0))
    keep = step.const(1.0 - node.attr("norm_coefficient_post", 0.0))
    one = step.const(1.0)
    # bias correction from the second step on: R * sqrt(1 - beta^T) / (1 - alpha^T)
    corrected = step.div(step.mul(step.rate, step.sqrt(step.sub(one, step.power(beta, step.step_count)))),
                         step.sub(one, step.power(alpha, step.step_count)))
    rate = step.if_later(corrected, step.rate)
    xs, vs, hs = [], [], []
    for x, g, v, h in zip(step.group(0), step.group(1), step.group(2), step.group(3)):
        g = step.regularized(x, g)
        v_new = step.add(step.mul(step.const(alpha), v), step.mul(step.const(1.0 - alpha), g))
        h_new = step.add(step.mul(step.const(beta), h), step.mul(step.const(1.0 - beta), step.mul(g, g)))
        x_new = step.sub(x, step.mul(rate, step.div(v_new, step.add(step.sqrt(h_new), epsilon))))
        xs.append(step.mul(keep, x_new))
        vs.append(v_new)
        hs.append(h_new)
    return (*xs, *vs, *hs)


@converter("ai.onnx.preview.training::Momentum")
def _momentum(node: OnnxNode) -> tuple[Expr, ...]:
    step = _Step(node, 3)
    mode = node.attr("mode", "standard")
    if mode not in ("standard", "nesterov"):
        raise FrontendError(f"ONNX node {node.name!r} (Momentum): mode={mode!r}; expected 'standard' or 'nesterov'")
    alpha = step.const(node.attr("alpha"))
    # the gradient's coefficient is 1 at the first step (T == 0)
    beta = step.if_later(step.const(node.attr("beta")), step.const(1.0))
    xs, vs = [], []
    for x, g, v in zip(step.group(0), step.group(1), step.group(2)):
        g = step.regularized(x, g)
        v_new = step.add(step.mul(alpha, v), step.mul(beta, g))
        direction = v_new if mode == "standard" else step.add(g, step.mul(alpha, v_new))
        xs.append(step.sub(x, step.mul(step.rate, direction)))
        vs.append(v_new)
    return (*xs, *vs)
