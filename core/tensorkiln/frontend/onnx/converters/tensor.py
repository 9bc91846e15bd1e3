"""Converters for ONNX shape and data-movement ops. Shape parameters that arrive as
inputs (Reshape's shape, Slice's starts, ...) must be constant at import time."""
from __future__ import annotations

import numpy as np

from ....graph.expr import Constant, Expr, owned_constant
from ....graph.ops._rules import broadcast_shape
from ....ir.dtypes import to_numpy
from ....ir.errors import ShapeError
from ..node import OnnxNode
from ._registry import converter
from ._util import ints, onnx_dtype, scalar, variadic_tree


@converter("Constant")
def _constant(node: OnnxNode) -> Expr:
    for name in ("value", "value_float", "value_floats", "value_int", "value_ints"):
        if name in node.attrs:
            value = node.attrs[name]
            if name in ("value_float", "value_floats"):
                return Constant(np.asarray(value, dtype=np.float32))
            if name in ("value_int", "value_ints"):
                return Constant(np.asarray(value, dtype=np.int64))
            return Constant(np.asarray(value))
    raise node.unsupported(f"only tensor, float and int constants are supported; got {sorted(node.attrs)}")


@converter("ConstantOfShape")
def _constant_of_shape(node: OnnxNode) -> Expr:
    shape = node.const_ints(0, "the shape")
    value = node.attr("value")
    fill = np.zeros((), np.float32) if value is None else np.asarray(value).reshape(-1)[0]
    if any(d < 0 for d in shape):
        raise ShapeError(f"ONNX node {node.name!r} (ConstantOfShape): shape {shape} has a negative dimension")
    node.check_fits(shape, str(np.asarray(fill).dtype), "the output")
    return owned_constant(np.full(shape, fill, dtype=np.asarray(fill).dtype))   # made here: not copied again


@converter("Shape")
def _shape(node: OnnxNode) -> Expr:
    shape = node.required(0).shape
    start, end = node.attr("start", 0), node.attr("end")
    return Constant(np.array(shape[slice(start, end)], dtype=np.int64))


@converter("Size")
def _size(node: OnnxNode) -> Expr:
    return Constant(np.array(int(np.prod(node.required(0).shape, dtype=np.int64)), dtype=np.int64))


@converter("Range")
def _range(node: OnnxNode) -> Expr:
    # scalars by the spec; one-element tensors (what a Split of a shape gives, e.g. in AffineGrid's body) too
    start, limit, delta = (_one_element(node, i, name) for i, name in enumerate(("start", "limit", "delta")))
    if np.asarray(delta).reshape(-1)[:1].tolist() == [0]:
        raise ShapeError(f"ONNX node {node.name!r} (Range): delta is 0")
    count = max(int(np.ceil((np.asarray(limit, np.float64) - start) / delta).reshape(-1)[0]), 0)
    node.check_fits((count,), str(np.asarray(start).dtype), "the output")
    return Constant(np.arange(start, limit, delta).astype(np.asarray(start).dtype))


def _one_element(node: OnnxNode, index: int, name: str) -> np.ndarray:
    value = np.asarray(node.const(index, name))
    if value.size != 1:
        raise ShapeError(f"ONNX node {node.name!r} ({node.op_type}): {name} must be a scalar, got shape {value.shape}")
    return value.reshape(())


@converter("EyeLike")
def _eye_like(node: OnnxNode) -> Expr:
    data = node.required(0)
    dtype = onnx_dtype(node.attr("dtype"), node) if node.attr("dtype") is not None else data.dtype
    node.check_fits(data.shape, dtype, "the output")
    return Constant(np.eye(*data.shape, k=node.attr("k", 0), dtype=to_numpy(dtype)))


@converter("Reshape")
def _reshape(node: OnnxNode) -> Expr:
    data = node.required(0)
    shape = list(node.const_ints(1, "the shape") if node.opset >= 5 else node.attr("shape"))
    if not node.attr("allowzero", 0):
        shape = [data.shape[i] if d == 0 else d for i, d in enumerate(shape)]
    return node.call("reshape", data, newshape=tuple(shape))


@converter("Flatten")
def _flatten(node: OnnxNode) -> Expr:
    data = node.required(0)
    axis = node.attr("axis", 1)
    axis = axis + data.ndim if axis < 0 else axis
    rows = int(np.prod(data.shape[:axis], dtype=np.int64))
    return node.call("reshape", data, newshape=(rows, int(np.prod(data.shape[axis:], dtype=np.int64))))


@converter("Transpose")
def _transpose(node: OnnxNode) -> Expr:
    perm = node.attr("perm")
    return node.call("transpose", node.required(0), axes=None if perm is None else tuple(perm))


def _axes(node: OnnxNode, input_index: int):
    if node.opset >= 13:
        value = node.const(input_index, "axes")
        return None if value is None else ints(value)
    value = node.attr("axes")
    return None if value is None else tuple(value)


@converter("Squeeze")
def _squeeze(node: OnnxNode) -> Expr:
    return node.call("squeeze", node.required(0), axis=_axes(node, 1))


@converter("Unsqueeze")
def _unsqueeze(node: OnnxNode) -> Expr:
    data = node.required(0)
    axes = _axes(node, 1) or ()
    rank = data.ndim + len(axes)
    positions = sorted(a % rank for a in axes)
    if len(set(positions)) != len(positions):
        raise ShapeError(f"Unsqueeze {node.name!r}: axes {axes} repeat an axis")
    shape, source = [], iter(data.shape)
    for i in range(rank):
        shape.append(1 if i in positions else next(source))
    return node.call("reshape", data, newshape=tuple(shape))


@converter("Concat")
def _concat(node: OnnxNode) -> Expr:
    args = [a for a in node.inputs if a is not None]
    return variadic_tree(node, "concatenate", args, axis=node.attr("axis"))


@converter("Split")
def _split(node: OnnxNode):
    data = node.required(0)
    axis = node.attr("axis", 0) % data.ndim
    size = data.shape[axis]
    sizes = node.const_ints(1, "split") if node.opset >= 13 and node.input(1) is not None else node.attr("split")
    if sizes is None:
        parts = node.attr("num_outputs", node.num_outputs)
        chunk = -(-size // parts)
        sizes = [min(chunk, size - i * chunk) for i in range(parts)]
    points = list(np.cumsum(sizes)[:-1])
    out = node.call("split", data, indices_or_sections=tuple(int(p) for p in points), axis=axis)
    return out


@converter("Slice")
def _slice(node: OnnxNode) -> Expr:
    data = node.required(0)
    if node.opset < 10:
        starts, ends = node.attr("starts"), node.attr("ends")
        axes, steps = node.attr("axes"), None
    else:
        starts, ends = node.const_ints(1, "starts"), node.const_ints(2, "ends")
        axes = node.const(3, "axes")
        steps = node.const(4, "steps")
        axes = None if axes is None else ints(axes)
        steps = None if steps is None else ints(steps)
    axes = tuple(range(len(starts))) if axes is None else tuple(a % data.ndim for a in axes)
    limit = 2 ** 62
    clamp = lambda values: tuple(max(-limit, min(limit, int(v))) for v in values)  # noqa: E731
    return node.call("strided_slice", data, begin=clamp(starts), end=clamp(ends),
                     strides=None if steps is None else tuple(steps), axes=axes)


@converter("Gather")
def _gather(node: OnnxNode) -> Expr:
    return node.call("take", node.required(0), node.required(1), axis=node.attr("axis", 0))


@converter("GatherElements")
def _gather_elements(node: OnnxNode) -> Expr:
    return node.call("gather_elements", node.required(0), node.required(1), axis=node.attr("axis", 0))


@converter("GatherND")
def _gather_nd(node: OnnxNode) -> Expr:
    return node.call("gather_nd", node.required(0), node.required(1), batch_dims=node.attr("batch_dims", 0))


@converter("Expand")
def _expand(node: OnnxNode) -> Expr:
    data = node.required(0)
    shape = broadcast_shape(f"Expand {node.name!r}", data.shape, node.const_ints(1, "the shape"))
    if shape == data.shape:
        return data
    return node.call("broadcast_to", data, shape=shape)


@converter("Tile")
def _tile(node: OnnxNode) -> Expr:
    return node.call("tile", node.required(0), reps=node.const_ints(1, "repeats"))


@converter("Pad")
def _pad(node: OnnxNode) -> Expr:
    data = node.required(0)
    mode = node.attr("mode", "constant")
    if node.opset < 11:
        pads, value = node.attr("pads") or node.attr("paddings"), node.attr("value", 0.0)
        axes = None
    else:
        pads = node.const_ints(1, "pads")
        constant = node.const(2, "constant_value")
        value = 0 if constant is None or constant.size == 0 else constant.reshape(-1)[0].item()
        axes = node.const(3, "axes")
        axes = None if axes is None else [a % data.ndim for a in ints(axes)]
    axes = list(range(data.ndim)) if axes is None else axes
    width = [(0, 0)] * data.ndim
    for i, axis in enumerate(axes):
        width[axis] = (int(pads[i]), int(pads[i + len(axes)]))
    return node.call("nn.pad", data, pad_width=tuple(width), pad_mode=mode, pad_value=float(value))


@converter("DepthToSpace")
def _depth_to_space(node: OnnxNode) -> Expr:
    data = node.required(0)
    block = node.attr("blocksize")
    n, c, h, w = data.shape
    if node.attr("mode", "DCR") == "DCR":
        tmp = node.call("reshape", data, newshape=(n, block, block, c // block ** 2, h, w))
        tmp = node.call("transpose", tmp, axes=(0, 3, 4, 1, 5, 2))
    else:
        tmp = node.call("reshape", data, newshape=(n, c // block ** 2, block, block, h, w))
        tmp = node.call("transpose", tmp, axes=(0, 1, 4, 2, 5, 3))
    return node.call("reshape", tmp, newshape=(n, c // block ** 2, h * block, w * block))


@converter("SpaceToDepth")
def _space_to_depth(node: OnnxNode) -> Expr:
    data = node.required(0)
    block = node.attr("blocksize")
    n, c, h, w = data.shape
    tmp = node.call("reshape", data, newshape=(n, c, h // block, block, w // block, block))
    axes = (0, 1, 3, 5, 2, 4) if node.attr("mode", "DCR") == "CRD" else (0, 3, 5, 1, 2, 4)
    tmp = node.call("transpose", tmp, axes=axes)
    return node.call("reshape", tmp, newshape=(n, c * block * block, h // block, w // block))


@converter("ArgMax", "ArgMin")
def _arg_reduce(node: OnnxNode) -> Expr:
    return node.call(node.op_type.lower(), node.required(0), axis=node.attr("axis", 0),
                     keepdims=bool(node.attr("keepdims", 1)), select_last_index=bool(node.attr("select_last_index", 0)))


@converter("TopK")
def _topk(node: OnnxNode) -> Expr:
    k = int(node.const(1, "K").reshape(-1)[0]) if node.opset >= 10 else node.attr("k")
    return node.call("topk", node.required(0), k=k, axis=node.attr("axis", -1),
                     largest=bool(node.attr("largest", 1)), sorted=bool(node.attr("sorted", 1)))


@converter("CumSum")
def _cumsum(node: OnnxNode) -> Expr:
    axis = int(node.const(1, "axis").reshape(-1)[0])
    return node.call("cumsum", node.required(0), axis=axis, exclusive=bool(node.attr("exclusive", 0)),
                     reverse=bool(node.attr("reverse", 0)))


@converter("Trilu")
def _trilu(node: OnnxNode) -> Expr:
    data = node.required(0)
    k = 0 if node.input(1) is None else int(node.const(1, "k").reshape(-1)[0])
    ones = np.ones(data.shape[-2:], dtype=bool)
    mask = np.triu(ones, k) if node.attr("upper", 1) else np.tril(ones, k)
    return node.call("where", Constant(mask), data, scalar(0, data.dtype))


@converter("OneHot")
def _one_hot(node: OnnxNode) -> Expr:
    indices, values = node.required(0), node.required(2)
    depth = int(node.const(1, "depth").reshape(-1)[0])
    node.check_fits((*indices.shape, depth), values.dtype, "the output")
    axis = node.attr("axis", -1) % (indices.ndim + 1)
    iota_shape = [1] * (indices.ndim + 1)
    iota_shape[axis] = depth
    iota = Constant(np.arange(depth, dtype=to_numpy(indices.dtype)).reshape(iota_shape))
    # Negative indices count from the end; indices still out of range match no position (all "off").
    negative = node.call("less", indices, scalar(0, indices.dtype))
    wrapped = node.call("where", negative, node.call("add", indices, scalar(depth, indices.dtype)), indices)
    expanded = node.call("expand_dims", wrapped, axis=axis)
    off = node.call("strided_slice", values, begin=(0,), end=(1,))
    on = node.call("strided_slice", values, begin=(1,), end=(2,))
    off, on = node.call("reshape", off, newshape=()), node.call("reshape", on, newshape=())
    return node.call("where", node.call("equal", expanded, iota), on, off)


@converter("Resize", "Upsample")
def _resize(node: OnnxNode) -> Expr:
    data = node.required(0)
    rank = data.ndim
    mode = node.attr("mode", "nearest")
    method = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}.get(mode)
    if method is None:
        raise node.unsupported(f"mode {mode!r} is not supported")
    antialias = bool(node.attr("antialias", 0))
    if antialias and method == "nearest":
        raise node.unsupported("antialias=1 applies to the linear and cubic modes, not nearest")
    if node.op_type == "Upsample" or node.opset < 11:
        scales = node.attr("scales") if node.op_type == "Upsample" and node.opset < 9 else node.const(1, "scales")
        scales = [float(s) for s in np.asarray(scales).reshape(-1)]
        size = [int(np.floor(d * s)) for d, s in zip(data.shape, scales)]
        return node.call("image.resize", data, size=tuple(size), scales=tuple(scales), method=method,
                         coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    roi = node.const(1, "roi")
    scales = node.const(2, "scales")
    sizes = node.const(3, "sizes")
    axes = node.attr("axes")
    axes = list(range(rank)) if axes is None else [a % rank for a in axes]
    full_scales = [1.0] * rank
    full_size = list(data.shape)
    full_roi = None
    if roi is not None and roi.size:
        full_roi = [0.0] * rank + [1.0] * rank
        for i, axis in enumerate(axes):
            full_roi[axis] = float(roi.reshape(-1)[i])
            full_roi[axis + rank] = float(roi.reshape(-1)[i + len(axes)])
    if sizes is not None and sizes.size:
        for axis, value in zip(axes, ints(sizes)):
            full_size[axis] = value
        full_scales = [o / i if i else 1.0 for o, i in zip(full_size, data.shape)]
        policy = node.attr("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            chosen = [full_scales[a] for a in axes]
            scale = min(chosen) if policy == "not_larger" else max(chosen)
            full_scales = [scale if i in axes else 1.0 for i in range(rank)]
            full_size = [int(scale * data.shape[i] + 0.5) if i in axes else data.shape[i] for i in range(rank)]
    elif scales is not None and scales.size:
        for axis, value in zip(axes, np.asarray(scales).reshape(-1)):
            full_scales[axis] = float(value)
        full_size = [int(np.floor(d * s)) for d, s in zip(data.shape, full_scales)]
    else:
        raise node.unsupported("needs either scales or sizes")
    return node.call("image.resize", data, size=tuple(full_size), scales=tuple(full_scales), method=method,
                     coordinate_transformation_mode=node.attr("coordinate_transformation_mode", "half_pixel"),
                     nearest_mode=node.attr("nearest_mode", "round_prefer_floor"),
                     cubic_coeff_a=node.attr("cubic_coeff_a", -0.75),
                     exclude_outside=bool(node.attr("exclude_outside", 0)),
                     extrapolation_value=node.attr("extrapolation_value", 0.0),
                     roi=None if full_roi is None else tuple(full_roi), antialias=antialias)
