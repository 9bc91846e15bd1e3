"""half.py: float16 on every OpenCL device, natively where it reports cl_khr_fp16.

OpenCL C 1.2 lets any device hold `half` in memory and convert it with `vload_half` /
`vstore_half_rte` (core built-ins, round to nearest even both ways, as numpy's astype);
only arithmetic on `half` values, and `half` variables or arrays, need cl_khr_fp16.
So the mode is a fact of the device the target resolves, refined into its capabilities
(`float16_arithmetic`): "native" emits `half` arithmetic under the extension pragma,
"float32" keeps float16 as storage and computes in float:

  * a load of a float16 tensor is `vload_half` (`vload_halfN` for a contiguous vector);
  * a store is `vstore_half_rte` (`vstore_halfN_rte`), rounding once per stored element;
  * a cast to float16 rounds the float through the same pair (`tk_round_half_*` helpers);
  * float16 scratch (private / __local arrays, accumulators) is held in float.

Values between casts and stores are therefore float, not rounded after each operation: the
result is at least as accurate as native half arithmetic, and it equals numpy's
float32-then-astype(float16) for a kernel that computes in one expression.

bfloat16 has no OpenCL type on any device: it is always this storage mode, in `ushort` buffers
converted by 16-bit shifts (round to nearest even, as ml_dtypes), and always lane by lane.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any, Literal

from pydantic import Field

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of, with_lanes
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import Capabilities
from tensorkiln.tir.visit import post_order_visit, rewrite

__all__ = ["OpenCLCapabilities", "refine_capabilities", "float16_arithmetic",
           "store_low_precision_in_float", "HALF_FUNCTIONS", "HALF_CALLS", "half_call", "with_round_half_helpers", "FP16_EXTENSION"]

FP16_EXTENSION = "cl_khr_fp16"
_LANES = (2, 3, 4, 8, 16)


class OpenCLCapabilities(Capabilities):
    """The manifest's capabilities plus what the resolved OpenCL device does with float16."""

    float16_arithmetic: Literal["native", "float32"] = Field(
        default="float32", description="'native': half arithmetic (the device reports cl_khr_fp16); "
        "'float32': float16 is storage only (vload_half / vstore_half), arithmetic in float")


def refine_capabilities(target: Any) -> OpenCLCapabilities:
    """The manifest's capabilities with the float16 mode of the device `target` selects."""
    try:
        mode = "native" if FP16_EXTENSION in target.spec.loader.device(target).extensions else "float32"
    except Exception:   # no device here (yet): storage only runs on any device a later load finds
        mode = "float32"
    base = target.spec.manifest.capabilities
    return OpenCLCapabilities.model_validate({**base.model_dump(), "float16_arithmetic": mode})


def float16_arithmetic(target: Any) -> str:
    """"native" or "float32" for `target`; without a target (or a device), storage only works anywhere."""
    capabilities = getattr(target, "capabilities", None) if target is not None else None
    return getattr(capabilities, "float16_arithmetic", "float32")


# ---- emitter templates of the calls the rewrite below introduces ------------------------------
HALF_FUNCTIONS = {
    "tk_load_half": "vload_half(0, {0})",
    "tk_store_half": "vstore_half_rte({0}, 0, {1})",
    "tk_round_half": "tk_round_half_{type}({0})",
    **{f"tk_vload_half{n}": f"vload_half{n}(0, {{0}})" for n in _LANES},
    **{f"tk_vstore_half{n}": f"vstore_half{n}_rte({{0}}, 0, {{1}})" for n in _LANES},
}
_GATHER = "tk_gather_half"   # not in HALF_FUNCTIONS: never a vector, so read lane by lane
_TO_BITS, _FROM_BITS = "tk_half_bits", "tk_half_from_bits"   # scalar helpers: vectors go lane by lane
# bfloat16 is a ushort buffer; none of these is a vector, so expressions with them go lane by lane
_BF16_LOAD, _BF16_STORE, _ROUND_BF16 = "tk_load_bf16", "tk_store_bf16", "tk_round_bf16"
_BF16_TO_BITS, _BF16_FROM_BITS = "tk_bf16_from_float", "tk_bf16_to_float"
_BF16_CALLS = {
    _BF16_LOAD: "tk_bf16_to_float(({0})[{1}])", _BF16_STORE: "({1})[{2}] = tk_bf16_from_float({0})",
    _ROUND_BF16: "tk_round_bf16({0})", _BF16_TO_BITS: "tk_bf16_from_float({0})", _BF16_FROM_BITS: "tk_bf16_to_float({0})",
}
HALF_CALLS = frozenset((*HALF_FUNCTIONS, _GATHER, _TO_BITS, _FROM_BITS, *_BF16_CALLS))


def half_call(name: str, args, type_name: str) -> str | None:
    """C text of one of the calls above, or None when `name` is none of them."""
    if name == _GATHER:
        return f"vload_half({args[1]}, {args[0]})"
    if name in (_TO_BITS, _FROM_BITS):
        return f"{name}({args[0]})"
    if name in _BF16_CALLS:
        return _BF16_CALLS[name].format(*args)
    template = HALF_FUNCTIONS.get(name)
    return None if template is None else template.format(*args, type=type_name)


_ROUND_CALL = re.compile(r"\btk_round_half_(float[0-9]*)\(")
_BIT_HELPERS = {
    _TO_BITS: f"inline ushort {_TO_BITS}(float x) {{ ushort h; vstore_half_rte(x, 0, (half*)&h); return h; }}",
    _FROM_BITS: f"inline float {_FROM_BITS}(ushort h) {{ return vload_half(0, (const half*)&h); }}",
}
# float -> bfloat16 rounds to nearest even like ml_dtypes; a NaN stays a (quiet) NaN
_BF16_HELPERS = (
    "inline float tk_bf16_to_float(ushort h) { return as_float(((uint)h) << 16); }",
    "inline ushort tk_bf16_from_float(float x) { uint u = as_uint(x); "
    "if (isnan(x)) return (ushort)((u >> 16) | 0x40u); return (ushort)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16); }",
    "inline float tk_round_bf16(float x) { return tk_bf16_to_float(tk_bf16_from_float(x)); }",
)


def with_round_half_helpers(source: str) -> str:
    """`source` with one definition per tk_round_half_* / tk_half_*bits helper it calls, after the pragmas."""
    used = sorted(set(_ROUND_CALL.findall(source)))
    helpers = [text for name, text in _BIT_HELPERS.items() if re.search(rf"\b{name}\(", source)]
    if re.search(r"\btk_(bf16_|round_bf16)", source):
        helpers += _BF16_HELPERS
    if not used and not helpers:
        return source
    for type_name in used:
        lanes = type_name[len("float"):]
        helpers.append(f"inline {type_name} tk_round_half_{type_name}({type_name} x) {{ ushort{lanes} h; "
                       f"vstore_half{lanes}_rte(x, 0, (half*)&h); return vload_half{lanes}(0, (const half*)&h); }}")
    lines = source.split("\n")
    first = next(i for i, line in enumerate(lines) if not line.startswith("#pragma"))
    return "\n".join([*lines[:first], *helpers, "", *lines[first:]])


# ---- float16 / bfloat16 storage, float arithmetic ------------------------------------------------

def _as_float(dtype: str) -> str:
    return with_lanes("float32", dtype_of(dtype).lanes)


def store_low_precision_in_float(func: tir.PrimFunc, float16: bool = True) -> tir.PrimFunc:
    """`func` with bfloat16, and float16 when `float16`, only in memory: loads / stores of such
    tensors through conversion calls (vload_half / vstore_half for float16, 16-bit shifts for
    bfloat16), their values and scratch buffers in float32."""
    low = ("float16", "bfloat16") if float16 else ("bfloat16",)

    def is_low(dtype: str) -> bool:
        return dtype not in ("void", "handle") and dtype_of(dtype).element in low

    for p in func.params:
        if not isinstance(p, tir.Buffer) and is_low(p.dtype):
            raise CompileError(f"kernel {func.name}: scalar {p.dtype} parameter {p.name} is not supported by this "
                               "OpenCL device (float16 needs cl_khr_fp16); pass it as float32")
    scratch: dict[int, tir.Buffer] = {}

    def collect(node):
        if isinstance(node, tir.Allocate) and is_low(node.buffer.dtype):
            scratch[id(node.buffer)] = dataclasses.replace(node.buffer, dtype="float32")
        elif isinstance(node, tir.ThreadAllReduce) and any(is_low(v.dtype) for v in node.values):
            raise CompileError(f"kernel {func.name}: a {node.values[0].dtype} cross-thread reduction was not lowered")
    post_order_visit(func.body, collect)
    if not scratch and not _mentions(func, is_low):
        return func

    def mark_bits(node):   # which 16-bit float a bitcast reads, before its value becomes a float32
        if isinstance(node, tir.Reinterpret) and is_low(node.value.dtype):
            return tir.Call(node.dtype, _BITS_OF + dtype_of(node.value.dtype).element, (node.value,))
        return None

    def post(node):
        if isinstance(node, tir.Call) and node.name.startswith(_BITS_OF):
            return _bits_of(node)
        if isinstance(node, tir.Var) and is_low(node.dtype):
            return dataclasses.replace(node, dtype=_as_float(node.dtype))
        if isinstance(node, tir.FloatImm) and is_low(node.dtype):
            return tir.FloatImm(_as_float(node.dtype), _round_python(node.value, dtype_of(node.dtype).element))
        if isinstance(node, tir.Cast):
            return _cast(node, is_low)
        if isinstance(node, tir.Call) and is_low(node.dtype):
            return dataclasses.replace(node, dtype=_as_float(node.dtype))
        if isinstance(node, tir.Reinterpret):
            return _reinterpret(func, node, low)
        if isinstance(node, (tir.Load, tir.Store, tir.Allocate, tir.BufferPointer)) and id(node.buffer) in scratch:
            return dataclasses.replace(node, buffer=scratch[id(node.buffer)])
        if isinstance(node, tir.Load) and is_low(node.buffer.dtype):
            return _load(node)
        if isinstance(node, tir.Store) and is_low(node.buffer.dtype):
            return _store(node)
        return None

    body = rewrite(rewrite(func.body, post=mark_bits), post=post)
    return func if body is func.body else dataclasses.replace(func, body=body)


_BITS_OF = "tk_bits_of_"


def _bits_of(node: tir.Call) -> tir.PrimExpr:
    element = dtype_of(node.dtype)
    name = _TO_BITS if node.name == _BITS_OF + "float16" else _BF16_TO_BITS
    bits = tir.Call(with_lanes("uint16", element.lanes), name, node.args)
    return bits if element.element == "uint16" else tir.Reinterpret(node.dtype, bits)


def _mentions(func: tir.PrimFunc, is_low) -> bool:
    found = []

    def visit(node):
        if not found and (isinstance(node, (tir.Load, tir.Store)) and is_low(node.buffer.dtype)
                          or isinstance(node, tir.PrimExpr) and is_low(node.dtype)):
            found.append(node)
    post_order_visit(func.body, visit)
    return bool(found)


def _round_python(value: float, element: str) -> float:
    import numpy as np
    if element == "float16":
        return float(np.float16(value))
    import ml_dtypes
    return float(np.float32(value).astype(ml_dtypes.bfloat16))


_ROUND = {"float16": "tk_round_half", "bfloat16": _ROUND_BF16}


def _cast(node: tir.Cast, is_low):
    value = node.value           # already rewritten: float32 where it was float16 / bfloat16
    if is_low(node.dtype):
        if dtype_of(value.dtype).element != "float32":
            value = tir.Cast(_as_float(value.dtype), value)
        return tir.Call(_as_float(node.dtype), _ROUND[dtype_of(node.dtype).element], (value,))
    if value.dtype == node.dtype:
        return value
    return None if node.value is value else tir.Cast(node.dtype, value)


def _reinterpret(func: tir.PrimFunc, node: tir.Reinterpret, low: tuple[str, ...]):
    """16 bits read as a float16 / bfloat16 (the other way is `_bits_of`)."""
    element, source = dtype_of(node.dtype), dtype_of(node.value.dtype)
    lanes = element.lanes
    if element.element in low:
        if source.bits != 16:
            raise CompileError(f"kernel {func.name}: reinterpret {node.value.dtype} -> {node.dtype}: sizes differ")
        bits = node.value if source.element == "uint16" else tir.Cast(with_lanes("uint16", lanes), node.value)
        name = _FROM_BITS if element.element == "float16" else _BF16_FROM_BITS
        return tir.Call(with_lanes("float32", lanes), name, (bits,))
    return None


def _contiguous(index: tir.PrimExpr) -> bool:
    return (isinstance(index, tir.Ramp) and isinstance(index.stride, tir.IntImm) and index.stride.value == 1
            and index.lanes_count in _LANES)


def _load(node: tir.Load) -> tir.PrimExpr:
    lanes = node.index.lanes
    dtype = with_lanes("float32", lanes)
    half = dtype_of(node.buffer.dtype).element == "float16"
    if lanes == 1 and half:
        value = tir.Call(dtype, "tk_load_half", (tir.BufferPointer(node.buffer, node.index),))
    elif half and _contiguous(node.index) and node.predicate is None:
        value = tir.Call(dtype, f"tk_vload_half{lanes}", (tir.BufferPointer(node.buffer, node.index.base),))
    else:   # bfloat16 always lane by lane: no built-in converts it
        value = tir.Call(dtype, _GATHER if half else _BF16_LOAD,
                         (tir.BufferPointer(node.buffer, tir.IntImm("int32", 0)), node.index))
    if node.predicate is None:
        return value
    zero = tir.FloatImm("float32", 0.0)
    return tir.Select(node.predicate, value, zero if lanes == 1 else tir.Broadcast(zero, lanes))


def _store(node: tir.Store) -> tir.Stmt:
    half = dtype_of(node.buffer.dtype).element == "float16"
    rounding = "tk_round_half" if half else _ROUND_BF16
    if isinstance(node.value, tir.Call) and node.value.name == rounding:
        node = dataclasses.replace(node, value=node.value.args[0])   # the store rounds the same way

    def write(value, index):
        if half:
            return tir.Evaluate(tir.Call("void", "tk_store_half", (value, tir.BufferPointer(node.buffer, index))))
        return tir.Evaluate(tir.Call("void", _BF16_STORE,
                                     (value, tir.BufferPointer(node.buffer, tir.IntImm("int32", 0)), index)))
    lanes = node.value.lanes
    if lanes == 1:
        stmt = write(node.value, node.index)
        return stmt if node.predicate is None else tir.IfThenElse(node.predicate, stmt)
    # A vector value goes through a private float array: the emitter writes it as a vector where it
    # can and lane by lane where it cannot, and the 16-bit stores then read it back.
    values = tir.Buffer(f"{node.buffer.name}_lanes", (tir.IntImm("int32", lanes),), "float32", scope="local")
    ramp = tir.Ramp(tir.IntImm("int32", 0), tir.IntImm("int32", 1), lanes)
    if half and _contiguous(node.index) and node.predicate is None:
        vector = tir.Evaluate(tir.Call("void", f"tk_vstore_half{lanes}",
                                       (tir.Load(values, ramp), tir.BufferPointer(node.buffer, node.index.base))))
        return tir.Allocate(values, tir.SeqStmt((tir.Store(values, node.value, ramp), vector)))
    indices = tir.Buffer(f"{node.buffer.name}_at", (tir.IntImm("int32", lanes),), node.index.dtype.split("x")[0],
                         scope="local")
    lane = tir.Var("lane", "int32")
    stmt = write(tir.Load(values, lane), tir.Load(indices, lane))
    stores = [tir.Store(values, node.value, ramp), tir.Store(indices, node.index, ramp)]
    allocations = [values, indices]
    if node.predicate is not None:
        mask = tir.Buffer(f"{node.buffer.name}_mask", (tir.IntImm("int32", lanes),), "bool", scope="local")
        stores.append(tir.Store(mask, node.predicate, ramp))
        allocations.append(mask)
        stmt = tir.IfThenElse(tir.Load(mask, lane), stmt)
    loop = tir.For(lane, tir.IntImm("int32", 0), tir.IntImm("int32", lanes), tir.ForKind.SERIAL, stmt)
    body: tir.Stmt = tir.SeqStmt((*stores, loop))
    for buffer in reversed(allocations):
        body = tir.Allocate(buffer, body)
    return body
