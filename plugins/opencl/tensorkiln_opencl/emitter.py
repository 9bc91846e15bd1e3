"""emitter.py: OpenCLEmitter, OpenCL C 1.2 from the SDK's shared C-source emitter.

Only the dialect lives here: keywords, thread indices, barriers, vector types and
math names. The traversal of the loop IR is `tensorkiln.sdk.CSourceEmitter`'s.
"""
from __future__ import annotations

import dataclasses
import re

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.sdk import CSourceEmitter
from tensorkiln.tir.visit import rewrite

from .half import (HALF_CALLS, HALF_FUNCTIONS, float16_arithmetic, half_call, store_low_precision_in_float,
                   with_round_half_helpers)

__all__ = ["OpenCLEmitter"]

_MATH = ("exp", "exp2", "log", "log2", "log10", "sqrt", "rsqrt", "tanh", "erf", "floor", "ceil", "trunc",
         "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "fabs")


class OpenCLEmitter(CSourceEmitter):
    """tir PrimFuncs -> one OpenCL C program (Artifact format "opencl-c").

    Thread-bound loops read get_group_id / get_local_id; "shared" buffers are __local
    arrays declared at kernel scope (OpenCL 1.2 allows them nowhere else); "local"
    buffers and per-thread intermediates are private arrays; vectors of 2, 3, 4, 8 or
    16 lanes use the built-in vector types, with vloadN / vstoreN for contiguous access.
    float16 is `half` arithmetic only when the target's device reports cl_khr_fp16; otherwise
    it is stored as half and computed in float through vload_half / vstore_half (half.py).
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
    storage_type_names = {"bool": "uchar",   # bool is not allowed in kernel arguments
                          "bfloat16": "ushort"}   # no OpenCL type: 16 bits converted by half.py
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

    prefetch_statement = "prefetch({pointer}, {count});"   # OpenCL C 1.0 built-in: into the global cache
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
        # float Min/Max (see _nan_min_max_calls); listed so vectors stay vectors, and math_call
        # appends the C type to the helper's name
        "tk_nan_min": "tk_nan_min_{type}({0}, {1})", "tk_nan_max": "tk_nan_max_{type}({0}, {1})",
        # float16 as storage on a device without cl_khr_fp16 (half.py)
        **HALF_FUNCTIONS,
    }
    min_max_functions = {"float": ("fmin", "fmax"), "int": ("min", "max"), "uint": ("min", "max"), "bool": None}

    def extensions(self, dtypes: set[str]) -> list[str]:
        lines = []
        if "float64" in dtypes:
            lines.append("#pragma OPENCL EXTENSION cl_khr_fp64 : enable")
        if "float16" in dtypes:
            lines.append(_FP16_PRAGMA)
        return lines

    def emit_source(self, funcs, target=None):
        """The shared C emitter's text, with float Min/Max through NaN-propagating helpers, and
        float16 as storage only unless the target's device does half arithmetic (half.py)."""
        funcs = [_nan_min_max_calls(f) if isinstance(f, tir.PrimFunc) else f for f in funcs]
        half_storage = float16_arithmetic(target) != "native"   # bfloat16 is storage only everywhere
        funcs = [store_low_precision_in_float(self.lower_thread_allreduce(f, target), float16=half_storage)
                 if isinstance(f, tir.PrimFunc) else f for f in funcs]
        source, kernels = super().emit_source(funcs, target)
        if half_storage:   # half pointers and vload_half / vstore_half are core OpenCL 1.2
            source = source.replace(_FP16_PRAGMA + "\n", "")
        source = with_round_half_helpers(source)
        return _with_nan_min_max_helpers(source), kernels

    def math_call(self, name, args, dtype):
        if name in HALF_CALLS:
            return half_call(name, args, self.type_name(dtype) if dtype_of(dtype).is_float else "")
        if name in _NAN_MIN_MAX:
            return self.math_functions[name].format(*args, type=self.type_name(dtype))
        text = super().math_call(name, args, dtype)
        if text is not None and name == "sigmoid" and dtype.startswith("float64"):
            text = text.replace("1.0f", "1.0")
        return text


# ---- NaN-propagating min/max ------------------------------------------------------------------
# tir.Min/Max mean numpy's minimum/maximum: NaN on either side propagates (relu, clip, max
# reductions and pools rely on it). OpenCL's fmin/fmax return the other operand instead, and
# no built-in propagates, so float Min/Max become calls of a helper per type (scalar or vector;
# OpenCL C 1.2 has no overloading), defined once in the program. Integer Min/Max keep min/max.
# The shared CSourceEmitter's own helper propagates NaN too, but it is scalar only: OpenCL's
# vector types need these per-type helpers (its min_max_functions keep fmin/fmax for the rest).
_NAN_MIN_MAX = ("tk_nan_min", "tk_nan_max")
_FP16_PRAGMA = "#pragma OPENCL EXTENSION cl_khr_fp16 : enable"
_HELPER_CALL = re.compile(r"\btk_nan_(min|max)_([a-z]+[0-9]*)\(")


def _nan_min_max_calls(func: tir.PrimFunc) -> tir.PrimFunc:
    def replace(node):
        if isinstance(node, (tir.Min, tir.Max)) and dtype_of(node.dtype).is_float:
            name = "tk_nan_min" if isinstance(node, tir.Min) else "tk_nan_max"
            return tir.Call(node.dtype, name, (node.a, node.b))
        return None
    body = rewrite(func.body, post=replace)
    return func if body is func.body else dataclasses.replace(func, body=body)


def _nan_min_max_helper(kind: str, type_name: str) -> str:
    builtin = "fmin" if kind == "min" else "fmax"
    if type_name[-1].isdigit():   # vectors: isnan gives -1 per NaN lane, which select tests
        body = f"return select({builtin}(a, b), a + b, isnan(a) | isnan(b));"
    else:
        body = f"return (isnan(a) || isnan(b)) ? a + b : {builtin}(a, b);"
    return f"inline {type_name} tk_nan_{kind}_{type_name}({type_name} a, {type_name} b) {{ {body} }}"


def _with_nan_min_max_helpers(source: str) -> str:
    """`source` with a definition of each tk_nan_* helper it calls, after the extension pragmas."""
    used = sorted(set(_HELPER_CALL.findall(source)))
    if not used:
        return source
    lines = source.split("\n")
    first = next(i for i, line in enumerate(lines) if not line.startswith("#pragma"))
    helpers = [_nan_min_max_helper(kind, type_name) for kind, type_name in used]
    return "\n".join([*lines[:first], *helpers, "", *lines[first:]])
