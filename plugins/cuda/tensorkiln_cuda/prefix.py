"""prefix.py: the fixed text at the top of every emitted .cu file.

NVRTC compiles it with no include at all (no CCCL, no <stdint.h>, no <math.h>): the
integer typedefs and INFINITY / NAN (through __int_as_float) are defined here. float4 and
int4 are CUDA's built-in vector structs, which have no arithmetic: the operators the shared
emitter writes for vectorized loops are defined here, lane by lane, with the 16-byte loads
and stores (`tk_load4` / `tk_store4`). Under the CPU shim (`TK_CUDA_SHIM`, see shim.h) the
typedefs come from <cstdint> and the vector structs from the shim.
"""
from __future__ import annotations

__all__ = ["PREFIX", "HALF_INCLUDE", "BFLOAT16_INCLUDE", "DYNAMIC_SHARED_MACRO", "STATIC_SHARED_LIMIT"]

STATIC_SHARED_LIMIT = 48 * 1024
"""Bytes of static __shared__ a kernel may declare; past it the emitter uses dynamic shared memory."""

DYNAMIC_SHARED_MACRO = "TK_DYNAMIC_SHARED"
"""`TK_DYNAMIC_SHARED(type, name, byte_offset);` declares `type* name` into the dynamic shared block."""

_VECTOR_OPS = "\n".join(
    f"__device__ __forceinline__ {t}4 operator{op}({t}4 a, {t}4 b) "
    f"{{ return make_{t}4(a.x {op} b.x, a.y {op} b.y, a.z {op} b.z, a.w {op} b.w); }}"
    for t in ("float", "int") for op in "+-*/"
) + "\n" + "__device__ __forceinline__ int4 operator%(int4 a, int4 b) " \
    "{ return make_int4(a.x % b.x, a.y % b.y, a.z % b.z, a.w % b.w); }"

_MIN_MAX = "\n".join(
    f"__device__ __forceinline__ {t}4 tk_{kind}_{element}({t}4 a, {t}4 b) {{ return make_{t}4("
    + ", ".join(f"tk_{kind}_lane(a.{c}, b.{c})" for c in "xyzw") + "); }"
    for t, element in (("float", "float32"), ("int", "int32")) for kind in ("min", "max"))

PREFIX = f"""\
// tensorkiln CUDA C: no include needed (NVRTC without CCCL); TK_CUDA_SHIM builds it with g++
#ifndef TK_CUDA_SHIM
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
#define {DYNAMIC_SHARED_MACRO}(type, name, offset) \\
    extern __shared__ __align__(16) unsigned char tk_dynamic_shared[]; \\
    type* name = reinterpret_cast<type*>(tk_dynamic_shared + (offset))
#endif
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif
template <typename T> __device__ __forceinline__ bool tk_isnan(T x) {{ return x != x; }}
template <typename T> __device__ __forceinline__ bool tk_isinf(T x) {{ return x == INFINITY || x == -INFINITY; }}
template <typename T> __device__ __forceinline__ T tk_min_lane(T a, T b) {{ return (a < b || a != a) ? a : b; }}
template <typename T> __device__ __forceinline__ T tk_max_lane(T a, T b) {{ return (a > b || a != a) ? a : b; }}
__device__ __forceinline__ float4 tk_splat_float4(float v) {{ return make_float4(v, v, v, v); }}
__device__ __forceinline__ int4 tk_splat_int4(int v) {{ return make_int4(v, v, v, v); }}
__device__ __forceinline__ float4 tk_load4(const float* p) {{ return *reinterpret_cast<const float4*>(p); }}
__device__ __forceinline__ int4 tk_load4(const int* p) {{ return *reinterpret_cast<const int4*>(p); }}
__device__ __forceinline__ void tk_store4(float* p, float4 v) {{ *reinterpret_cast<float4*>(p) = v; }}
__device__ __forceinline__ void tk_store4(int* p, int4 v) {{ *reinterpret_cast<int4*>(p) = v; }}
{_VECTOR_OPS}
{_MIN_MAX}
"""

HALF_INCLUDE = "#ifndef TK_CUDA_SHIM\n#include <cuda_fp16.h>\n#endif"
BFLOAT16_INCLUDE = "#ifndef TK_CUDA_SHIM\n#include <cuda_bf16.h>\n#endif"
