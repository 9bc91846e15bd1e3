"""emitter.py: CUDAEmitter, CUDA C from the SDK's shared C-source emitter.

Only the dialect lives here: `extern "C" __global__` kernels with `__launch_bounds__` equal
to their bound thread extents, blockIdx / threadIdx, `__shared__` arrays, `__syncthreads()`
(placed by te's barrier insertion, the same as OpenCL's), float4 / int4 loads and stores
for vectorized loops, half / bfloat16 through cuda_fp16.h / cuda_bf16.h only when a kernel
uses them. The traversal of the loop IR is `tensorkiln.sdk.CSourceEmitter`'s.

The emitted text is compiled by `nvrtc.compile_cuda` (a CUBIN for the target's -arch) in
`emit`, so a kernel over the architecture's limits fails at compile time, and the
resources ptxas reports (registers, shared memory, spills, stack) land in
`Artifact.metadata["resources"]`. The same text builds on the CPU under shim.h.
"""
from __future__ import annotations

import re

from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.sdk import Artifact, CSourceEmitter

from .prefix import BFLOAT16_INCLUDE, DYNAMIC_SHARED_MACRO, HALF_INCLUDE, PREFIX, STATIC_SHARED_LIMIT

__all__ = ["CUDAEmitter"]

_MATH = ("exp", "exp2", "log", "log2", "log10", "sqrt", "tanh", "erf", "floor", "ceil", "trunc",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "fabs")
_HALF_TYPES = ("float16", "bfloat16")   # their math runs in float


class CUDAEmitter(CSourceEmitter):
    """tir PrimFuncs -> one CUDA C translation unit (Artifact format "cuda-c"), compiled to a CUBIN."""

    target_name = "cuda"
    artifact_format = "cuda-c"
    intrinsic_languages = ("cuda",)

    preamble = PREFIX
    helper_prefix = "static __device__ __forceinline__"

    type_names = {
        "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
        "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
        "float16": "half", "bfloat16": "__nv_bfloat16", "float32": "float", "float64": "double",
    }
    storage_type_names = {"bool": "uint8_t"}
    int_literal_suffix = {"int64": "LL", "uint64": "ULL", "uint32": "U"}
    vector_lanes = (4,)
    reserved_words = ("half", "dim3", "uint3", "float4", "int4", "threadIdx", "blockIdx", "blockDim", "gridDim",
                      "warpSize", "__shared__", "__global__", "__device__", "template", "class", "new", "delete",
                      "this", "operator", "namespace", "using", "nullptr", "private", "public", "protected",
                      "virtual", "friend", "typename", "export", "mutable", "explicit", "throw", "try", "catch")

    kernel_prefix = 'extern "C" __global__ void'
    restrict = "__restrict__"
    scope_prefix = {"global": "", "shared": "__shared__ ", "local": ""}
    hoisted_scopes = ("shared",)
    heap_scopes = ()                          # no malloc in a kernel: intermediates are per-thread arrays
    max_stack_bytes = None

    thread_index = {"blockIdx": "blockIdx.{axis}", "threadIdx": "threadIdx.{axis}"}
    barriers = {"shared": "__syncthreads();", "global": "__threadfence(); __syncthreads();"}

    # cross-thread reductions combine within warps by shuffles (warp size: the manifest's warp_size)
    warp_shuffle = {"tk_shfl_down": "__shfl_down_sync(0xffffffffu, {0}, {1}, {2})",
                    "tk_shfl": "__shfl_sync(0xffffffffu, {0}, {1}, {2})"}
    shuffle_dtypes = ("float32", "float64", "int32", "int64", "uint32", "uint64")

    parallel_pragma = None
    unroll_pragma = "#pragma unroll"

    vector_literal = "make_{type}({elements})"
    vector_broadcast = "tk_splat_{type}({value})"
    vector_load = "tk_load{lanes}({pointer})"
    vector_store = "tk_store{lanes}({pointer}, {value});"
    vector_cast = None                        # conversions go lane by lane
    vector_math = False                       # CUDA's math functions take scalars only

    float_suffix = {"float32": "f", "float64": "", "float16": "f", "bfloat16": "f"}
    math_functions = {
        **{name: name + "{f}({0})" for name in _MATH},
        "pow": "pow{f}({0}, {1})", "atan2": "atan2{f}({0}, {1})", "fmod": "fmod{f}({0}, {1})",
        "fma": "fma{f}({0}, {1}, {2})",
        "round": "rint{f}({0})",              # half to even, like numpy
        "rsqrt": "rsqrt{f}({0})",
        "sigmoid": "(1.0{f} / (1.0{f} + exp{f}(-({0}))))",
        "isnan": "tk_isnan({0})", "isinf": "tk_isinf({0})",
    }

    def vector_type_name(self, dtype: str) -> str | None:
        """float4 and int4 only: the vector structs the prefix gives arithmetic to."""
        parsed = dtype_of(dtype)
        if parsed.lanes == 4 and parsed.element in ("float32", "int32"):
            return f"{'float' if parsed.element == 'float32' else 'int'}4"
        return None

    def extensions(self, dtypes: set[str]) -> list[str]:
        lines = []
        if "float16" in dtypes:
            lines.append(HALF_INCLUDE)
        if "bfloat16" in dtypes:
            lines.append(BFLOAT16_INCLUDE)
        return lines

    def launch_attributes(self, geometry) -> str:
        return f"__launch_bounds__({geometry.threads_per_block})"

    def math_call(self, name, args, dtype):
        element = dtype_of(dtype).element
        if element in _HALF_TYPES and name in self.math_functions:
            # computed in float (one overload, no ambiguous half conversions), the result back in half
            text = super().math_call(name, [f"(float)({arg})" for arg in args], dtype)
            return text if name in ("isnan", "isinf") else f"(({self.type_name(element)}){text})"
        return super().math_call(name, args, dtype)

    def literal(self, value, dtype):
        if dtype in _HALF_TYPES:
            return f"(({self.type_name(dtype)}){super().literal(value, 'float32')})"
        return super().literal(value, dtype)

    def declare_allocation(self, buffer, name, size):
        """Shared arrays 32-byte aligned: wmma loads and float4 accesses need it."""
        before, after = super().declare_allocation(buffer, name, size)
        if buffer.scope == "shared":
            before = [line.replace("__shared__ ", "__shared__ __align__(32) ", 1) for line in before]
        return before, after

    def emit_source(self, funcs, target=None):
        source, kernels = super().emit_source(funcs, target)
        return _dynamic_shared(source, kernels), kernels

    def emit(self, funcs, target=None) -> Artifact:
        """The source, compiled by NVRTC for the target's -arch: CUBIN + resources in the Artifact."""
        from .compile import compile_artifact
        artifact = super().emit(funcs, target)
        return compile_artifact(artifact, target)


_SHARED_LINE = re.compile(r"^(\s*)__shared__ __align__\(32\) (\w+) (\w+)\[(\d+)\];$")


def _dynamic_shared(source: str, kernels: dict[str, dict]) -> str:
    """Kernels with more than 48 KB of shared arrays (the static limit) take them from the dynamic
    shared block through TK_DYNAMIC_SHARED, one offset each (16-byte aligned); the byte count is
    recorded as metadata "dynamic_shared_bytes" for the loader's launch."""
    heavy = {info["symbol"]: info for info in kernels.values() if info.get("shared_bytes", 0) > STATIC_SHARED_LIMIT}
    if not heavy:
        for info in kernels.values():
            info["dynamic_shared_bytes"] = 0
        return source
    lines, kernel, offset = source.split("\n"), None, 0
    for number, line in enumerate(lines):
        opening = re.match(r'^extern "C" __global__ void (?:__launch_bounds__\(\d+(?:, 1)?\) )?(\w+)\(', line)
        if opening:
            kernel, offset = heavy.get(opening.group(1)), 0
            continue
        match = _SHARED_LINE.match(line)
        if kernel is not None and match:
            indent, type_name, name, count = match.groups()
            lines[number] = f"{indent}{DYNAMIC_SHARED_MACRO}({type_name}, {name}, {offset});"
            size = _type_bytes(type_name) * int(count)
            offset += (size + 15) // 16 * 16
            kernel["dynamic_shared_bytes"] = offset
    for info in kernels.values():
        info.setdefault("dynamic_shared_bytes", 0)
        if info["dynamic_shared_bytes"]:
            info["static_shared_bytes"] = 0
    return "\n".join(lines)


_C_TYPE_BYTES = {"int8_t": 1, "uint8_t": 1, "bool": 1, "int16_t": 2, "uint16_t": 2, "half": 2, "__nv_bfloat16": 2,
                 "int32_t": 4, "uint32_t": 4, "float": 4, "int64_t": 8, "uint64_t": 8, "double": 8}


def _type_bytes(type_name: str) -> int:
    return _C_TYPE_BYTES[type_name]
