"""strategies/int8.py: 8-bit integer conv2d and dense with int32 accumulation (out_dtype="int32").

Quantized graphs (tensorkiln.quantize, the ONNX QLinear* / *Integer / QDQ importers) run
their convolutions and dense layers as `nn.conv2d(int8 or uint8, int8, out_dtype="int32")`,
followed by the requantization (int32 -> float scale -> round -> clip -> int8) as ordinary
elementwise ops that fuse into the anchor's epilogue. On a CPU with AVX2 the NHWC convs
(one group) and the dense with 4 rows or more run as one int8 GEMM call (int8_gemm.py:
vpdpbusd with avx512vnni / avxvnni, else vpmaddwd; strategies/int8_gemm.py). Elsewhere the
core's computes widen the 8-bit products to int32 inside the reduction and cpu_llvm's
anchor schedules schedule them: the tag-keyed conv strategies as they are, while the dense
gets `cpu_llvm.dense_int8`, which outranks the float dense computes (split, packed,
micro-kernel: they accumulate in the input dtype) for exactly the out_dtype="int32" calls.
"""
from __future__ import annotations

from tensorkiln.ops.nn.dense import dense
from tensorkiln.sdk import OpImplementation

__all__ = ["int8_strategies", "INT8_PRIORITY"]

INT8_PRIORITY = 30
"""Above the micro-kernel (20) and the float dense computes (10, 5): they do not apply to out_dtype int32."""


def _accumulates_int32(call, target):
    if getattr(call.attrs, "out_dtype", "") != "int32":
        return "not an 8-bit integer op accumulating in int32 (out_dtype)"
    return True


def _dense_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return dense(data, weight, out_dtype="int32")


def int8_strategies(target, schedule, dense_space) -> list[OpImplementation]:
    """The int8 implementations: `schedule` is cpu_llvm's fused-group scheduler (anchor table) and
    `dense_space` the dense anchor's knobs. Integer convolutions need no entry: the core's conv
    compute honours out_dtype, so the tag-keyed conv strategies schedule them as they are."""
    from .int8_gemm import int8_gemm_strategies   # the int8 GEMM (VNNI / AVX2) where it applies

    return [*int8_gemm_strategies(target),
            OpImplementation("cpu_llvm.dense_int8", ("nn.dense",), schedule, compute=_dense_compute,
                             space=dense_space, condition=_accumulates_int32, priority=INT8_PRIORITY)]

