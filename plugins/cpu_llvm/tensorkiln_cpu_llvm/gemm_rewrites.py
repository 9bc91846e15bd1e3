"""gemm_rewrites.py: graph rewrites that hand GEMM-shaped work to the micro-kernel (strategies/ukernel.py).

The micro-kernel runs nn.matmul of 2-D operands, or of 3-D operands with one batch extent.
Two passes bring more calls into that form, between reshapes:

- `cpu_llvm_conv1x1_as_matmul`: a batch-1, unpadded, stride-1 1x1 nn.conv2d with a constant
  weight is a GEMM: NCHW `reshape(matmul(W[O, C], x[C, H*W]), [1, O, H, W])`, NHWC
  `reshape(matmul(x[H*W, C], W[C, O]), [1, H, W, O])`; with G groups (NCHW, at least
  MIN_GROUP_CHANNELS per group) a batch of G GEMMs `matmul(W[G, O/G, C/G], x[G, C/G, H*W])`.
  Measured on squeezenet's and resnet50's 1x1 shapes (1 thread, bias + relu fused, AVX-512
  host, against onnxruntime's Conv): the NCHW conv schedule took 1.7-2.6x onnxruntime's time,
  the GEMM 0.74-1.34x; shufflenet's grouped 1x1 layers 2.7-4.9x before, 1.4-1.75x after. NHWC
  convs keep the NHWC register tile (0.93-1.18x the GEMM's time on the same shapes) unless the
  output channels are not a multiple of a vector (13x13x512 -> 1000: the GEMM takes 0.21x), or
  without AVX-512 of two (`_nhwc_tile_vectors`).
- `cpu_llvm_flatten_matmul`: nn.matmul of x[..., M, K] with a 2-D W[K, N] (a transformer's
  projections: x[batch, tokens, features]) becomes `reshape(matmul(x[B*M, K], W), [..., M, N])`,
  and a matmul of two operands of rank 4 or more with the same leading extents (attention's
  [batch, heads, tokens, depth] products) a 3-D matmul over the merged leading extents.

The reshapes of the operands are free (zero-copy aliases, compiler/alias_steps.py). The reshape
of the result then sinks below the elementwise chain that follows (bias_add, relu, a residual
add, ...), which runs on the GEMM's own shape: fusion puts elementwise ops after an anchor into
its group, but not a reshape, which would end the group there.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import numpy as np

from tensorkiln.graph import Call, Constant, Module, call, get_op, owned_constant, rewrite
from tensorkiln.graph.registry import OpPattern

__all__ = ["conv1x1_as_matmul", "flatten_matmul", "MIN_GROUP_CHANNELS"]

MIN_GROUP_CHANNELS = 8
"""A grouped 1x1 conv becomes a batch of GEMMs only with at least this many input and output channels
per group (a depthwise conv would be GEMMs with K = 1)."""


def _shape(expr) -> tuple[int, ...]:
    return tuple(int(d) for d in expr.checked_type.shape)


@dataclass(frozen=True)
class View:
    """How the GEMM's result (`inner` shape) lays out the original call's result (`outer`):
    "leading": the outer extents before the last `kept` are merged into one (row-major order
    unchanged: NHWC convs, flattened matmuls); "channels_first": an NCHW conv's [1, O, H, W] as
    [O, H*W], or grouped as [G, O/G, H*W]."""

    kind: str
    outer: tuple[int, ...]
    inner: tuple[int, ...]
    kept: int = 1

    def operand(self, arg):
        """`arg`, broadcast against the outer result, as an operand broadcast against the inner one;
        None when its broadcast does not map (e.g. one over an NCHW conv's width alone)."""
        rank = len(self.outer)
        shape = (1,) * (rank - len(arg.checked_type.shape)) + _shape(arg)
        if len(shape) != rank:
            return None
        if shape == self.outer:
            return call("reshape", arg, newshape=self.inner)
        if all(d == 1 for d in shape):
            return call("reshape", arg, newshape=(1,) * len(self.inner))
        if self.kind == "channels_first":
            if shape == (1, self.outer[1], 1, 1):
                return call("reshape", arg, newshape=(*self.inner[:-1], 1))
            return None
        split = rank - self.kept
        if all(d == 1 for d in shape[:split]):
            return call("reshape", arg, newshape=(1, *shape[split:]))
        if shape[:split] == self.outer[:split]:
            return call("reshape", arg, newshape=(math.prod(shape[:split]), *shape[split:]))
        return None

    def bias_axis(self, axis: int) -> bool:
        """Whether a bias_add over outer `axis` is a bias over the inner result's channels."""
        axis %= len(self.outer)
        return axis == (1 if self.kind == "channels_first" else len(self.outer) - 1)

    def bias(self, value, bias):
        """bias_add(outer, bias) over the channels, as a call on the inner `value`."""
        if self.kind == "channels_first":
            if len(self.inner) == 3:   # grouped: the channel is (group, row) of the batch of GEMMs
                return call("add", value, call("reshape", bias, newshape=(*self.inner[:-1], 1)))
            return call("nn.bias_add", value, bias, axis=0)
        return call("nn.bias_add", value, bias, axis=len(self.inner) - 1)


def _fields(attrs) -> dict:
    """The fields of an Attrs record, as keyword arguments for `call`."""
    return {f.name: getattr(attrs, f.name) for f in dataclasses.fields(attrs)}


class _Sinker:
    """Rewrites calls into GEMMs (`gemm_of(node)` -> (inner value, View) or None) and sinks each result's
    reshape below the elementwise ops that read it."""

    def __init__(self, gemm_of) -> None:
        self.gemm_of = gemm_of
        self.sunk: dict[int, tuple] = {}   # id(result reshape) -> (inner value, View)

    def result(self, value, view: View):
        reshaped = call("reshape", value, newshape=view.outer)
        self.sunk[id(reshaped)] = (value, view)
        return reshaped

    def elementwise(self, node):
        value, view = next(self.sunk[id(a)] for a in node.args if id(a) in self.sunk)
        if _shape(node) != view.outer:
            return None
        name = node.op.name
        if name == "nn.bias_add":
            if id(node.args[0]) not in self.sunk or not view.bias_axis(node.attrs.axis):
                return None
            return self.result(view.bias(value, node.args[1]), view)
        op = get_op(name)
        if op.pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST) or \
                (op.pattern == OpPattern.BROADCAST and dataclasses.fields(node.attrs)):
            return None
        args = []
        for arg in node.args:
            if id(arg) in self.sunk and self.sunk[id(arg)][1] == view:
                args.append(self.sunk[id(arg)][0])
                continue
            mapped = view.operand(arg)
            if mapped is None:
                return None
            args.append(mapped)
        rebuilt = call(name, *args, **_fields(node.attrs))
        if _shape(rebuilt) != view.inner:
            return None
        return self.result(rebuilt, view)

    def __call__(self, node):
        if not isinstance(node, Call) or not hasattr(node.op, "name"):
            return None
        found = self.gemm_of(node)
        if found is not None:
            return self.result(*found)
        if any(id(a) in self.sunk for a in node.args):
            return self.elementwise(node)
        return None


# ---- 1x1 convs ------------------------------------------------------------------------------


def _conv1x1_weight(node) -> np.ndarray | None:
    """The [O, C] matrix of a conv call that is a plain GEMM (for G > 1 groups, NCHW: [G, O / G, C / G]),
    or None."""
    attrs = node.attrs
    data, weight = node.args
    if not isinstance(weight, Constant) or tuple(attrs.strides) != (1, 1) \
            or any(attrs.padding) or attrs.out_dtype not in ("", "float32"):
        return None
    if data.checked_type.dtype != "float32" or weight.value.dtype != np.float32 or int(data.checked_type.shape[0]) != 1:
        return None
    value = weight.value
    if attrs.groups != 1:
        if attrs.kernel_layout != "OIHW" or attrs.data_layout != "NCHW" or value.shape[2:] != (1, 1):
            return None
        outputs, per_group = value.shape[:2]
        if per_group < MIN_GROUP_CHANNELS or outputs // attrs.groups < MIN_GROUP_CHANNELS:
            return None
        return value.reshape(attrs.groups, outputs // attrs.groups, per_group)
    spatial = {"OIHW": value.shape[2:], "HWIO": value.shape[:2], "OHWI": value.shape[1:3]}.get(attrs.kernel_layout)
    if spatial is None or tuple(spatial) != (1, 1):   # a blocked weight layout is already packed for its conv
        return None
    if attrs.kernel_layout == "OIHW":
        return value.reshape(value.shape[0], value.shape[1])
    if attrs.kernel_layout == "HWIO":
        return value.reshape(value.shape[2], value.shape[3]).T
    return value.reshape(value.shape[0], value.shape[3])


def _nhwc_tile_vectors(target) -> int:
    """Output-channel vectors the NHWC register tile needs to be as fast as the GEMM: one with AVX-512,
    whose FMAs take the broadcast input as an operand ({1to16}), two without it, where a one-vector tile
    spends a broadcast load on every FMA. Measured, 1 thread, CPU time: AVX2 squeezenet (its 13x13x512
    -> 1000 conv, 1000 channels of 8-wide vectors but not 16) 0.94x as a GEMM; with AVX-512, rewriting
    the 48- and 16-channel convs of squeezenet and inception_v1 too ran 1.015x and 1.005x, so not there."""
    from .host import cpu_facts
    return 1 if cpu_facts(target).vector_bits >= 512 else 2


def conv1x1_as_matmul(mod: Module, target=None) -> Module:
    """Rewrite batch-1 1x1 stride-1 unpadded float32 convs with constant weights to GEMMs (module docstring)."""
    from .host import cpu_facts
    from .strategies.ukernel import gemm_applies

    def gemm_of(node):
        if node.op.name != "nn.conv2d":
            return None
        matrix = _conv1x1_weight(node)
        if matrix is None:
            return None
        data, out_shape = node.args[0], _shape(node)
        if node.attrs.data_layout == "NCHW":
            _, channels, height, width = _shape(data)
            rows = (channels,) if matrix.ndim == 2 else (matrix.shape[0], channels // matrix.shape[0])
            gemm = call("nn.matmul", owned_constant(np.ascontiguousarray(matrix)),
                        call("reshape", data, newshape=(*rows, height * width)))
            view = View("channels_first", out_shape, _shape(gemm))
        else:
            _, height, width, channels = _shape(data)
            if matrix.shape[0] % (_nhwc_tile_vectors(target) * cpu_facts(target).vector_bits // 32) == 0:
                return None   # the NHWC register tile is as fast (0.93-1.18x the GEMM's time) and keeps its bits
            gemm = call("nn.matmul", call("reshape", data, newshape=(height * width, channels)),
                        owned_constant(np.ascontiguousarray(matrix.T)))
            view = View("leading", out_shape, _shape(gemm))
        return (gemm, view) if gemm_applies(gemm, target) is True else None

    return mod if target is None else rewrite(mod, _Sinker(gemm_of))


# ---- matmuls of higher rank -----------------------------------------------------------------------


def flatten_matmul(mod: Module, target=None) -> Module:
    """Rewrite nn.matmul of x[..., M, K] @ W[K, N], or of two rank >= 4 operands with the same leading
    extents, to a 2-D or 3-D matmul between reshapes (module docstring)."""
    from .strategies.ukernel import gemm_applies

    def gemm_of(node):
        if node.op.name != "nn.matmul":
            return None
        lhs, rhs = node.args
        left, right, out_shape = _shape(lhs), _shape(rhs), _shape(node)
        if lhs.checked_type.dtype != "float32" or rhs.checked_type.dtype != "float32":
            return None
        if len(left) >= 3 and len(right) == 2:
            gemm = call("nn.matmul", call("reshape", lhs, newshape=(math.prod(left[:-1]), left[-1])), rhs)
            view = View("leading", out_shape, _shape(gemm), kept=1)
        elif len(left) >= 4 and len(right) == len(left) and left[:-2] == right[:-2]:
            batch = math.prod(left[:-2])
            gemm = call("nn.matmul", call("reshape", lhs, newshape=(batch, *left[-2:])),
                        call("reshape", rhs, newshape=(batch, *right[-2:])))
            view = View("leading", out_shape, _shape(gemm), kept=2)
        else:
            return None
        return (gemm, view) if gemm_applies(gemm, target) is True else None

    return mod if target is None else rewrite(mod, _Sinker(gemm_of))
