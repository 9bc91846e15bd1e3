"""lowp.py: half and bfloat16 on cpu_llvm: storage in 16 bits, arithmetic in float32.

Both dtypes are LLVM IR types (`half`, `bfloat`; llvmlite knows only the first, so
`BFLOAT` is declared here). The x86 backend promotes their arithmetic to float32 and
converts at loads and stores; which instructions it converts with follows the target
machine's features, i.e. the target's CPU (`-mcpu`, `-mattr`), never this module:

| feature (LLVM name) | half <-> float | float -> bfloat16 |
|---|---|---|
| `f16c` (AVX2-era CPUs) | vcvtph2ps / vcvtps2ph, 8 lanes | shifts and a round-to-nearest-even add |
| `avx512fp16` | native half arithmetic | - |
| `avx512bf16` / `avxneconvert` | - | vcvtneps2bf16 |
| none | the compiler runtime's `__extendhfsf2` / `__truncsfhf2` per element | `__truncsfbf2` per element |

(bfloat16 -> float32 is a 16-bit shift everywhere.) `conversions(target)` says which
row applies, for the summary and the tests; the code does not branch on it.

Older compiler runtimes (libgcc before 13) lack `__truncsfbf2`, which LLVM calls for
float -> bfloat16 without avx512bf16: a JIT'ed call to it jumped to address 0. So a
module that mentions bfloat defines it (`add_bfloat_runtime`): weak and hidden, integer
round-to-nearest-even, NaN kept quiet.
"""
from __future__ import annotations

import struct

import llvmlite.ir as ir
from llvmlite.ir.types import _BaseFloatType

from .cgutils import I32
from .host import enabled_features, machine_config

_TRUNCATE = "__truncsfbf2"

__all__ = ["BFLOAT", "BFloatType", "target_features", "conversions", "add_bfloat_runtime"]


class BFloatType(_BaseFloatType):
    """LLVM's `bfloat`: float32's exponent with 7 mantissa bits."""

    null = "0.0"
    intrinsic_name = "bf16"

    def __str__(self) -> str:
        return "bfloat"

    def format_constant(self, value) -> str:
        """LLVM spells bfloat constants 0xR<16 bits>: float32's top half, rounded to nearest even."""
        bits = struct.unpack("<I", struct.pack("<f", float(value)))[0]
        if (bits & 0x7F800000) == 0x7F800000 and bits & 0x7FFFFF:   # NaN: keep it quiet and NaN
            return f"0xR{(bits >> 16) | 0x40:04X}"
        bits += 0x7FFF + ((bits >> 16) & 1)
        return f"0xR{(bits >> 16) & 0xFFFF:04X}"


BFloatType._create_instance()
BFLOAT = BFloatType()


def target_features(target) -> frozenset[str]:
    """The LLVM features the target enables ("+f16c" -> "f16c"; with -mcpu=native the host's, plus -mattr).
    A named CPU without -mattr implies features LLVM knows and host.enabled_features does not list."""
    config = machine_config(target)
    return enabled_features(config.cpu, config.features)


def conversions(target) -> dict[str, str]:
    """{"float16": how half converts, "bfloat16": how bfloat16 rounds} on the target's CPU."""
    features = target_features(target)
    if "avx512fp16" in features:
        half = "avx512fp16 (native half arithmetic)"
    elif "f16c" in features:
        half = "f16c (vcvtph2ps / vcvtps2ph)"
    else:
        half = "software (compiler runtime calls)"
    bfloat = ("avx512bf16 (vcvtneps2bf16)" if features & {"avx512bf16", "avxneconvert"}
              else "software (integer round to nearest even)")
    return {"float16": half, "bfloat16": bfloat}


def add_bfloat_runtime(module: ir.Module) -> bool:
    """Define `__truncsfbf2` (float -> bfloat, round to nearest even) in `module`; False if already there."""
    if _TRUNCATE in module.globals:
        return False
    function = ir.Function(module, ir.FunctionType(BFLOAT, [ir.FloatType()]), _TRUNCATE)
    function.linkage, function.visibility = "weak", "hidden"
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    value = function.args[0]
    bits = builder.bitcast(value, I32)
    high = builder.lshr(bits, I32(16))
    # ties go to the even bfloat: add 0x7fff plus the lowest kept bit
    rounded = builder.lshr(builder.add(bits, builder.add(builder.and_(high, I32(1)), I32(0x7FFF))), I32(16))
    is_nan = builder.fcmp_unordered("uno", value, value)
    chosen = builder.select(is_nan, builder.or_(high, I32(0x40)), rounded)
    builder.ret(builder.bitcast(builder.trunc(chosen, ir.IntType(16)), BFLOAT))
    return True
