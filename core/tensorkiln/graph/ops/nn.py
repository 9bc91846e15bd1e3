"""Neural-network ops: convolutions, dense/matmul, normalizations, pooling, softmax."""
from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ...ir.errors import DTypeError, ShapeError
from ..attrs import Attrs, AttrsError
from ..registry import OpPattern, register_op
from ..types import TensorType
from .layout import parse_layout, primal_axes, primal_sizes, transform_layout
from ._rules import broadcast_shape, normalize_axis, require_float, same_dtype, shape_text, tensor_args

__all__ = ["Conv2DAttrs", "Conv2DTransposeAttrs", "DenseAttrs", "DensePackAttrs", "pack_dense_weight",
           "BatchNormAttrs", "BiasAddAttrs", "SoftmaxAttrs", "MaxPool2DAttrs", "AvgPool2DAttrs", "LRNAttrs",
           "LayerNormAttrs"]

_TOLERANCE = {"float16": 2e-3, "float32": 1e-4}


def _accumulate(x: np.ndarray) -> np.ndarray:
    """Floats accumulate in float64 (so equal inputs give bit-equal outputs whatever BLAS
    kernel ran), integers in int64."""
    if x.dtype in (np.float16, np.float32):
        return x.astype(np.float64)
    if x.dtype.kind in "iub":
        return x.astype(np.int64)
    return x


def _pair_check(attrs: Attrs, *names: str) -> None:
    for name in names:
        if any(v < 1 for v in getattr(attrs, name)):
            attrs.fail(f"{name} must be positive, got {getattr(attrs, name)}")


# ---- conv2d ----------------------------------------------------------------------------

KERNEL_LAYOUTS = ("OIHW", "HWIO", "OHWI")
"""The plain weight layouts of nn.conv2d. A blocked one ("OHWI16o": O split into O/16 outer and 16
inner, the inner last) is accepted too: a target packs constant weights into it for its kernels
(cpu_llvm's NHWC convs stream one output-channel block contiguously), after every layout pass."""


def is_blocked_kernel_layout(layout: str) -> bool:
    """True for a layout string of the primal axes O, I, H, W with at least one block ("OHWI16o")."""
    try:
        axes = parse_layout(layout)
    except ShapeError:
        return False
    return sorted(primal_axes(layout)) == sorted("OIHW") and any(factor for _, factor in axes)


DATA_LAYOUTS = ("NCHW", "NHWC")
"""The plain data layouts of nn.conv2d; a blocked "NCHW{x}c" (x a power of two) is accepted too."""

_BLOCKED_DATA = re.compile(r"^NCHW([0-9]+)c$")


def data_layout_block(layout: str) -> int:
    """x of a blocked data layout "NCHW{x}c" (x a power of two: "NCHW8c" -> 8), else 0."""
    match = _BLOCKED_DATA.match(layout)
    if not match:
        return 0
    block = int(match.group(1))
    return block if block >= 1 and block & (block - 1) == 0 else 0


def blocked_kernel_layout(block: int) -> str:
    """The weight layout that goes with NCHW{block}c data: "OIHW8i8o" (TVM's conv2d_NCHWc kernel,
    (O/x, I/x, KH, KW, x input channels, x output channels))."""
    return f"OIHW{block}i{block}o"


@dataclass(frozen=True, slots=True)
class Conv2DAttrs(Attrs):
    """NCHW (or NHWC, or blocked NCHW{x}c) data, OIHW (or HWIO, OHWI, or blocked: OHWI16o, OIHW8i8o) weight;
    padding is (top, left, bottom, right). NCHW{x}c data (x a power of two; TVM's conv2d_NCHWc) is
    (N, C/x, H, W, x) and gives NCHW{x}c output; its groups must be 1. `out_layout` "NCHW{x}c" with NCHW
    data blocks the output only (a first conv whose few input channels do not divide the block,
    weight OIHW{C}i{x}o); "" is the data layout."""
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    data_layout: str = "NCHW"
    kernel_layout: str = "OIHW"
    out_dtype: str = ""   # "int32": 8-bit integer inputs accumulate in int32 (as TVM's out_dtype); "" = the inputs'
    out_layout: str = ""
    _choices = {"out_dtype": ("", "int32")}

    def _check(self) -> None:
        _pair_check(self, "strides", "dilation")
        if self.data_layout not in DATA_LAYOUTS and not data_layout_block(self.data_layout):
            raise AttrsError(f"Conv2DAttrs.data_layout = {self.data_layout!r} is not one of {DATA_LAYOUTS} nor a "
                             "blocked layout NCHW{x}c with x a power of two such as 'NCHW8c'")
        if data_layout_block(self.data_layout) and self.groups != 1:
            self.fail(f"data_layout {self.data_layout!r} with groups={self.groups}: grouped and depthwise convs "
                      "have no blocked compute; keep them in NCHW or NHWC")
        if self.out_layout not in ("", self.data_layout) and not (
                self.data_layout == "NCHW" and data_layout_block(self.out_layout) and self.groups == 1):
            self.fail(f"out_layout {self.out_layout!r} with data_layout {self.data_layout!r}, groups={self.groups}: "
                      "an out_layout other than the data layout must be NCHW{x}c, with NCHW data and groups 1")
        if self.kernel_layout not in KERNEL_LAYOUTS and not is_blocked_kernel_layout(self.kernel_layout):
            self.fail(f"kernel_layout {self.kernel_layout!r} is not one of {KERNEL_LAYOUTS} nor a blocked layout "
                      "of O, I, H, W such as 'OHWI16o'")
        if self.groups < 1:
            self.fail(f"groups must be positive, got {self.groups}")
        if any(p < 0 for p in self.padding):
            self.fail(f"padding must be non-negative, got {self.padding}")


def _window_out(op: str, size: int, kernel: int, stride: int, dilation: int, pad_total: int,
                ceil_mode: bool = False, pad_begin: int = 0) -> int:
    effective = (kernel - 1) * dilation + 1
    span = size + pad_total - effective
    if span < 0:
        raise ShapeError(f"{op}: window {kernel} (dilation {dilation}) is larger than the padded input {size + pad_total}")
    if not ceil_mode:
        return span // stride + 1
    out = -(-span // stride) + 1
    if (out - 1) * stride >= size + pad_begin:  # the last window must start inside the input
        out -= 1
    return out


def _conv2d_type(arg_types, attrs: Conv2DAttrs) -> TensorType:
    """Other layouts are checked as their NCHW / OIHW permutation (the shape rules are the same)."""
    data, weight = tensor_args("nn.conv2d", arg_types)
    if attrs.out_layout not in ("", attrs.data_layout):   # NCHW in, NCHW{x}c out
        out = _conv2d_type((data, weight), dataclasses.replace(attrs, out_layout=""))
        block = data_layout_block(attrs.out_layout)
        if out.shape[1] % block:
            raise ShapeError(f"nn.conv2d: weight {shape_text(weight.shape)} ({attrs.kernel_layout}) has "
                             f"{out.shape[1]} output channels, not divisible by the block {block} of out_layout "
                             f"{attrs.out_layout}; keep this conv in NCHW")
        return TensorType((out.shape[0], out.shape[1] // block, *out.shape[2:], block), out.dtype)
    if data_layout_block(attrs.data_layout):
        return _conv2d_type_blocked(data, weight, attrs)
    if attrs.kernel_layout not in KERNEL_LAYOUTS:   # blocked: checked as its OIHW sizes
        try:
            sizes = primal_sizes(weight.shape, attrs.kernel_layout)
        except ShapeError as error:
            raise ShapeError(f"nn.conv2d: weight {shape_text(weight.shape)}: {error}") from None
        weight = TensorType(tuple(sizes[axis] for axis in "OIHW"), weight.dtype)
        attrs = dataclasses.replace(attrs, kernel_layout="OIHW")
    if (attrs.data_layout, attrs.kernel_layout) != ("NCHW", "OIHW") and data.ndim == 4 and weight.ndim == 4:
        data = TensorType(_permute(data.shape, attrs.data_layout, "NCHW"), data.dtype)
        weight = TensorType(_permute(weight.shape, attrs.kernel_layout, "OIHW"), weight.dtype)
        out = _conv2d_type_nchw((data, weight), attrs)
        return TensorType(_permute(out.shape, "NCHW", attrs.data_layout), out.dtype)
    return _conv2d_type_nchw((data, weight), attrs)


def _conv2d_type_blocked(data: TensorType, weight: TensorType, attrs: Conv2DAttrs) -> TensorType:
    """NCHW{x}c data (N, C/x, H, W, x): checked as its NCHW sizes; the output is NCHW{x}c too."""
    block = data_layout_block(attrs.data_layout)
    if data.ndim != 5 or data.shape[4] != block:
        raise ShapeError(f"nn.conv2d: data {shape_text(data.shape)} is not in {attrs.data_layout}: expected "
                         f"(N, C/{block}, H, W, {block}); insert a layout_transform from NCHW")
    batch, outer, height, width, _ = data.shape
    nchw = TensorType((batch, outer * block, height, width), data.dtype)
    out = _conv2d_type(((nchw, weight)), dataclasses.replace(attrs, data_layout="NCHW", out_layout=""))
    if out.shape[1] % block:
        raise ShapeError(f"nn.conv2d: weight {shape_text(weight.shape)} ({attrs.kernel_layout}) has "
                         f"{out.shape[1]} output channels, not divisible by the block {block} of data layout "
                         f"{attrs.data_layout}; keep this conv in NCHW")
    return TensorType((batch, out.shape[1] // block, out.shape[2], out.shape[3], block), out.dtype)


def _permute(shape: tuple[int, ...], src: str, dst: str) -> tuple[int, ...]:
    return tuple(shape[src.index(axis)] for axis in dst)


def _conv2d_type_nchw(arg_types, attrs: Conv2DAttrs) -> TensorType:
    data, weight = arg_types
    if data.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"nn.conv2d: data {shape_text(data.shape)} (NCHW) and weight {shape_text(weight.shape)} "
                         "(OIHW) must both be 4-D")
    dtype = _accumulated_dtype("nn.conv2d", data, weight, attrs.out_dtype)
    channels = data.shape[1]
    if channels % attrs.groups or weight.shape[1] * attrs.groups != channels:
        raise ShapeError(
            f"nn.conv2d: data {shape_text(data.shape)} (NCHW) has {channels} input channels, but weight "
            f"{shape_text(weight.shape)} (OIHW) expects {weight.shape[1]} x groups={attrs.groups}; "
            "check the weight layout or the groups attribute")
    if weight.shape[0] % attrs.groups:
        raise ShapeError(f"nn.conv2d: weight {shape_text(weight.shape)} has {weight.shape[0]} output channels, "
                         f"not divisible by groups={attrs.groups}")
    top, left, bottom, right = attrs.padding
    height = _window_out("nn.conv2d", data.shape[2], weight.shape[2], attrs.strides[0], attrs.dilation[0], top + bottom)
    width = _window_out("nn.conv2d", data.shape[3], weight.shape[3], attrs.strides[1], attrs.dilation[1], left + right)
    return TensorType((data.shape[0], weight.shape[0], height, width), dtype)


_INT8 = ("int8", "uint8")


def _accumulated_dtype(op: str, data: TensorType, weight: TensorType, out_dtype: str) -> str:
    """The result dtype: the inputs' (which must match), or out_dtype "int32" for 8-bit integer inputs
    (int8 or uint8, in any mix: ONNX's ConvInteger / MatMulInteger and quantized models)."""
    if not out_dtype:
        return same_dtype(op, data, weight)
    if data.dtype not in _INT8 or weight.dtype not in _INT8:
        raise DTypeError(f"{op}: out_dtype={out_dtype!r} accumulates 8-bit integer inputs (int8, uint8), got "
                         f"{data.dtype} and {weight.dtype}; cast them or drop out_dtype")
    return out_dtype


def _with_out_dtype(reference):
    """A reference of an op with out_dtype: computed exactly in int64, then cast to out_dtype."""
    def run(data, weight, attrs):
        out_dtype = getattr(attrs, "out_dtype", "")   # callers may pass NO_ATTRS for a dense
        if not out_dtype:
            return reference(data, weight, attrs)
        return reference(data.astype(np.int64), weight.astype(np.int64), attrs).astype(out_dtype)
    return run


def _windows(x: np.ndarray, kernel, strides, dilation) -> np.ndarray:
    """(N, C, H, W) -> view (N, C, OH, OW, KH, KW) of the strided, dilated windows."""
    effective = [(k - 1) * d + 1 for k, d in zip(kernel, dilation)]
    view = sliding_window_view(x, effective, axis=(2, 3))
    return view[:, :, ::strides[0], ::strides[1], ::dilation[0], ::dilation[1]]


def _conv2d_reference(data: np.ndarray, weight: np.ndarray, attrs: Conv2DAttrs) -> np.ndarray:
    if attrs.out_layout not in ("", attrs.data_layout):
        out = _conv2d_reference(data, weight, dataclasses.replace(attrs, out_layout=""))
        return transform_layout(out, attrs.data_layout, attrs.out_layout)
    if (attrs.data_layout, attrs.kernel_layout) == ("NCHW", "OIHW"):
        return _conv2d_reference_nchw(data, weight, attrs)
    if data_layout_block(attrs.data_layout):   # unblock, compute, reblock
        nchw = _conv2d_reference(transform_layout(data, attrs.data_layout, "NCHW"), weight,
                                 dataclasses.replace(attrs, data_layout="NCHW", out_layout=""))
        return transform_layout(nchw, "NCHW", attrs.data_layout)
    data = data.transpose([attrs.data_layout.index(axis) for axis in "NCHW"])
    if attrs.kernel_layout in KERNEL_LAYOUTS:
        weight = weight.transpose([attrs.kernel_layout.index(axis) for axis in "OIHW"])
    else:
        weight = transform_layout(weight, attrs.kernel_layout, "OIHW")
    out = _conv2d_reference_nchw(data, weight, attrs)
    return np.ascontiguousarray(out.transpose(["NCHW".index(axis) for axis in attrs.data_layout]))


def _conv2d_reference_nchw(data: np.ndarray, weight: np.ndarray, attrs: Conv2DAttrs) -> np.ndarray:
    top, left, bottom, right = attrs.padding
    x = np.pad(_accumulate(data), ((0, 0), (0, 0), (top, bottom), (left, right)))
    w = _accumulate(weight)
    win = _windows(x, w.shape[2:], attrs.strides, attrs.dilation)
    batch, channels, out_h, out_w = win.shape[:4]
    groups, out_channels = attrs.groups, w.shape[0]
    if groups == 1:
        out = np.tensordot(win, w, axes=([1, 4, 5], [1, 2, 3])).transpose(0, 3, 1, 2)
    elif groups == channels and out_channels == channels:  # depthwise
        out = np.einsum("nchwij,cij->nchw", win, w[:, 0], optimize=True)
    else:
        per_group_in, per_group_out = channels // groups, out_channels // groups
        parts = [np.tensordot(win[:, g * per_group_in:(g + 1) * per_group_in],
                              w[g * per_group_out:(g + 1) * per_group_out], axes=([1, 4, 5], [1, 2, 3]))
                 for g in range(groups)]
        out = np.concatenate(parts, axis=3).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(out).astype(data.dtype, copy=False).reshape(batch, out_channels, out_h, out_w)


register_op("nn.conv2d", attrs=Conv2DAttrs, type_rule=_conv2d_type, reference=_with_out_dtype(_conv2d_reference),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, tolerance=_TOLERANCE,
            doc="2-D convolution, NCHW data and OIHW weight.")


# ---- conv2d_transpose -----------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Conv2DTransposeAttrs(Attrs):
    """NCHW data, IOHW weight (in_channels, out_channels / groups, kh, kw); padding crops (t, l, b, r)."""
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    groups: int = 1
    output_padding: tuple[int, int] = (0, 0)

    def _check(self) -> None:
        _pair_check(self, "strides", "dilation")
        if self.groups < 1:
            self.fail(f"groups must be positive, got {self.groups}")


def _conv2d_transpose_type(arg_types, attrs: Conv2DTransposeAttrs) -> TensorType:
    data, weight = tensor_args("nn.conv2d_transpose", arg_types)
    if data.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"nn.conv2d_transpose: data {shape_text(data.shape)} and weight "
                         f"{shape_text(weight.shape)} must both be 4-D")
    dtype = same_dtype("nn.conv2d_transpose", data, weight)
    if data.shape[1] != weight.shape[0] or data.shape[1] % attrs.groups:
        raise ShapeError(f"nn.conv2d_transpose: data {shape_text(data.shape)} has {data.shape[1]} channels but "
                         f"weight {shape_text(weight.shape)} (IOHW) expects {weight.shape[0]} (groups={attrs.groups})")
    top, left, bottom, right = attrs.padding
    sizes = []
    for axis, (begin, end) in enumerate(((top, bottom), (left, right))):
        full = ((data.shape[2 + axis] - 1) * attrs.strides[axis] + (weight.shape[2 + axis] - 1) * attrs.dilation[axis]
                + 1 + attrs.output_padding[axis])
        if full - begin - end < 1:
            raise ShapeError(f"nn.conv2d_transpose: padding {attrs.padding} crops the whole output")
        sizes.append(full - begin - end)
    return TensorType((data.shape[0], weight.shape[1] * attrs.groups, *sizes), dtype)


def _conv2d_transpose_reference(data, weight, attrs: Conv2DTransposeAttrs):
    x, w = _accumulate(data), _accumulate(weight)
    batch, in_channels, height, width = x.shape
    groups = attrs.groups
    per_group_in, per_group_out = in_channels // groups, w.shape[1]
    kernel_h, kernel_w = w.shape[2:]
    (stride_h, stride_w), (dil_h, dil_w) = attrs.strides, attrs.dilation
    full_h = (height - 1) * stride_h + (kernel_h - 1) * dil_h + 1 + attrs.output_padding[0]
    full_w = (width - 1) * stride_w + (kernel_w - 1) * dil_w + 1 + attrs.output_padding[1]
    out = np.zeros((batch, per_group_out * groups, full_h, full_w), dtype=x.dtype)
    for g in range(groups):
        xg = x[:, g * per_group_in:(g + 1) * per_group_in]
        wg = w[g * per_group_in:(g + 1) * per_group_in]
        for i in range(kernel_h):
            for j in range(kernel_w):
                contribution = np.tensordot(xg, wg[:, :, i, j], axes=([1], [0])).transpose(0, 3, 1, 2)
                out[:, g * per_group_out:(g + 1) * per_group_out,
                    i * dil_h:i * dil_h + (height - 1) * stride_h + 1:stride_h,
                    j * dil_w:j * dil_w + (width - 1) * stride_w + 1:stride_w] += contribution
    top, left, bottom, right = attrs.padding
    return out[:, :, top:full_h - bottom, left:full_w - right].astype(data.dtype)


register_op("nn.conv2d_transpose", attrs=Conv2DTransposeAttrs, type_rule=_conv2d_transpose_type,
            reference=_conv2d_transpose_reference, pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2,
            tolerance=_TOLERANCE, doc="Transposed 2-D convolution (gradient of conv2d), NCHW / IOHW.")


# ---- dense and matmul -------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class DenseAttrs(Attrs):
    """dense(x, w): x (..., K) times w (N, K) transposed -> (..., N); out_dtype as conv2d's."""
    out_dtype: str = ""
    _choices = {"out_dtype": ("", "int32")}


def _dense_type(arg_types, attrs) -> TensorType:
    data, weight = tensor_args("nn.dense", arg_types)
    dtype = _accumulated_dtype("nn.dense", data, weight, getattr(attrs, "out_dtype", ""))
    if data.ndim < 1 or weight.ndim != 2 or data.shape[-1] != weight.shape[1]:
        raise ShapeError(f"nn.dense: data {shape_text(data.shape)} (..., K) and weight "
                         f"{shape_text(weight.shape)} (N, K) do not fit; K must match")
    return TensorType((*data.shape[:-1], weight.shape[0]), dtype)


register_op("nn.dense", attrs=DenseAttrs, type_rule=_dense_type,
            reference=_with_out_dtype(lambda x, w, attrs: np.matmul(_accumulate(x), _accumulate(w).T).astype(x.dtype)),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, tolerance=_TOLERANCE)


@dataclass(frozen=True, slots=True)
class DensePackAttrs(Attrs):
    """dense_pack(x, w): nn.dense with its weight packed in blocks of n rows (`pack_dense_weight`); `units` is N, the
    output features (the last block is zero-padded past N)."""
    units: int = 1

    def _check(self) -> None:
        if self.units < 1:
            self.fail(f"units must be positive, got {self.units}")


def pack_dense_weight(weight: np.ndarray, block: int, empty=np.empty) -> np.ndarray:
    """nn.dense's weight W[N, K] as nn.dense_pack reads it: packed[j // n, k, j % n] = W[j, k], n = `block`, the last
    block zero-padded past N (TVM's "NK{n}n" layout). A GEMM reads a block as one contiguous stream of K rows of n
    floats; a matmul's B[K, N] packs as pack_dense_weight(B.T, n). `empty(shape, dtype)` allocates the result (an
    aligned allocator for a target that keeps it as a constant)."""
    if weight.ndim != 2 or block < 1:
        raise ValueError(f"pack_dense_weight: a weight (N, K) and a positive block, got {weight.shape} and {block}")
    units, depth = weight.shape
    blocks = -(-units // block)
    packed = empty((blocks, depth, block), weight.dtype)
    padded = np.zeros((blocks * block, depth), weight.dtype)
    padded[:units] = weight
    packed[...] = padded.reshape(blocks, block, depth).transpose(0, 2, 1)
    return packed


def _unpack_dense_weight(packed: np.ndarray, units: int) -> np.ndarray:
    blocks, depth, block = packed.shape
    return packed.transpose(0, 2, 1).reshape(blocks * block, depth)[:units]


def _dense_pack_type(arg_types, attrs: DensePackAttrs) -> TensorType:
    data, weight = tensor_args("nn.dense_pack", arg_types)
    dtype = same_dtype("nn.dense_pack", data, weight)
    if data.ndim < 1 or weight.ndim != 3 or data.shape[-1] != weight.shape[1]:
        raise ShapeError(f"nn.dense_pack: data {shape_text(data.shape)} (..., K) and weight {shape_text(weight.shape)} "
                         "(N / n, K, n) do not fit; K must match (pack_dense_weight makes the weight)")
    blocks, _, block = weight.shape
    if not (blocks - 1) * block < attrs.units <= blocks * block:
        raise ShapeError(f"nn.dense_pack: units {attrs.units} do not fill the weight's {blocks} blocks of {block}; "
                         f"units must be in ({(blocks - 1) * block}, {blocks * block}]")
    return TensorType((*data.shape[:-1], attrs.units), dtype)


def _dense_pack_reference(x: np.ndarray, w: np.ndarray, attrs: DensePackAttrs) -> np.ndarray:
    return np.matmul(_accumulate(x), _accumulate(_unpack_dense_weight(w, attrs.units)).T).astype(x.dtype)


register_op("nn.dense_pack", attrs=DensePackAttrs, type_rule=_dense_pack_type, reference=_dense_pack_reference,
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, tolerance=_TOLERANCE,
            doc="nn.dense with a weight packed in blocks of n output features: weight[N / n, K, n] "
                "(pack_dense_weight); TVM's contrib_dense_pack. Targets pack constant weights once, at compile time.")


def _matmul_type(arg_types, attrs) -> TensorType:
    lhs, rhs = tensor_args("nn.matmul", arg_types)
    dtype = same_dtype("nn.matmul", lhs, rhs)
    if lhs.ndim == 0 or rhs.ndim == 0:
        raise ShapeError(f"nn.matmul: inputs {shape_text(lhs.shape)} and {shape_text(rhs.shape)} must not be scalars")
    a = lhs.shape if lhs.ndim > 1 else (1, *lhs.shape)
    b = rhs.shape if rhs.ndim > 1 else (*rhs.shape, 1)
    if a[-1] != b[-2]:
        raise ShapeError(f"nn.matmul: {shape_text(lhs.shape)} @ {shape_text(rhs.shape)}: inner dimensions "
                         f"{a[-1]} and {b[-2]} differ")
    batch = broadcast_shape("nn.matmul", a[:-2], b[:-2])
    shape = (*batch, *(a[-2:-1] if lhs.ndim > 1 else ()), *(b[-1:] if rhs.ndim > 1 else ()))
    return TensorType(shape, dtype)


register_op("nn.matmul", type_rule=_matmul_type,
            reference=lambda a, b, attrs: np.matmul(_accumulate(a), _accumulate(b)).astype(a.dtype),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=2, tolerance=_TOLERANCE,
            doc="numpy.matmul semantics: batched, broadcasting, 1-D operands promoted.")


# ---- normalization ---------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class BatchNormAttrs(Attrs):
    """Inference batch norm: (x - mean) / sqrt(var + epsilon) * gamma + beta along `axis`."""
    axis: int = 1
    epsilon: float = 1e-5


def _channel_vectors_type(op: str, data: TensorType, vectors, axis: int) -> None:
    channels = data.shape[axis]
    for vector in vectors:
        if vector.shape != (channels,):
            raise ShapeError(f"{op}: data {shape_text(data.shape)} has {channels} channels on axis {axis}, "
                             f"but a parameter has shape {shape_text(vector.shape)}; expected ({channels},)")


def _batch_norm_type(arg_types, attrs: BatchNormAttrs) -> TensorType:
    data, *vectors = tensor_args("nn.batch_norm", arg_types)
    axis = normalize_axis("nn.batch_norm", attrs.axis, data.ndim)
    _channel_vectors_type("nn.batch_norm", data, vectors, axis)
    return TensorType(data.shape, same_dtype("nn.batch_norm", data, *vectors))


def _along(vector: np.ndarray, axis: int, ndim: int) -> np.ndarray:
    return vector.reshape((-1,) + (1,) * (ndim - axis - 1))


def _batch_norm_reference(x, gamma, beta, mean, var, attrs: BatchNormAttrs):
    axis = attrs.axis % x.ndim
    compute = _accumulate(x)
    scale = _along(gamma / np.sqrt(var.astype(compute.dtype) + attrs.epsilon), axis, x.ndim)
    out = (compute - _along(mean, axis, x.ndim)) * scale + _along(beta, axis, x.ndim)
    return out.astype(x.dtype)


register_op("nn.batch_norm", attrs=BatchNormAttrs, type_rule=_batch_norm_type, reference=_batch_norm_reference,
            pattern=OpPattern.INJECTIVE, num_inputs=5, tolerance=_TOLERANCE,
            doc="inputs: data, gamma, beta, moving_mean, moving_var; returns the normalized data.")


@dataclass(frozen=True, slots=True)
class BiasAddAttrs(Attrs):
    axis: int = 1


def _bias_add_type(arg_types, attrs: BiasAddAttrs) -> TensorType:
    data, bias = tensor_args("nn.bias_add", arg_types)
    axis = normalize_axis("nn.bias_add", attrs.axis, data.ndim)
    _channel_vectors_type("nn.bias_add", data, [bias], axis)
    return TensorType(data.shape, same_dtype("nn.bias_add", data, bias))


register_op("nn.bias_add", attrs=BiasAddAttrs, type_rule=_bias_add_type,
            reference=lambda x, b, a: (x + _along(b, a.axis % x.ndim, x.ndim)).astype(x.dtype),
            pattern=OpPattern.BROADCAST, num_inputs=2)


@dataclass(frozen=True, slots=True)
class LayerNormAttrs(Attrs):
    """Normalize over axes [axis, ..., ndim - 1] (ONNX LayerNormalization), then * gamma + beta."""
    axis: int = -1
    epsilon: float = 1e-5


def _layer_norm_type(arg_types, attrs: LayerNormAttrs) -> TensorType:
    data, gamma, beta = tensor_args("nn.layer_norm", arg_types)
    axis = normalize_axis("nn.layer_norm", attrs.axis, data.ndim)
    normalized = data.shape[axis:]
    for parameter in (gamma, beta):
        if broadcast_shape("nn.layer_norm", normalized, parameter.shape) != normalized:
            raise ShapeError(f"nn.layer_norm: parameter {shape_text(parameter.shape)} does not broadcast to the "
                             f"normalized shape {shape_text(normalized)} of data {shape_text(data.shape)}")
    return TensorType(data.shape, same_dtype("nn.layer_norm", data, gamma, beta))


def _layer_norm_reference(x, gamma, beta, attrs: LayerNormAttrs):
    axes = tuple(range(attrs.axis % x.ndim, x.ndim))
    compute = _accumulate(x)
    mean = compute.mean(axis=axes, keepdims=True)
    var = ((compute - mean) ** 2).mean(axis=axes, keepdims=True)
    return ((compute - mean) / np.sqrt(var + attrs.epsilon) * gamma + beta).astype(x.dtype)


register_op("nn.layer_norm", attrs=LayerNormAttrs, type_rule=_layer_norm_type, reference=_layer_norm_reference,
            pattern=OpPattern.OPAQUE, num_inputs=3, tolerance=_TOLERANCE)


@dataclass(frozen=True, slots=True)
class LRNAttrs(Attrs):
    """Local response normalization across `axis`: x / (bias + alpha / size * sum(x^2))^beta."""
    size: int = 5
    axis: int = 1
    alpha: float = 1e-4
    beta: float = 0.75
    bias: float = 1.0

    def _check(self) -> None:
        if self.size < 1:
            self.fail(f"size must be positive, got {self.size}")


def _lrn_reference(x, attrs: LRNAttrs):
    axis = attrs.axis % x.ndim
    compute = _accumulate(x)
    square = np.moveaxis(compute * compute, axis, -1)
    before, after = (attrs.size - 1) // 2, attrs.size - 1 - (attrs.size - 1) // 2
    padded = np.pad(square, [(0, 0)] * (square.ndim - 1) + [(before, after)])
    summed = sliding_window_view(padded, attrs.size, axis=-1).sum(axis=-1)
    summed = np.moveaxis(summed, -1, axis)
    return (compute / (attrs.bias + attrs.alpha / attrs.size * summed) ** attrs.beta).astype(x.dtype)


def _same_as_input(op: str):
    def rule(arg_types, attrs):
        (data,) = tensor_args(op, arg_types)
        require_float(op, data)
        if hasattr(attrs, "axis"):
            normalize_axis(op, attrs.axis, data.ndim)
        return data
    return rule


register_op("nn.lrn", attrs=LRNAttrs, type_rule=_same_as_input("nn.lrn"), reference=_lrn_reference,
            pattern=OpPattern.OPAQUE, num_inputs=1, tolerance=_TOLERANCE)


# ---- softmax ---------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class SoftmaxAttrs(Attrs):
    axis: int = -1


def _softmax(x, attrs):
    compute = _accumulate(x)
    shifted = compute - compute.max(axis=attrs.axis, keepdims=True)
    exp = np.exp(shifted)
    return (exp / exp.sum(axis=attrs.axis, keepdims=True)).astype(x.dtype)


def _log_softmax(x, attrs):
    compute = _accumulate(x)
    shifted = compute - compute.max(axis=attrs.axis, keepdims=True)
    return (shifted - np.log(np.exp(shifted).sum(axis=attrs.axis, keepdims=True))).astype(x.dtype)


register_op("nn.softmax", attrs=SoftmaxAttrs, type_rule=_same_as_input("nn.softmax"), reference=_softmax,
            pattern=OpPattern.OPAQUE, num_inputs=1, tolerance=_TOLERANCE)
register_op("nn.log_softmax", attrs=SoftmaxAttrs, type_rule=_same_as_input("nn.log_softmax"),
            reference=_log_softmax, pattern=OpPattern.OPAQUE, num_inputs=1, tolerance=_TOLERANCE)


# ---- pooling ---------------------------------------------------------------------------

# NHWC pools exist so that alter_layout can keep a converted region in NHWC through its
# pools instead of transposing around each one (squeezenet: 1.2 ms of 8 ms were such transposes).
# Blocked NCHW{x}c pools (x a power of two) keep a region converted to NCHW{x}c conv2d blocked too.
POOL_LAYOUTS = ("NCHW", "NHWC")


def _check_pool_layout(attrs: Attrs) -> None:
    if attrs.layout not in POOL_LAYOUTS and not data_layout_block(attrs.layout):
        raise AttrsError(f"{type(attrs).__name__}.layout = {attrs.layout!r} is not one of {POOL_LAYOUTS} nor a blocked "
                         "layout NCHW{x}c with x a power of two such as 'NCHW8c'")

@dataclass(frozen=True, slots=True)
class MaxPool2DAttrs(Attrs):
    """Max pooling of NCHW (or NHWC, or NCHW{x}c) data; padding is (top, left, bottom, right)."""
    pool_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    layout: str = "NCHW"

    def _check(self) -> None:
        _pair_check(self, "pool_size", "strides", "dilation")
        _check_pool_layout(self)


@dataclass(frozen=True, slots=True)
class AvgPool2DAttrs(Attrs):
    """Average pooling of NCHW (or NHWC, or NCHW{x}c) data; `count_include_pad` counts the explicit padding in the
    divisor."""
    pool_size: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    padding: tuple[int, int, int, int] = (0, 0, 0, 0)
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False
    count_include_pad: bool = False
    layout: str = "NCHW"

    def _check(self) -> None:
        _pair_check(self, "pool_size", "strides", "dilation")
        _check_pool_layout(self)


def _pool_type(op: str):
    def rule(arg_types, attrs) -> TensorType:
        (data,) = tensor_args(op, arg_types)
        block = data_layout_block(attrs.layout)
        if block:   # (N, C/x, H, W, x): the NCHW rule on (N, C/x, H, W), the block kept
            if data.ndim != 5 or data.shape[4] != block:
                raise ShapeError(f"{op}: data {shape_text(data.shape)} is not in {attrs.layout}: expected "
                                 f"(N, C/{block}, H, W, {block})")
            nchw = nchw_rule(arg_types=(TensorType(data.shape[:4], data.dtype),),
                             attrs=dataclasses.replace(attrs, layout="NCHW"))
            return TensorType((*nchw.shape, block), nchw.dtype)
        if data.ndim != 4:
            raise ShapeError(f"{op}: data {shape_text(data.shape)} must be 4-D ({attrs.layout})")
        if attrs.layout != "NCHW":
            nchw = nchw_rule(arg_types=(TensorType(_permute(data.shape, attrs.layout, "NCHW"), data.dtype),),
                             attrs=dataclasses.replace(attrs, layout="NCHW"))
            return TensorType(_permute(nchw.shape, "NCHW", attrs.layout), nchw.dtype)
        top, left, bottom, right = attrs.padding
        height = _window_out(op, data.shape[2], attrs.pool_size[0], attrs.strides[0], attrs.dilation[0],
                             top + bottom, attrs.ceil_mode, top)
        width = _window_out(op, data.shape[3], attrs.pool_size[1], attrs.strides[1], attrs.dilation[1],
                            left + right, attrs.ceil_mode, left)
        return TensorType((*data.shape[:2], height, width), data.dtype)
    nchw_rule = rule
    return rule


def _in_layout(reference):
    """The NCHW numpy reference of a pool, applied to data in attrs.layout."""
    def run(x, attrs):
        if attrs.layout == "NCHW":
            return reference(x, attrs)
        if data_layout_block(attrs.layout):
            out = reference(transform_layout(x, attrs.layout, "NCHW"), dataclasses.replace(attrs, layout="NCHW"))
            return transform_layout(out, "NCHW", attrs.layout)
        nchw = x.transpose([attrs.layout.index(axis) for axis in "NCHW"])
        out = reference(nchw, dataclasses.replace(attrs, layout="NCHW"))
        return np.ascontiguousarray(out.transpose(["NCHW".index(axis) for axis in attrs.layout]))
    return run


def _pool_padding(x, attrs, out_h, out_w):
    """Padding (top, bottom, left, right) including the extra end padding that ceil_mode needs."""
    top, left, bottom, right = attrs.padding
    need_h = (out_h - 1) * attrs.strides[0] + (attrs.pool_size[0] - 1) * attrs.dilation[0] + 1
    need_w = (out_w - 1) * attrs.strides[1] + (attrs.pool_size[1] - 1) * attrs.dilation[1] + 1
    extra_h = max(0, need_h - (x.shape[2] + top + bottom))
    extra_w = max(0, need_w - (x.shape[3] + left + right))
    return top, bottom, left, right, extra_h, extra_w


def _max_pool2d_reference(x, attrs: MaxPool2DAttrs):
    out_type = _pool_type("nn.max_pool2d")((TensorType(x.shape, _dtype_name(x)),), attrs)
    top, bottom, left, right, extra_h, extra_w = _pool_padding(x, attrs, *out_type.shape[2:])
    low = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom + extra_h), (left, right + extra_w)), constant_values=low)
    win = _windows(padded, attrs.pool_size, attrs.strides, attrs.dilation)
    return win.max(axis=(4, 5))[:, :, :out_type.shape[2], :out_type.shape[3]]


def _avg_pool2d_reference(x, attrs: AvgPool2DAttrs):
    out_type = _pool_type("nn.avg_pool2d")((TensorType(x.shape, _dtype_name(x)),), attrs)
    top, bottom, left, right, extra_h, extra_w = _pool_padding(x, attrs, *out_type.shape[2:])
    compute = _accumulate(x)
    padding = ((0, 0), (0, 0), (top, bottom + extra_h), (left, right + extra_w))
    win = _windows(np.pad(compute, padding), attrs.pool_size, attrs.strides, attrs.dilation)
    total = win.sum(axis=(4, 5))[:, :, :out_type.shape[2], :out_type.shape[3]]
    # The divisor counts input cells, plus the explicit padding when count_include_pad;
    # the extra end padding that ceil_mode adds is never counted.
    mask = np.zeros((1, 1, *x.shape[2:]), dtype=np.float64)
    mask = np.pad(mask + 1, padding, constant_values=0)
    if attrs.count_include_pad:
        mask[:, :, :x.shape[2] + top + bottom, :x.shape[3] + left + right] = 1
    counts = _windows(mask, attrs.pool_size, attrs.strides, attrs.dilation).sum(axis=(4, 5))
    counts = counts[:, :, :out_type.shape[2], :out_type.shape[3]]
    return (total / np.maximum(counts, 1)).astype(x.dtype)


def _dtype_name(x: np.ndarray) -> str:
    return "bool" if x.dtype == np.bool_ else x.dtype.name


register_op("nn.max_pool2d", attrs=MaxPool2DAttrs, type_rule=_pool_type("nn.max_pool2d"),
            reference=_in_layout(_max_pool2d_reference), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1)
register_op("nn.avg_pool2d", attrs=AvgPool2DAttrs, type_rule=_pool_type("nn.avg_pool2d"),
            reference=_in_layout(_avg_pool2d_reference), pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1,
            tolerance=_TOLERANCE)


def _global_pool_type(op: str):
    def rule(arg_types, attrs) -> TensorType:
        (data,) = tensor_args(op, arg_types)
        if data.ndim < 3:
            raise ShapeError(f"{op}: data {shape_text(data.shape)} needs at least 3 dimensions (N, C, spatial...)")
        return TensorType((*data.shape[:2], *([1] * (data.ndim - 2))), data.dtype)
    return rule


register_op("nn.global_avg_pool2d", type_rule=_global_pool_type("nn.global_avg_pool2d"),
            reference=lambda x, a: _accumulate(x).mean(axis=tuple(range(2, x.ndim)), keepdims=True).astype(x.dtype),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1, tolerance=_TOLERANCE)
register_op("nn.global_max_pool2d", type_rule=_global_pool_type("nn.global_max_pool2d"),
            reference=lambda x, a: x.max(axis=tuple(range(2, x.ndim)), keepdims=True),
            pattern=OpPattern.OUT_ELEMWISE_FUSABLE, num_inputs=1)
