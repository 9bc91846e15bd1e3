"""strategies: cpu_llvm's op implementations (tensorkiln_strategies hook), derived from the target's CPU.

Every tile size here is a knob whose analytic default comes from `host.cpu_facts(target)`
(vector width, register count), so `-mcpu=haswell` or `-mattr=-avx512f` on an AVX-512
host gets AVX2-shaped code, and the tuner can search the candidates:

    implementation               keys                          knobs
    cpu_llvm.conv2d_int8_gemm    nn.conv2d 8-bit NHWC, 1 group (whole int8 GEMM: VNNI / AVX2, int8_gemm.py)
    cpu_llvm.dense_int8_gemm     nn.dense 8-bit, M >= 4        (the same function, W[N, K])
    cpu_llvm.dense_ukernel       nn.dense (fp32, 2-D)          mc, kc, nc, tile, pack_b, pack_a (whole GEMM, ukernel.py)
    cpu_llvm.matmul_ukernel      nn.matmul (fp32, 2-D)         mc, kc, nc, tile, pack_b, pack_a
    cpu_llvm.dense_pack_ukernel  nn.dense_pack (fp32, 2-D)     mc, kc, nc, tile (the weight's nr), pack_a (B prepacked)
    cpu_llvm.conv2d_nhwc_ukernel nn.conv2d NHWC 1x1 stride 1   rows, kc (where measured not slower)
    cpu_llvm.concat_copy         concatenate                   (row-by-row contiguous copies, concat.py)
    cpu_llvm.depthwise_nchw      nn.conv2d NCHW depthwise fp32 max_width, rows (per-channel padding, depthwise.py)
    cpu_llvm.dense_split         nn.dense, one row              split, split_rows
    cpu_llvm.dense_packed        nn.dense, several rows         pack, row_block
    cpu_llvm.dense               tags dense, batch_matmul       row_block
    cpu_llvm.conv2d_nhwc         tag conv2d_nhwc                max_accumulators, max_tile_width, tile_rows, loop_order
    cpu_llvm.conv2d_winograd     nn.conv2d_winograd             rows (the batched GEMM's register tile, winograd.py)
    cpu_llvm.conv2d_nchw         NCHW conv tags                 channel_block, width_vectors
    cpu_llvm.conv2d_nchwc        tag conv2d_NCHWc               reg_n, unroll_kw (TVM's conv2d_NCHWc, conv_nchwc.py)
    cpu_llvm.pool_nchwc          NCHW{x}c max / avg pools       (vectorized over the channel block)
    cpu_llvm.pool / .softmax / .norm / .reduce / .injective     (no knobs)
"""
from __future__ import annotations

from tensorkiln.ops import tags
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace
from tensorkiln.sdk.schedules import schedule_fused

from ..host import cpu_facts
from . import concat, conv_nchwc, depthwise, int8, ukernel, winograd
from .anchors import ANCHOR_SCHEDULES, LOOP_ORDERS, nhwc_loop_order, nhwc_tile, nhwc_tile_rows
from .dense import PACK_TAG, dense_packed, dense_split, largest_divisor_in

__all__ = ["cpu_strategies", "ANCHOR_SCHEDULES", "conv_nhwc_tile"]

DEFAULT_TILE_WIDTH = 14

_KEEP_TAGS = ("injective.pad", PACK_TAG)


def _lanes(target, dtype: str = "float32") -> int:
    bits = 64 if dtype in ("float64", "int64", "uint64") else 16 if dtype in ("float16", "int16") else \
        8 if dtype in ("int8", "uint8", "bool") else 32
    return max(1, min(16, cpu_facts(target).vector_bits // bits))


def _with_default(candidates, default) -> tuple:
    return tuple(sorted(set(candidates) | {default}))


def _schedule(outputs, target, config):
    return schedule_fused(outputs, target, ANCHOR_SCHEDULES, config, keep_tags=_KEEP_TAGS)


# ---- knob spaces --------------------------------------------------------------------------------


def _default_accumulators(target) -> int:
    """Three quarters of the vector registers; the rest hold the weight vectors and the broadcast
    input (AVX-512: 24 of 32; AVX2: 12 of 16, as in the 6x16 GEMM micro-kernel). 28 of 32 is a
    candidate, not the default: resnet50 on one Zen 5 core ran 1.4% slower with it (CPU time, A/B)."""
    return cpu_facts(target).vector_registers * 3 // 4


def _conv_nhwc_space(workload, target) -> TuningSpace:
    accumulators = _default_accumulators(target)
    # up to all registers but four: two weight vectors, the broadcast input and one spare (28 of 32)
    most = cpu_facts(target).vector_registers - 4
    candidates = [a for a in (4, 8, 12, 16, 24, 28) if a <= most]
    # which loop is outermost (anchors.nhwc_loop_order); the anchor is known when the group is lowered
    order = nhwc_loop_order(workload.anchor, target) if workload.anchor is not None else LOOP_ORDERS[0]
    # two rows per tile where one row would need a tail (anchors.nhwc_tile_rows)
    rows = 1 if workload.anchor is None else nhwc_tile_rows(workload.anchor, target, accumulators, DEFAULT_TILE_WIDTH)
    return TuningSpace((Knob("max_accumulators", _with_default(candidates, accumulators), accumulators),
                        Knob("max_tile_width", (4, 7, 8, 14, 16), DEFAULT_TILE_WIDTH),
                        Knob("tile_rows", (1, 2), rows),
                        Knob("loop_order", LOOP_ORDERS, order)))


def conv_nhwc_tile(out_width: int, out_channels: int, in_channels: int, target) -> tuple[int, int]:
    """(output positions, output channels) of the NHWC register tile with the default knobs."""
    return nhwc_tile(out_width, out_channels, _lanes(target), _default_accumulators(target), DEFAULT_TILE_WIDTH,
                     in_channels)


def _conv_nchw_space(workload, target) -> TuningSpace:
    """The NCHW register tile: channel_block output channels x width_vectors vectors along the width.

    Defaults measured on one core (bias + relu fused): with 32 vector registers 12 x 2 (24
    accumulators) against the former 4 x 1: a 56x56 64 -> 64 3x3 conv 54 -> 116 GFLOP/s, a
    256-step 64 -> 64 dilated 1-D conv (tcn) 57 -> 94; with 16 (AVX2) 8 x 1: 50 -> 63 and 48 -> 48
    (two vectors spilled: 42-45)."""
    wide = cpu_facts(target).vector_registers >= 32
    channels, vectors = (12, 2) if wide else (8, 1)
    return TuningSpace((Knob("channel_block", _with_default((1, 2, 4, 8, 16), channels), channels),
                        Knob("width_vectors", (1, 2, 3), vectors)))


def _winograd_space(workload, target) -> TuningSpace:
    default = winograd.default_rows(target)
    return TuningSpace((Knob("rows", winograd.row_candidates(target), default),))


def _dense_space(workload, target) -> TuningSpace:
    return TuningSpace((Knob("row_block", (1, 2, 4, 8), 4),))


def _split_max(target) -> int:
    """Partial sums per output of the batch-1 dense: two vectors on a 16-register CPU, one on a 32-register one."""
    facts = cpu_facts(target)
    lanes = _lanes(target)
    return lanes * 2 if facts.vector_registers <= 16 else lanes


def _weight(call):
    return call.args[1].checked_type


def _rows(call) -> int:
    rows = 1
    for extent in call.args[0].checked_type.shape[:-1]:
        rows *= int(extent)
    return rows


def _dense_split_space(workload, target) -> TuningSpace:
    reduction = int(_weight(workload.call).shape[1])
    default = largest_divisor_in(reduction, 4, _split_max(target))
    divisors = [d for d in (4, 8, 16, 32) if reduction % d == 0]
    return TuningSpace((Knob("split", _with_default(divisors, default), default),
                        Knob("split_rows", (1, 2, 4, 8, 16), 8)))


def _dense_split_applies(call, target):
    if _rows(call) != 1:
        return "more than one row: the packed dense applies"
    if largest_divisor_in(int(_weight(call).shape[1]), 4, _split_max(target)) == 1:
        return "K has no divisor in [4, split_max]"
    return True


def _dense_packed_space(workload, target) -> TuningSpace:
    units = int(_weight(workload.call).shape[0])
    default = largest_divisor_in(units, 4, 2 * _lanes(target))
    divisors = [d for d in (1, 4, 8, 16, 32) if units % d == 0]
    return TuningSpace((Knob("pack", _with_default(divisors, default), default),
                        Knob("row_block", (1, 2, 4, 8), 4)))


def _dense_split_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return dense_split(data, weight, config["split"])


def _dense_packed_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return dense_packed(data, weight, config["pack"])


def cpu_strategies(target) -> list[OpImplementation]:
    """Every implementation cpu_llvm declares for `target` (a resolved cpu_llvm Target)."""
    conv_nchw = (tags.CONV2D_NCHW, tags.DEPTHWISE_CONV2D_NCHW, tags.GROUP_CONV2D_NCHW, tags.CONV2D_TRANSPOSE_NCHW)
    plain = (tags.POOL, tags.SOFTMAX, tags.LOG_SOFTMAX, tags.NORM, tags.GLOBAL_POOL, tags.COMM_REDUCE, tags.SCAN,
             tags.SORT, "injective")
    return [
        *int8.int8_strategies(target, _schedule, _dense_space),
        *ukernel.ukernel_strategies(target),
        *concat.concat_strategies(target),
        *depthwise.depthwise_strategies(target),
        *conv_nchwc.conv_nchwc_strategies(target),
        OpImplementation("cpu_llvm.dense_split", ("nn.dense",), _schedule, compute=_dense_split_compute,
                         space=_dense_split_space, condition=_dense_split_applies, priority=10),
        OpImplementation("cpu_llvm.dense_packed", ("nn.dense",), _schedule, compute=_dense_packed_compute,
                         space=_dense_packed_space, priority=5),
        OpImplementation("cpu_llvm.dense", (tags.DENSE, tags.BATCH_MATMUL), _schedule, space=_dense_space),
        OpImplementation("cpu_llvm.conv2d_nhwc", (tags.CONV2D_NHWC,), _schedule, space=_conv_nhwc_space),
        OpImplementation("cpu_llvm.conv2d_nchw", conv_nchw, _schedule, space=_conv_nchw_space),
        OpImplementation("cpu_llvm.conv2d_winograd", (tags.CONV2D_WINOGRAD_NHWC,), _schedule, space=_winograd_space),
        *(OpImplementation(f"cpu_llvm.{key}", (key,), _schedule) for key in plain),
    ]
