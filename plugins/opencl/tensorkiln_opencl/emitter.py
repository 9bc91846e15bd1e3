"""emitter.py: OpenCLEmitter, OpenCL C 1.2 from the SDK's shared C-source emitter.

Only the dialect lives here: keywords, thread indices, barriers, vector types and
math names. The traversal of the loop IR is `tensorkiln.sdk.CSourceEmitter`'s.
"""
from __future__ import annotations

from tensorkiln.sdk import CSourceEmitter

__all__ = ["OpenCLEmitter"]

_MATH = ("exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "erf", "floor", "ceil", "trunc",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "fabs")


class OpenCLEmitter(CSourceEmitter):
    """tir PrimFuncs -> one OpenCL C program (Artifact format "opencl-c").

    Thread-bound loops read get_group_id / get_local_id; "shared" buffers are __local
    arrays declared at kernel scope (OpenCL 1.2 allows them nowhere else); "local"
    buffers and per-thread intermediates are private arrays; vectors of 2, 3, 4, 8 or
    16 lanes use the built-in vector types, with vloadN / vstoreN for contiguous access.
    """

    target_name = "opencl"
    artifact_format = "opencl-c"
    intrinsic_languages = ("opencl",)

    preamble = ""
    helper_prefix = "inline"

    type_names = {
        "bool": "bool", "int8": "char", "int16": "short", "int32": "int", "int64": "long",
        "uint8": "uchar", "uint16": "ushort", "uint32": "uint", "uint64": "ulong",
        "float16": "half", "float32": "float", "float64": "double",
    }
    storage_type_names = {"bool": "uchar"}   # bool is not allowed in kernel arguments
    int_literal_suffix = {"int64": "L", "uint64": "UL", "uint32": "U"}
    vector_lanes = (2, 3, 4, 8, 16)

    # OpenCL C keywords and address-space qualifiers: a kernel named "kernel" would not build.
    reserved_words = ("kernel", "__kernel", "global", "__global", "local", "__local", "constant", "__constant",
                      "private", "__private", "read_only", "write_only", "read_write", "uniform", "pipe",
                      "half", "image2d_t", "image3d_t", "sampler_t", "event_t", "size_t", "ptrdiff_t")
    kernel_prefix = "__kernel void"
    buffer_prefix = "__global "
    scope_prefix = {"global": "", "shared": "__local ", "local": ""}
    hoisted_scopes = ("shared",)
    heap_scopes = ()                          # no malloc in a kernel: intermediates are private arrays
    max_stack_bytes = None

    thread_index = {"blockIdx": "get_group_id({dim})", "threadIdx": "get_local_id({dim})"}
    barriers = {"shared": "barrier(CLK_LOCAL_MEM_FENCE);", "global": "barrier(CLK_GLOBAL_MEM_FENCE);"}

    parallel_pragma = None                    # a work-item runs PARALLEL loops serially
    unroll_pragma = "#pragma unroll"

    vector_load = "vload{lanes}(0, {pointer})"
    vector_store = "vstore{lanes}({value}, 0, {pointer});"
    vector_cast = "convert_{type}({value})"

    float_suffix = {}                         # OpenCL math built-ins are overloaded
    math_functions = {
        **{name: name + "({0})" for name in _MATH},
        "pow": "pow({0}, {1})", "atan2": "atan2({0}, {1})", "fmod": "fmod({0}, {1})", "fma": "fma({0}, {1}, {2})",
        "round": "rint({0})",                 # half to even, like numpy
        "sigmoid": "(1.0f / (1.0f + exp(-({0}))))",
        "isnan": "isnan({0})", "isinf": "isinf({0})",
    }
    min_max_functions = {"float": ("fmin", "fmax"), "int": ("min", "max"), "uint": ("min", "max"), "bool": None}

    def extensions(self, dtypes: set[str]) -> list[str]:
        lines = []
        if "float64" in dtypes:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if "float16" in dtypes:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp16 : enable")
        return lines

    def math_call(self, name, args, dtype):
        text = super().math_call(name, args, dtype)
        if text is not None and name == "sigmoid" and dtype.startswith("float64"):
            text = text.replace("1.0f", "1.0")
        return text
