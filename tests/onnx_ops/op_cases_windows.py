"""Inputs for tests/ops' per-op numerics tests of the N-d windowed ops (nn.max_pool, nn.avg_pool,
nn.max_pool_indices, nn.conv_transpose), image.roi_align and image.resize's antialias path; merged
into tests/onnx_ops/op_cases.CASES (and so into tests/ops/op_inputs.CASES)."""
from __future__ import annotations

import numpy as np

from tensorkiln.graph.ops.conv_nd import ConvAttrs
from tensorkiln.graph.ops.image import ResizeAttrs
from tensorkiln.graph.ops.roi_align import RoiAlignAttrs
from tensorkiln.graph.ops.window_nd import AvgPoolAttrs, ConvTransposeAttrs, MaxPoolAttrs, MaxPoolIndicesAttrs


def _case(*args, **kwargs):
    from ..ops.op_inputs import Case   # op_inputs imports this module: import at call time
    return Case(*args, **kwargs)


_WINDOWS = (dict(pool_size=(2, 2, 2), strides=(2, 2, 2), padding=(0,) * 6, dilation=(1, 1, 1)),
            dict(pool_size=(3, 2, 2), strides=(1, 2, 1), padding=(1, 0, 1, 1, 1, 0), dilation=(1, 1, 2),
                 ceil_mode=True))


def _volume(rng, size):
    return rng.uniform(-2, 2, (1, 2, 5, 6, 4) if size == "tiny" else (2, 8, 16, 16, 16)).astype("float32")


def _max_pool(rng, size):
    return [_case([_volume(rng, size)], MaxPoolAttrs(**w), label=str(i)) for i, w in enumerate(_WINDOWS)] + [
        _case([rng.uniform(-2, 2, (1, 3, 11)).astype("float32")],
              MaxPoolAttrs(pool_size=(3,), strides=(2,), padding=(1, 1), dilation=(2,)), label="1-D")]


def _avg_pool(rng, size):
    return [_case([_volume(rng, size)], AvgPoolAttrs(**w, count_include_pad=bool(i)), label=str(i), atol=1e-5)
            for i, w in enumerate(_WINDOWS)]


def _max_pool_indices(rng, size):
    x = rng.uniform(-2, 2, (2, 2, 6, 5) if size == "tiny" else (2, 16, 32, 32)).astype("float32")
    x.reshape(-1)[::5] = 1.0   # ties: the first tap wins
    return [_case([x], MaxPoolIndicesAttrs(pool_size=(3, 2), strides=(2, 1), padding=(1, 0, 1, 1), dilation=(1, 1),
                                           storage_order=order), label=f"storage_order {order}")
            for order in (0, 1)] + [
        _case([_volume(rng, size)], MaxPoolIndicesAttrs(**_WINDOWS[1], storage_order=1), label="3-D")]


def _conv_transpose(rng, size):
    shapes = ((1, 4, 3, 2, 3), (4, 1, 2, 3, 2)) if size == "tiny" else ((1, 8, 8, 8, 8), (8, 4, 3, 3, 3))
    x, w = (rng.uniform(-1, 1, s).astype("float32") for s in shapes)
    return [_case([x, w], ConvTransposeAttrs(strides=(2, 1, 2), padding=(1, 0, 0, 0, 1, 0), dilation=(1, 1, 2),
                                             groups=2, output_padding=(1, 0, 0)), label="groups 2", atol=1e-4),
            _case([x, w], ConvTransposeAttrs(strides=(1, 1, 1), padding=(0,) * 6, dilation=(1, 1, 1),
                                             output_padding=(0, 0, 0)), label="plain", atol=1e-4)]


def _conv(rng, size):
    """3-D with groups (depthwise too), strides, dilations and uneven padding, and a 4-D one."""
    data = (1, 4, 5, 4, 6) if size == "tiny" else (1, 16, 16, 16, 16)
    x = rng.uniform(-1, 1, data).astype("float32")
    out_channels = 8 if size == "tiny" else 32
    grouped = rng.uniform(-1, 1, (out_channels, 2, 3, 2, 3)).astype("float32")
    depthwise = rng.uniform(-1, 1, (data[1], 1, 3, 3, 3)).astype("float32")
    volume4 = rng.uniform(-1, 1, (1, 2, 4, 3, 4, 3)).astype("float32")
    kernel4 = rng.uniform(-1, 1, (3, 2, 2, 2, 3, 2)).astype("float32")
    return [_case([x, grouped], ConvAttrs(strides=(2, 1, 2), padding=(1, 0, 1, 0, 1, 1), dilation=(1, 2, 1),
                                          groups=data[1] // 2), label="groups", atol=1e-4),
            _case([x, depthwise], ConvAttrs(strides=(1, 1, 1), padding=(1,) * 6, dilation=(1, 1, 1),
                                            groups=data[1]), label="depthwise", atol=1e-4),
            _case([volume4, kernel4], ConvAttrs(strides=(1, 2, 1, 1), padding=(0, 1, 1, 0, 1, 0, 0, 1),
                                                dilation=(1, 1, 1, 2)), label="4-D", atol=1e-4)]


def _roi_align(rng, size):
    """Small inputs: an adaptive grid visits 2 * size + 3 samples per bin and axis, which the tir
    interpreter runs one by one."""
    x = rng.uniform(-2, 2, (2, 1, 3, 3) if size == "tiny" else (2, 32, 32, 32)).astype("float32")
    scale = 1.0 if size == "tiny" else 8.0
    rois = np.array([[0.5, 0.2, 2.5, 3.3], [-2.0, 1.0, 7.0, 9.5]], dtype="float32") * scale
    batch = np.array([1, 0], dtype=np.int64)
    return [_case([x, rois, batch], RoiAlignAttrs(output_height=2, output_width=2, mode=mode, sampling_ratio=ratio,
                                                  half_pixel=half), label=f"{mode} ratio={ratio} half_pixel={half}",
                  atol=1e-5)
            for mode, ratio, half in (("avg", 2, False), ("max", 0, False), ("avg", 0, True), ("max", 3, True))]


def _resize_antialias(rng, size):
    x = rng.uniform(-2, 2, (1, 2, 9, 8) if size == "tiny" else (2, 8, 64, 64)).astype("float32")
    out = (1, 2, 4, 5) if size == "tiny" else (2, 8, 24, 40)
    scales = tuple(o / i for o, i in zip(out, x.shape))
    return [_case([x], ResizeAttrs(size=out, scales=scales, method=method, antialias=True, exclude_outside=exclude,
                                   coordinate_transformation_mode=mode), label=f"{method} {mode} {exclude}", atol=1e-5)
            for method, mode, exclude in (("linear", "half_pixel", False), ("cubic", "align_corners", True),
                                          ("cubic", "pytorch_half_pixel", False))]


CASES = {"nn.max_pool": _max_pool, "nn.avg_pool": _avg_pool, "nn.max_pool_indices": _max_pool_indices,
         "nn.conv_transpose": _conv_transpose, "image.roi_align": _roi_align, "nn.conv": _conv}
RESIZE_ANTIALIAS = _resize_antialias
