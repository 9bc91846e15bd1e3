"""RNN, LSTM and GRU: a loop over time around a fused cell.

The input projection of every time step is one GEMM up front (X times W, plus the
biases that do not depend on the state). The cell (the state's GEMM with R and the
gate math, which fusion makes one elementwise kernel) then runs once per step:

- unrolled, when the sequence is at most `UNROLL_LIMIT` steps (faster to run, slower to compile): each step's kernels are
  structurally equal, so the compiler builds them once and the executor launches them
  with no host loop in between;
- otherwise as a `scan` over time whose body is the cell, compiled once and run by the
  executor per step (graph/ops/control_flow.py).

Directions (forward, reverse, bidirectional), activations with their alpha/beta, clip,
sequence lengths, initial states, peepholes, LSTM's input_forget, GRU's
linear_before_reset and the layout attribute follow the ONNX spec. With sequence
lengths, a step past a batch row's length keeps that row's state and writes zeros to
Y; the reverse direction reverses each row's own prefix (a gather), as ONNX does.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ....graph.expr import Constant, Expr, Function, Tuple, TupleGetItem, Var
from ....graph.types import TensorType
from ....ir.dtypes import to_numpy
from ....ir.errors import FrontendError
from ..node import OnnxNode
from ._registry import converter

UNROLL_LIMIT = 32
"""Sequences up to this length are unrolled; longer ones run as a scan over a compiled cell.

Unrolled runs faster (no host loop; measured on the 2-core CI-like host, LSTM hidden 32, batch 1,
best of 30: 16 steps 0.46 ms unrolled vs 0.77 ms as a scan; 64 steps 4.5 ms vs 24 ms), but its
compile time grows with the length (64 steps: 7.6 s vs 1.4 s), which this limit bounds."""

_GATES = {"RNN": 1, "LSTM": 4, "GRU": 3}
_DEFAULT_ACTIVATIONS = {"RNN": ("Tanh",), "LSTM": ("Sigmoid", "Tanh", "Tanh"), "GRU": ("Sigmoid", "Tanh")}
# (uses alpha, uses beta, default alpha, default beta) per activation
_ACTIVATION_PARAMS = {
    "relu": (False, False, 0.0, 0.0), "tanh": (False, False, 0.0, 0.0), "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0), "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0), "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5), "elu": (True, False, 1.0, 0.0), "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}


class _Builder:
    """Graph calls named after the ONNX node (constant arguments fold), with scalar helpers."""

    def __init__(self, node: OnnxNode, dtype: str) -> None:
        self.node = node
        self.dtype = dtype

    def __call__(self, op: str, *args: Expr, **attrs) -> Expr:
        return self.node.call(op, *args, **attrs)

    def scalar(self, value: float) -> Constant:
        return Constant(np.array(value, to_numpy(self.dtype)))

    def item(self, value: Expr, index: int) -> Expr:
        return value.fields[index] if hasattr(value, "fields") else TupleGetItem(value, index)

    def split(self, value: Expr, parts: int, axis: int) -> list[Expr]:
        if parts == 1:
            return [value]
        result = self("split", value, indices_or_sections=parts, axis=axis)
        return [self.item(result, i) for i in range(parts)]

    def gates(self, value: Expr, parts: int) -> list[Expr]:
        """The `parts` equal column blocks of a (batch, parts*H) gate tensor, as slices: unlike one
        split (a kernel of its own), each slice fuses into the gate math that reads it."""
        width = value.shape[1] // parts
        return [self("strided_slice", value, begin=(k * width,), end=((k + 1) * width,), axes=(1,))
                for k in range(parts)]

    def row(self, value: Expr, index: int) -> Expr:
        """value[index] along axis 0, that axis dropped."""
        rest = value.shape[1:]
        sliced = self("strided_slice", value, begin=(index,), end=(index + 1,), axes=(0,))
        return self("reshape", sliced, newshape=rest)


def _activation(b: _Builder, name: str, alpha: float, beta: float) -> Callable[[Expr], Expr]:
    kind = name.lower()
    zero, one = b.scalar(0.0), b.scalar(1.0)
    if kind == "relu":
        return lambda x: b("maximum", x, zero)
    if kind == "tanh":
        return lambda x: b("tanh", x)
    if kind == "sigmoid":
        return lambda x: b("sigmoid", x)
    if kind == "affine":
        return lambda x: b("add", b("multiply", x, b.scalar(alpha)), b.scalar(beta))
    if kind == "leakyrelu":
        return lambda x: b("add", b("maximum", x, zero), b("multiply", b("minimum", x, zero), b.scalar(alpha)))
    if kind == "thresholdedrelu":
        return lambda x: b("where", b("greater", x, b.scalar(alpha)), x, b("multiply", x, zero))
    if kind == "scaledtanh":
        return lambda x: b("multiply", b("tanh", b("multiply", x, b.scalar(beta))), b.scalar(alpha))
    if kind == "hardsigmoid":
        return lambda x: b("maximum", b("minimum", b("add", b("multiply", x, b.scalar(alpha)), b.scalar(beta)),
                                        one), zero)
    if kind == "elu":
        return lambda x: b("add", b("maximum", x, zero),
                           b("multiply", b("subtract", b("exp", b("minimum", x, zero)), one), b.scalar(alpha)))
    if kind == "softsign":
        return lambda x: b("divide", x, b("add", b("abs", x), one))
    if kind == "softplus":  # max(x, 0) + log(1 + exp(-|x|)): no overflow for large x
        return lambda x: b("add", b("maximum", x, zero), b("log", b("add", b("exp", b("negative", b("abs", x))), one)))
    raise b.node.unsupported(f"activation {name!r} is not one of RNN's activations "
                             f"({', '.join(sorted(_ACTIVATION_PARAMS))})")


def _activations(node: OnnxNode, b: _Builder, per_direction: int, directions: int) -> list[list[Callable]]:
    names = list(node.attr("activations", [])) or list(_DEFAULT_ACTIVATIONS[node.op_type]) * directions
    if len(names) == per_direction and directions == 2:
        names = names * 2
    if len(names) != per_direction * directions:
        raise FrontendError(f"ONNX node {node.name!r} ({node.op_type}): activations {names} must name "
                            f"{per_direction} function(s) per direction ({directions} direction(s))")
    alphas = list(node.attr("activation_alpha", []))
    betas = list(node.attr("activation_beta", []))
    functions = []
    for name in names:
        uses_alpha, uses_beta, alpha, beta = _ACTIVATION_PARAMS.get(name.lower(), (False, False, 0.0, 0.0))
        if uses_alpha and alphas:   # consumed in the order of the activations that take one
            alpha = float(alphas.pop(0))
        if uses_beta and betas:
            beta = float(betas.pop(0))
        functions.append(_activation(b, name, alpha, beta))
    return [functions[d * per_direction:(d + 1) * per_direction] for d in range(directions)]


@dataclass
class _Direction:
    """What one direction's cell reads besides the step's input and state."""

    recurrence: Expr            # R (gates*H, H)
    recurrence_bias: Expr | None   # added to state @ R^T inside the cell (GRU), else None
    peepholes: list[Expr] | None  # LSTM: p_i, p_o, p_f, each (H,)
    activations: list[Callable]


class _Cell:
    """One step of RNN, LSTM or GRU: (projected input, h, c, mask) -> (h, c, y)."""

    def __init__(self, node: OnnxNode, b: _Builder, hidden: int) -> None:
        self.node, self.b, self.hidden = node, b, hidden
        self.kind = node.op_type
        clip = node.attr("clip")
        self.clip = None if clip is None else float(clip)
        self.input_forget = bool(node.attr("input_forget", 0))
        self.linear_before_reset = bool(node.attr("linear_before_reset", 0))

    def _clip(self, x: Expr) -> Expr:
        return x if self.clip is None else self.b("clip", x, a_min=-self.clip, a_max=self.clip)

    def step(self, d: _Direction, x: Expr, h: Expr, c: Expr | None, mask: Expr | None):
        b, f = self.b, d.activations
        if self.kind == "RNN":
            new_h, new_c = f[0](self._clip(b("add", x, b("nn.dense", h, d.recurrence)))), None
        elif self.kind == "LSTM":
            new_h, new_c = self._lstm(d, x, h, c)
        else:
            new_h, new_c = self._gru(d, x, h)
        if mask is not None:   # rows past their sequence length keep their state and write zeros
            new_h = b("where", mask, new_h, h)
            new_c = None if new_c is None else b("where", mask, new_c, c)
            y = b("where", mask, new_h, Constant(np.zeros(h.shape, to_numpy(b.dtype))))
        else:
            y = new_h
        return new_h, new_c, y

    def _lstm(self, d: _Direction, x: Expr, h: Expr, c: Expr):
        b, (f, g, act_h) = self.b, d.activations
        gates = b("add", x, b("nn.dense", h, d.recurrence))
        i, o, fg, cg = b.gates(gates, 4)
        if d.peepholes is not None:
            p_i, p_o, p_f = d.peepholes
            i = b("add", i, b("multiply", c, p_i))
            fg = b("add", fg, b("multiply", c, p_f))
        i = f(self._clip(i))
        if self.input_forget:
            fg = b("subtract", b.scalar(1.0), i)
        else:
            fg = f(self._clip(fg))
        new_c = b("add", b("multiply", fg, c), b("multiply", i, g(self._clip(cg))))
        if d.peepholes is not None:
            o = b("add", o, b("multiply", new_c, d.peepholes[1]))
        o = f(self._clip(o))
        return b("multiply", o, act_h(new_c)), new_c

    def _gru(self, d: _Direction, x: Expr, h: Expr):
        b, (f, g) = self.b, d.activations
        xz, xr, xh = b.gates(x, 3)
        r_zr, r_h = _split_rows(b, d.recurrence, self.hidden)
        rb_zr, rb_h = _split_rows(b, d.recurrence_bias, self.hidden)
        hz, hr = b.gates(b("add", b("nn.dense", h, r_zr), rb_zr), 2)
        z = f(self._clip(b("add", xz, hz)))
        r = f(self._clip(b("add", xr, hr)))
        if self.linear_before_reset:
            candidate = b("add", xh, b("multiply", r, b("add", b("nn.dense", h, r_h), rb_h)))
        else:
            candidate = b("add", b("add", xh, b("nn.dense", b("multiply", r, h), r_h)), rb_h)
        hh = g(self._clip(candidate))
        one_minus_z = b("subtract", b.scalar(1.0), z)
        return b("add", b("multiply", one_minus_z, hh), b("multiply", z, h)), None


def _split_rows(b: _Builder, value: Expr, hidden: int) -> tuple[Expr, Expr]:
    """(the first 2*hidden rows, the rest) of a GRU weight or bias (z and r gates, then h)."""
    first = b("strided_slice", value, begin=(0,), end=(2 * hidden,), axes=(0,))
    rest = b("strided_slice", value, begin=(2 * hidden,), end=(3 * hidden,), axes=(0,))
    return first, rest


@converter("RNN", "LSTM", "GRU")
def convert_recurrent(node: OnnxNode):
    kind = node.op_type
    gates = _GATES[kind]
    x, w, r = node.required(0), node.required(1), node.required(2)
    bias, lengths, initial_h = node.input(3), node.input(4), node.input(5)
    initial_c = node.input(6) if kind == "LSTM" else None
    peepholes = node.input(7) if kind == "LSTM" else None
    layout = int(node.attr("layout", 0))
    direction = node.attr("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise FrontendError(f"ONNX node {node.name!r} ({kind}): direction {direction!r} must be forward, "
                            "reverse or bidirectional")
    directions = 2 if direction == "bidirectional" else 1
    b = _Builder(node, x.dtype)
    if layout:
        x = b("transpose", x, axes=(1, 0, 2))
        initial_h = None if initial_h is None else b("transpose", initial_h, axes=(1, 0, 2))
        initial_c = None if initial_c is None else b("transpose", initial_c, axes=(1, 0, 2))
    if x.ndim != 3 or w.ndim != 3 or r.ndim != 3:
        raise FrontendError(f"ONNX node {node.name!r} ({kind}): X, W and R must be 3-D, got {x.shape}, "
                            f"{w.shape}, {r.shape}")
    steps, batch, _ = x.shape
    hidden = int(node.attr("hidden_size", r.shape[-1]))
    if w.shape[0] != directions or w.shape[1] != gates * hidden or r.shape != (directions, gates * hidden, hidden):
        raise FrontendError(f"ONNX node {node.name!r} ({kind}): W {w.shape} and R {r.shape} do not fit "
                            f"{directions} direction(s), {gates} gate(s) and hidden_size {hidden}")
    if bias is None:
        bias = Constant(np.zeros((directions, 2 * gates * hidden), to_numpy(x.dtype)))
    zeros_state = Constant(np.zeros((directions, batch, hidden), to_numpy(x.dtype)))
    initial_h = zeros_state if initial_h is None else initial_h
    initial_c = zeros_state if initial_c is None else initial_c
    activations = _activations(node, b, len(_DEFAULT_ACTIVATIONS[kind]), directions)
    cell = _Cell(node, b, hidden)
    mask = None if lengths is None else _step_mask(b, lengths, steps, batch)
    outputs_y, outputs_h, outputs_c = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        w_bias, r_bias = b.split(b.row(bias, d), 2, axis=0)
        projected_bias = w_bias if kind == "GRU" else b("add", w_bias, r_bias)
        inputs = x if not (reverse and lengths is not None) else _reverse_prefixes(b, x, lengths)
        projected = b("add", b("nn.dense", inputs, b.row(w, d)), projected_bias)   # (T, B, gates*H)
        peep = None
        if peepholes is not None:
            peep = b.split(b.row(peepholes, d), 3, axis=0)
        info = _Direction(b.row(r, d), r_bias if kind == "GRU" else None, peep, activations[d])
        # with lengths, a reversed direction already runs forward over reversed prefixes
        backwards = reverse and lengths is None
        run = _unrolled if steps <= UNROLL_LIMIT else _scanned
        y, h, c = run(cell, info, projected, b.row(initial_h, d), b.row(initial_c, d) if kind == "LSTM" else None,
                      mask, backwards)
        if reverse and lengths is not None:
            y = _reverse_prefixes(b, y, lengths)
        outputs_y.append(b("expand_dims", y, axis=1))
        outputs_h.append(b("expand_dims", h, axis=0))
        if c is not None:
            outputs_c.append(b("expand_dims", c, axis=0))
    y = outputs_y[0] if directions == 1 else b("concatenate", *outputs_y, axis=1)   # (T, D, B, H)
    y_h = outputs_h[0] if directions == 1 else b("concatenate", *outputs_h, axis=0)   # (D, B, H)
    y_c = None if not outputs_c else outputs_c[0] if directions == 1 else b("concatenate", *outputs_c, axis=0)
    if layout:
        y = b("transpose", y, axes=(2, 0, 1, 3))
        y_h = b("transpose", y_h, axes=(1, 0, 2))
        y_c = None if y_c is None else b("transpose", y_c, axes=(1, 0, 2))
    return (y, y_h, y_c)[:node.num_outputs] if kind == "LSTM" else (y, y_h)[:node.num_outputs]


def _step_mask(b: _Builder, lengths: Expr, steps: int, batch: int) -> Expr:
    """(T, B, 1) bool: step t of batch row i is within row i's sequence length."""
    times = Constant(np.arange(steps, dtype=np.int64).reshape(steps, 1))
    limits = b("reshape", b("cast", lengths, dtype="int64"), newshape=(1, batch))
    return b("reshape", b("less", times, limits), newshape=(steps, batch, 1))


def _reverse_prefixes(b: _Builder, value: Expr, lengths: Expr) -> Expr:
    """ReverseSequence along time: row i's first lengths[i] steps reversed, the rest kept."""
    steps, batch, width = value.shape
    times = Constant(np.arange(steps, dtype=np.int64).reshape(steps, 1))
    limits = b("reshape", b("cast", lengths, dtype="int64"), newshape=(1, batch))
    one = Constant(np.array(1, np.int64))
    flipped = b("subtract", b("subtract", limits, one), times)
    index = b("where", b("less", times, limits), flipped, times)
    index = b("broadcast_to", b("reshape", index, newshape=(steps, batch, 1)), shape=(steps, batch, width))
    return b("gather_elements", value, index, axis=0)


def _unrolled(cell: _Cell, d: _Direction, projected: Expr, h: Expr, c: Expr | None, mask: Expr | None,
              backwards: bool):
    b = cell.b
    steps, batch, width = projected.shape
    xs = [b("reshape", part, newshape=(batch, width)) for part in b.split(projected, steps, axis=0)]
    masks = [None] * steps if mask is None else [b("reshape", m, newshape=(batch, 1))
                                                 for m in b.split(mask, steps, axis=0)]
    ys: list[Expr | None] = [None] * steps
    for t in (reversed(range(steps)) if backwards else range(steps)):
        h, c, ys[t] = cell.step(d, xs[t], h, c, masks[t])
    y = b("concatenate", *(b("expand_dims", y_t, axis=0) for y_t in ys), axis=0)
    return y, h, c


def _scanned(cell: _Cell, d: _Direction, projected: Expr, h: Expr, c: Expr | None, mask: Expr | None,
             backwards: bool):
    """A scan over time whose body is the cell; R, biases and peepholes computed at run time are
    captured as body parameters, constant ones stay in the body."""
    b = cell.b
    steps, batch, width = projected.shape
    h_var = Var("h", h.checked_type)
    c_var = None if c is None else Var("c", c.checked_type)
    x_var = Var("x", TensorType((batch, width), projected.dtype))
    m_var = None if mask is None else Var("mask", TensorType((batch, 1), "bool"))
    captured: list[tuple[Var, Expr]] = []

    def param(value: Expr | None) -> Expr | None:
        if value is None or isinstance(value, Constant):
            return value
        var = Var(f"w{len(captured)}", value.checked_type)
        captured.append((var, value))
        return var

    inner = _Direction(param(d.recurrence), param(d.recurrence_bias),
                       None if d.peepholes is None else [param(p) for p in d.peepholes], d.activations)
    new_h, new_c, y = cell.step(inner, x_var, h_var, c_var, m_var)
    states = [h_var] + ([c_var] if c_var is not None else [])
    results = [new_h] + ([new_c] if new_c is not None else []) + [y]
    inputs = [x_var] + ([m_var] if m_var is not None else [])
    body = Function((*states, *inputs, *(v for v, _ in captured)), Tuple(tuple(results)))
    direction = 1 if backwards else 0
    scan = b("scan", h, *([c] if c is not None else []), projected, *([mask] if mask is not None else []),
             *(value for _, value in captured), body=body, num_states=len(states),
             input_axes=(0,) * len(inputs), input_directions=(direction,) * len(inputs),
             output_axes=(0,), output_directions=(direction,))
    h_out = b.item(scan, 0)
    c_out = b.item(scan, 1) if c is not None else None
    return b.item(scan, len(states)), h_out, c_out

