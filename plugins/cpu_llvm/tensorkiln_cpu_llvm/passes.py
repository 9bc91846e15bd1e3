"""passes.py: cpu_llvm's graph passes, returned from its tensorkiln_passes hook (they run after the core's).

`cpu_llvm_transpose_dense_weights`: nn.dense(x, W) with a constant W[N, K] whose GEMM the
micro-kernel runs (strategies/ukernel.py) becomes nn.matmul(x, W.T) with W.T[K, N] computed
once here. The micro-kernel packs B into nr-wide panels on every call; from W[N, K] that
is a transposing gather of K * N scalars, from W.T[K, N] a copy of contiguous vectors.
Batch-1 dense keeps W[N, K]: its split reduction streams the rows of W (strategies/dense.py).

`cpu_llvm_conv1x1_as_matmul`: a batch-1, unpadded, stride-1 1x1 nn.conv2d with a constant weight is
a GEMM, so it becomes one: NCHW `reshape(matmul(W[O, C], x[C, H*W]), [1, O, H, W])`, NHWC
`reshape(matmul(x[H*W, C], W[C, O]), [1, H, W, O])`; with G groups (NCHW, at least
MIN_GROUP_CHANNELS per group) a batch of G GEMMs `matmul(W[G, O/G, C/G], x[G, C/G, H*W])`. The reshapes of the data and of the result
cost nothing (zero-copy aliases, or an index map inlined into the epilogue), and the GEMM runs on
the blocked micro-kernel (strategies/ukernel.py) instead of the conv register tile. Measured on
squeezenet's and resnet50's 1x1 shapes (1 thread, bias + relu fused, AVX-512 host, against
onnxruntime's Conv): NCHW conv schedule 1.7-2.6x onnxruntime's time, the GEMM 0.74-1.34x. NHWC
convs keep the NHWC register tile (0.93-1.18x the GEMM's time on the same shapes) unless the output
channels are not a multiple of a vector (13x13x512 -> 1000: the GEMM takes 0.21x the tile's time).
"""
from __future__ import annotations

import dataclasses

import numpy as np

from tensorkiln.graph import Call, Constant, Module, call, rewrite
from tensorkiln.passes import get_pass, register_pass

__all__ = ["PASSES", "transpose_dense_weights", "conv1x1_as_matmul"]


@register_pass("cpu_llvm_transpose_dense_weights", opt_level=2)
def transpose_dense_weights(mod: Module, target=None) -> Module:
    """Rewrite micro-kernel-sized dense calls with constant weights to matmul with the weight transposed."""
    from .strategies.ukernel import gemm_applies

    def visit(node):
        if not (isinstance(node, Call) and getattr(node.op, "name", "") == "nn.dense"):
            return None
        data, weight = node.args
        if not isinstance(weight, Constant) or target is None or gemm_applies(node, target) is not True:
            return None
        transposed = Constant(np.ascontiguousarray(weight.value.T))
        return call("nn.matmul", data, transposed)
    return rewrite(mod, visit)


MIN_GROUP_CHANNELS = 8
"""A grouped 1x1 conv becomes a batch of GEMMs only with at least this many input and output channels
per group (a depthwise conv would be GEMMs with K = 1)."""


def _conv1x1_weight(node) -> np.ndarray | None:
    """The [O, C] matrix of a conv call that is a plain GEMM (for G > 1 groups, NCHW: [G, O / G, C / G]),
    or None."""
    attrs = node.attrs
    data, weight = node.args
    if not isinstance(weight, Constant) or tuple(attrs.strides) != (1, 1) \
            or any(attrs.padding) or attrs.out_dtype not in ("", "float32"):
        return None
    if attrs.groups != 1:
        if attrs.kernel_layout != "OIHW" or weight.value.shape[2:] != (1, 1):
            return None
        outputs, per_group = weight.value.shape[:2]
        if per_group < MIN_GROUP_CHANNELS or outputs // attrs.groups < MIN_GROUP_CHANNELS \
                or data.checked_type.dtype != "float32" or int(data.checked_type.shape[0]) != 1:
            return None
        return weight.value.reshape(attrs.groups, outputs // attrs.groups, per_group)
    if data.checked_type.dtype != "float32" or weight.value.dtype != np.float32 or int(data.checked_type.shape[0]) != 1:
        return None
    value = weight.value
    spatial = {"OIHW": value.shape[2:], "HWIO": value.shape[:2], "OHWI": value.shape[1:3]}[attrs.kernel_layout]
    if tuple(spatial) != (1, 1):
        return None
    if attrs.kernel_layout == "OIHW":
        return value.reshape(value.shape[0], value.shape[1])
    if attrs.kernel_layout == "HWIO":
        return value.reshape(value.shape[2], value.shape[3]).T
    return value.reshape(value.shape[0], value.shape[3])


def _matrix_operand(arg, layout: str, out_shape: tuple, inner_shape: tuple):
    """`arg`, broadcast against the conv's 4-D result, as an operand broadcast against the GEMM's 2-D
    result (`inner_shape`), or None when its broadcast does not map (e.g. one over the width alone)."""
    shape = (1,) * (4 - len(arg.checked_type.shape)) + tuple(int(d) for d in arg.checked_type.shape)
    if all(d == 1 for d in shape):
        return arg
    if shape == out_shape:
        return call("reshape", arg, newshape=inner_shape)
    channels = out_shape[1] if layout == "NCHW" else out_shape[3]
    if layout == "NCHW" and shape == (1, channels, 1, 1):
        return call("reshape", arg, newshape=(*inner_shape[:-1], 1))
    if layout == "NHWC" and shape == (1, 1, 1, channels):
        return call("reshape", arg, newshape=(1, channels))
    return None


@register_pass("cpu_llvm_conv1x1_as_matmul", opt_level=2)
def conv1x1_as_matmul(mod: Module, target=None) -> Module:
    """Rewrite batch-1 1x1 stride-1 unpadded float32 convs with constant weights to a GEMM between reshapes.

    The reshape of the GEMM's result then sinks below the elementwise chain that follows (bias_add,
    relu, a residual add, ...), which runs on the 2-D result instead: fusion puts elementwise ops after
    an anchor into its group, but not a reshape, which would end the group there.
    """
    from tensorkiln.graph import get_op
    from tensorkiln.graph.registry import OpPattern

    from .host import cpu_facts
    from .strategies.ukernel import gemm_applies

    sunk: dict[int, tuple] = {}   # id(result reshape) -> (2-D value, layout)

    def conv(node):
        matrix = _conv1x1_weight(node)
        layout = node.attrs.data_layout
        if matrix is None or (matrix.ndim == 3 and layout != "NCHW"):
            return None
        data = node.args[0]
        out_shape = tuple(int(d) for d in node.checked_type.shape)
        if layout == "NCHW":
            _, channels, height, width = (int(d) for d in data.checked_type.shape)
            rows = (channels,) if matrix.ndim == 2 else (matrix.shape[0], channels // matrix.shape[0])
            gemm = call("nn.matmul", Constant(np.ascontiguousarray(matrix)),
                        call("reshape", data, newshape=(*rows, height * width)))
        else:
            _, height, width, channels = (int(d) for d in data.checked_type.shape)
            if matrix.shape[0] % (cpu_facts(target).vector_bits // 32) == 0:
                return None   # the NHWC register tile is as fast (0.93-1.18x the GEMM's time) and keeps its bits
            gemm = call("nn.matmul", call("reshape", data, newshape=(height * width, channels)),
                        Constant(np.ascontiguousarray(matrix.T)))
        if gemm_applies(gemm, target) is not True:
            return None
        return _result(gemm, layout, out_shape)

    def _result(value, layout, out_shape):
        result = call("reshape", value, newshape=out_shape)
        sunk[id(result)] = (value, layout)
        return result

    def elementwise(node):
        value, layout = next(sunk[id(a)] for a in node.args if id(a) in sunk)
        out_shape = tuple(int(d) for d in node.checked_type.shape)
        if len(out_shape) != 4:
            return None
        inner_shape = tuple(int(d) for d in value.checked_type.shape)
        name = node.op.name
        if name == "nn.bias_add":
            if id(node.args[0]) not in sunk:
                return None
            axis = node.attrs.axis % 4
            if axis != (1 if layout == "NCHW" else 3):
                return None
            if len(inner_shape) == 3:   # grouped: the channel is (group, row) of the batch of GEMMs
                bias = call("reshape", node.args[1], newshape=(*inner_shape[:-1], 1))
                return _result(call("add", value, bias), layout, out_shape)
            new_axis = 0 if layout == "NCHW" else 1
            return _result(call("nn.bias_add", value, node.args[1], axis=new_axis), layout, out_shape)
        op = get_op(name)
        if op.pattern not in (OpPattern.ELEMWISE, OpPattern.BROADCAST) or \
                (op.pattern == OpPattern.BROADCAST and type(node.attrs).__name__ != "NoAttrs"):
            return None
        args = []
        for arg in node.args:
            if id(arg) in sunk and sunk[id(arg)][1] == layout and \
                    tuple(int(d) for d in sunk[id(arg)][0].checked_type.shape) == inner_shape:
                args.append(sunk[id(arg)][0])
                continue
            mapped = _matrix_operand(arg, layout, out_shape, inner_shape)
            if mapped is None:
                return None
            args.append(mapped)
        rebuilt = call(name, *args, **_fields(node.attrs))
        if tuple(int(d) for d in rebuilt.checked_type.shape) != inner_shape:
            return None
        return _result(rebuilt, layout, out_shape)

    def visit(node):
        if target is None or not isinstance(node, Call) or not hasattr(node.op, "name"):
            return None
        if node.op.name == "nn.conv2d":
            return conv(node)
        if any(id(a) in sunk for a in node.args):
            return elementwise(node)
        return None
    return rewrite(mod, visit)


def _fields(attrs) -> dict:
    """The fields of an Attrs record, as keyword arguments for `call`."""
    return {f.name: getattr(attrs, f.name) for f in dataclasses.fields(attrs)}


PASSES = (get_pass("cpu_llvm_transpose_dense_weights"), get_pass("cpu_llvm_conv1x1_as_matmul"))
"""The registered Pass objects, in the order they run."""
