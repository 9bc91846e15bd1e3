"""strategies/int8_gemm.py: 8-bit conv2d (NHWC / HWIO, one group) and dense as one int8 GEMM call (int8_gemm.py).

For `nn.conv2d(int8 or uint8, int8, out_dtype="int32")` and the same dense, the anchor is
tensorized at its outermost axis onto one call of a function specialised for the shapes
(int8_gemm.int8_conv_source): VNNI or AVX2 dot products, B packed per call, implicit
im2col. The zero padding is a stage before the call; the group's epilogue (the
requantization: cast, scale, bias, relu, round, clip, cast to 8 bits) runs over the int32
result, vectorized and parallel, so the next int8 conv reads 8-bit data again.

Which instructions: `int8_isa(target)` from the target's CPU (-mcpu, -mattr; the host's
with -mcpu=native), never from the machine that compiles: avx512vnni, else avxvnni, else
avx2; none (the generic schedules run) without AVX2.
"""
from __future__ import annotations

import dataclasses
import functools

from tensorkiln import te
from tensorkiln.ops.nn._accumulate import multiply_sum
from tensorkiln.ops.nn.conv2d import PAD_TAG, pad_spatial
from tensorkiln.sdk import OpImplementation
from tensorkiln.sdk.schedules import inline_injective, schedule_injective_stage

from ..host import enabled_features, machine_config
from ..int8_gemm import ISAS, Int8ConvPlan, int8_conv_source
from .gemm_blocking import _cores

__all__ = ["int8_gemm_strategies", "int8_isa", "INT8_GEMM_PRIORITY", "conv_plan", "dense_plan", "conv_intrinsic"]

INT8_GEMM_PRIORITY = 40
"""Above cpu_llvm.dense_int8 (30): where these apply they replace the generic int8 schedules."""
GEMM_TAG = "int8_gemm"
MIN_DENSE_ROWS = 4
"""Fewer rows: a matrix-vector product, bound by reading the weights (packing them would double that)."""

_VNNI_CPUS = ("cascadelake", "cooperlake", "icelake-client", "icelake-server", "tigerlake", "rocketlake",
              "sapphirerapids", "emeraldrapids", "graniterapids", "diamondrapids", "znver4", "znver5")
_AVX_VNNI_CPUS = ("alderlake", "raptorlake", "meteorlake", "arrowlake", "arrowlake-s", "lunarlake", "gracemont",
                  "sierraforest", "grandridge", "clearwaterforest", "pantherlake")
"""What a CPU named by -mcpu implies for VNNI when -mattr does not say (llvmlite lists no per-CPU features)."""


def _features(target) -> frozenset[str]:
    config = machine_config(target)
    implied = set()
    if config.cpu in _VNNI_CPUS:
        implied |= {"avx512vnni", "avx512bw", "avx512vl"}
    if config.cpu in _AVX_VNNI_CPUS:
        implied |= {"avxvnni", "avx2"}
    return enabled_features(config.cpu, config.features, implied)


def int8_isa(target):
    """The int8 dot-product ISA of the target's CPU (an int8_gemm.Int8Isa), or None without AVX2."""
    features = _features(target)
    if {"avx512f", "avx512bw", "avx512vnni"} <= features:
        return ISAS["avx512vnni"]
    if "avxvnni" in features or {"avx512vnni", "avx512vl"} <= features:
        return ISAS["avxvnni"]
    if "avx2" in features:
        return ISAS["avx2"]
    return None


# ---- which calls ----------------------------------------------------------------------------------


def _eight_bit_inputs(call) -> str | bool:
    if getattr(call.attrs, "out_dtype", "") != "int32":
        return "not an 8-bit op accumulating in int32 (out_dtype)"
    data, weight = (a.checked_type for a in call.args[:2])
    if data.dtype not in ("int8", "uint8") or weight.dtype != "int8":
        return f"data {data.dtype} and weight {weight.dtype}: the int8 GEMM takes int8 / uint8 data and int8 weights"
    return True


def conv_applies(call, target):
    found = _eight_bit_inputs(call)
    if found is not True:
        return found
    attrs = call.attrs
    if (attrs.data_layout, attrs.kernel_layout) != ("NHWC", "HWIO"):
        return f"layout {attrs.data_layout}/{attrs.kernel_layout}, not NHWC/HWIO"
    if attrs.groups != 1:
        return "grouped: the GEMM has one group"
    if int8_isa(target) is None:
        return "the target's CPU has no AVX2"
    return True


def dense_applies(call, target):
    found = _eight_bit_inputs(call)
    if found is not True:
        return found
    data = call.args[0].checked_type
    if len(data.shape) != 2:
        return "data is not 2-D"
    if int(data.shape[0]) < MIN_DENSE_ROWS:
        return f"M={int(data.shape[0])} < {MIN_DENSE_ROWS} rows: a matrix-vector product (cpu_llvm.dense_int8)"
    if int8_isa(target) is None:
        return "the target's CPU has no AVX2"
    return True


# ---- plans -------------------------------------------------------------------------------------------


def _blocks(plan_rows: int, slivers: int, mr: int, target) -> tuple[int, int]:
    """(row tiles, slivers) per work item: slivers of a column block stay in L2 while the row tiles stream,
    and there are enough items for the threads to share (4 per thread)."""
    threads = _cores(target)
    tiles = -(-plan_rows // mr)
    slivers_per_item = min(slivers, 4)
    column_blocks = -(-slivers // slivers_per_item)
    wanted = 4 * threads
    tiles_per_item = max(1, min(tiles, -(-tiles * column_blocks // wanted), 64))
    return tiles_per_item, slivers_per_item


def _tile_for(isa, out_channels: int):
    """The ISA's register tile, one vector wide and twice as high where a two-vector sliver would leave
    lanes empty (squeezenet's 16- and 48-channel squeeze convs): the same accumulators, no masked lanes."""
    if out_channels % isa.nr and out_channels % isa.lanes == 0 or out_channels <= isa.lanes:
        return dataclasses.replace(isa, mr=2 * isa.mr if isa.vector_bits == 256 else 12, vectors=1)
    return isa


def conv_plan(data_shape, weight_shape, out_shape, strides, dilation, signed: bool, target) -> Int8ConvPlan:
    """The plan of a conv: data padded NHWC, weight HWIO, output NHWC."""
    batch, out_h, out_w, out_channels = (int(d) for d in out_shape)
    isa = _tile_for(int8_isa(target), out_channels)
    kh, kw, channels, _ = (int(d) for d in weight_shape)
    m, slivers = batch * out_h * out_w, -(-out_channels // isa.nr)
    tiles, per = _blocks(m, slivers, isa.mr, target)
    return Int8ConvPlan(isa=isa, signed=signed, kind="conv", batch=batch, out_h=out_h, out_w=out_w,
                        channels=channels, out_channels=out_channels, kernel=(kh, kw), strides=tuple(strides),
                        dilation=tuple(dilation), tiles_per_item=tiles, slivers_per_item=per,
                        whole_groups=int(data_shape[3]) >= -(-channels // isa.group) * isa.group)


def dense_plan(m: int, n: int, k: int, signed: bool, target) -> Int8ConvPlan:
    isa = _tile_for(int8_isa(target), n)
    tiles, per = _blocks(m, -(-n // isa.nr), isa.mr, target)
    return Int8ConvPlan(isa=isa, signed=signed, kind="dense", batch=m, out_h=1, out_w=1, channels=k,
                        out_channels=n, tiles_per_item=tiles, slivers_per_item=per)


# ---- compute: the same body for the op and the intrinsic's description ----------------------------


def _conv_body(padded: te.Tensor, weight: te.Tensor, out_shape, strides, dilation, name: str) -> te.Tensor:
    kh, kw, channels, _ = (int(d) for d in weight.shape)
    (sh, sw), (dh, dw) = strides, dilation
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, channels), name="rc")

    def scaled(index, factor):
        return index if factor == 1 else index * factor

    def body(b, y, x, o):
        value = padded[b, scaled(y, sh) + scaled(ry, dh), scaled(x, sw) + scaled(rx, dw), rc]
        return multiply_sum(te.cast(value, "int32") * te.cast(weight[ry, rx, rc, o], "int32"), axis=[ry, rx, rc])
    return te.compute(tuple(int(d) for d in out_shape), body, name=name, tag=GEMM_TAG,
                      attrs={"strides": (sh, sw), "dilation": (dh, dw)})


def _dense_body(data: te.Tensor, weight: te.Tensor, name: str) -> te.Tensor:
    m, k_extent = (int(d) for d in data.shape)
    n = int(weight.shape[0])
    k = te.reduce_axis((0, k_extent), name="k")
    return te.compute((m, n), lambda i, j: multiply_sum(te.cast(data[i, k], "int32") * te.cast(weight[j, k], "int32"),
                                                        axis=k), name=name, tag=GEMM_TAG)


@functools.cache
def conv_intrinsic(plan: Int8ConvPlan, data_shape: tuple, data_dtype: str):
    """The te intrinsic computing one whole conv (or dense) of `plan`, implemented by int8_gemm.py."""
    from tensorkiln.sdk.intrinsic_impl import SourceImpl

    data = te.placeholder(data_shape, data_dtype, name="X")
    if plan.kind == "conv":
        weight = te.placeholder((*plan.kernel, plan.channels, plan.out_channels), "int8", name="W")
        out = _conv_body(data, weight, (plan.batch, plan.out_h, plan.out_w, plan.out_channels), plan.strides,
                         plan.dilation, "Y")
    else:
        weight = te.placeholder((plan.out_channels, plan.channels), "int8", name="W")
        out = _dense_body(data, weight, "Y")
    attrs = {"isa": plan.isa.name, "mr": plan.isa.mr, "nr": plan.isa.nr, "dtype": "int8"}
    return te.decl_tensor_intrin(out, plan.symbol.removeprefix("tk_"), inputs=[data, weight], attrs=attrs,
                                 implementations={"cpu_llvm": SourceImpl("llvm", int8_conv_source(plan),
                                                                         plan.symbol)})


def _pad_channels(data: te.Tensor, channels: int) -> te.Tensor:
    """`data` NHWC with zero channels up to `channels`: every reduction group of a pixel is then whole
    (one 4-byte load where the stem's 3 channels took three byte loads; B is zero there)."""
    present = int(data.shape[3])
    zero = te.const(0, data.dtype)
    return te.compute((*data.shape[:3], channels),
                      lambda b, y, x, c: te.if_then_else(c < present, data[b, y, x, te.min(c, present - 1)], zero),
                      name="T_pad_channels", tag=PAD_TAG)


def _conv_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    padded = pad_spatial(data, tuple(attrs.padding), "NHWC")
    group = int8_isa(target).group
    if int(data.shape[3]) % group:
        padded = _pad_channels(padded, -(-int(data.shape[3]) // group) * group)
    return _conv_body(padded, weight, out_type.shape, tuple(attrs.strides), tuple(attrs.dilation), "T_conv2d")


def _dense_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return _dense_body(data, weight, "T_dense")


# ---- schedule -------------------------------------------------------------------------------------


def _find(outputs, tag: str):
    stack, seen = [t.op for t in outputs], set()
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(id(op))
        if op.tag == tag:
            return op.output(0)
        stack.extend(t.op for t in op.input_tensors)
    return None


def _schedule(outputs, target, config):
    s = te.create_schedule([t.op for t in outputs])
    gemm = _find(outputs, GEMM_TAG)
    # the call reads its operands from memory: the padding (or a fused producer) stays a stage
    producers = [t for t in gemm.op.input_tensors if isinstance(t.op, te.ComputeOp)]
    inline_injective(s, keep=[gemm, *producers])
    for producer in producers:
        schedule_injective_stage(s, producer, target)
    data, weight = gemm.op.input_tensors[0], gemm.op.input_tensors[1]
    signed = data.dtype == "int8"
    if len(gemm.shape) == 4:
        strides, dilation = _geometry(gemm)
        plan = conv_plan(data.shape, weight.shape, gemm.shape, strides, dilation, signed, target)
    else:
        plan = dense_plan(int(gemm.shape[0]), int(gemm.shape[1]), int(data.shape[1]), signed, target)
    intrinsic = conv_intrinsic(plan, tuple(int(d) for d in data.shape), data.dtype)
    stage = s[gemm]
    stage.tensorize(stage.op.axis[0], intrinsic)
    for out in outputs:
        if out.op is not gemm.op:
            schedule_injective_stage(s, out, target)
    return s


def _geometry(gemm: te.Tensor) -> tuple[tuple[int, int], tuple[int, int]]:
    """(strides, dilation) of the conv compute, kept in its attrs by `_conv_body`."""
    return tuple(gemm.op.attrs["strides"]), tuple(gemm.op.attrs["dilation"])


def int8_gemm_strategies(target) -> list[OpImplementation]:
    """The int8 GEMM implementations (see the module docstring); none without AVX2."""
    if int8_isa(target) is None:
        return []
    return [
        OpImplementation("cpu_llvm.conv2d_int8_gemm", ("nn.conv2d",), _schedule, compute=_conv_compute,
                         condition=conv_applies, priority=INT8_GEMM_PRIORITY),
        OpImplementation("cpu_llvm.dense_int8_gemm", ("nn.dense",), _schedule, compute=_dense_compute,
                         condition=dense_applies, priority=INT8_GEMM_PRIORITY),
    ]
