"""emitter.py: HLSEmitter, Vitis-HLS C++ from the SDK's shared C-source emitter.

One `extern "C"` top function per fused kernel:

    extern "C" void dense(const float* A, const float* B, float* C) {
        #pragma HLS INTERFACE mode=m_axi port=A bundle=gmem0 depth=4096 offset=slave
        ...
        #pragma HLS INTERFACE mode=s_axilite port=return bundle=control
        L_i: for (int32_t i = 0; i < 64; ++i) {
            #pragma HLS PIPELINE II=1
            ...

- tensors are m_axi ports (one bundle each, depth = element count), scalars and the
  return are s_axilite;
- every loop is labelled `L_<variable>` so pragmas and reports can name it;
- schedule primitives become pragmas: pipeline(ii) -> PIPELINE II=, unroll -> UNROLL
  (factor=), loop_tripcount -> LOOP_TRIPCOUNT, partition -> ARRAY_PARTITION on the
  buffer's declaration, stream(depth) -> a `tk::stream` with STREAM depth, dataflow ->
  DATAFLOW with each root stage a process (in C-simulation a thread);
- element types per tensor (types.py): float, ap_int, ap_fixed. When any tensor is fixed
  point, float arithmetic inside the kernel runs in the wide fixed type `tk_real`, and
  each fixed output is computed into a `tk_real` array and quantised once at the end, so
  the kernel equals "quantised inputs, exact arithmetic, quantised output".
Pragma keywords follow the target's `-tool_version` (pragmas.py).
"""
from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import CSourceEmitter, tensor_formats
from tensorkiln.tir.visit import post_order_visit, rewrite

from .estimate import estimate_kernel
from .lint import lint_module
from .pragmas import PragmaSpelling, respell, spelling_for
from .types import FLOAT, TENSOR_TYPES_ATTR, HLSType, from_fixed_point, parse_tensor_types

__all__ = ["HLSEmitter", "KernelTypes", "kernel_types", "DEFAULT_TOOL_VERSION", "ACCUMULATOR"]

DEFAULT_TOOL_VERSION = "vitis-2023.2"
ACCUMULATOR = "ap_fixed<64,32>"
"""`tk_real`, the type of float arithmetic in a kernel with fixed-point tensors: 32 fraction
bits hold the exact product of two ap_fixed<W,I> with W - I <= 16, 32 integer bits the sums."""

_REAL_LIMIT = 2.0 ** 31
"""|tk_real| stays below this (32 integer bits, sign included)."""
# what a fixed-point kernel may compute exactly; exp/log/... have no exact fixed-point form
_FIXED_SAFE_CALLS = ("fabs", "floor", "ceil", "trunc")
_DATAFLOW_REGION = "tk_dataflow"


@dataclasses.dataclass(frozen=True)
class KernelTypes:
    """Element types of one kernel's tensors by buffer name; `fixed` when any is not float."""

    by_buffer: dict[str, HLSType]
    untyped_floats: tuple[str, ...] = ()

    def of(self, buffer: tir.Buffer) -> HLSType:
        return self.by_buffer.get(buffer.name, FLOAT)

    @property
    def fixed(self) -> bool:
        return any(not t.is_float for t in self.by_buffer.values())


def kernel_types(func: tir.PrimFunc, target: Any) -> KernelTypes:
    """The HLS type of each float buffer of `func`: the PrimFunc attribute TENSOR_TYPES_ATTR, then
    -tensor_types, then the core's precision plan (tensor_formats), then -data_type; ints keep their C
    types unless named explicitly."""
    options = getattr(target, "options", {}) or {}
    default = HLSType.parse(options.get("data_type") or "float")
    planned = {name: from_fixed_point(fmt) for name, fmt in tensor_formats(func).items()}
    named = {**planned, **parse_tensor_types(options.get("tensor_types") or "")}
    named.update({name: HLSType.parse(text) for name, text in (func.attr(TENSOR_TYPES_ATTR) or ())})
    params = {p.name for p in func.params if isinstance(p, tir.Buffer)}
    found: dict[str, HLSType] = {}
    untyped = []
    for buffer in _buffers(func):
        if buffer.name in named:
            found[buffer.name] = named[buffer.name]
        elif dtype_of(buffer.dtype).element == "float32" and not default.is_float:
            found[buffer.name] = default
        elif dtype_of(buffer.dtype).element == "float32" and not (planned and buffer.name not in params):
            # with a precision plan, a kernel's own arrays (line buffers, FIFOs) hold exact tk_real
            # intermediates: the plan quantises at kernel boundaries only
            untyped.append(buffer.name)
    return KernelTypes(found, tuple(untyped))


def _buffers(func: tir.PrimFunc) -> list[tir.Buffer]:
    """Parameters, then allocations, of `func`."""
    buffers: list[tir.Buffer] = [p for p in func.params if isinstance(p, tir.Buffer)]
    post_order_visit(func.body, lambda x: buffers.append(x.buffer) if isinstance(x, tir.Allocate) else None)
    return buffers


@dataclasses.dataclass
class _EmitState:
    spelling: PragmaSpelling
    types: dict[str, KernelTypes]          # by kernel name
    by_buffer: dict[int, HLSType] = dataclasses.field(default_factory=dict)   # id(Buffer) -> type
    current_func: tir.PrimFunc | None = None
    fixed_module: bool = False


_STATE: contextvars.ContextVar[_EmitState] = contextvars.ContextVar("tk_fpga_hls_emit")


class HLSEmitter(CSourceEmitter):
    """tir PrimFuncs -> one Vitis-HLS C++ file (Artifact format "hls-cpp")."""

    target_name = "fpga_hls"
    artifact_format = "hls-cpp"
    intrinsic_languages = ("hls", "c++")

    preamble = '#include "tk_hls.h"\n'
    helper_prefix = "static inline"
    kernel_prefix = 'extern "C" void'
    restrict = ""
    reserved_words = ("class", "namespace", "template", "typename", "new", "delete", "this", "operator",
                      "private", "public", "protected", "virtual", "friend", "using", "tk", "std", "hls",
                      "tk_real", _DATAFLOW_REGION)

    type_names = {**CSourceEmitter.type_names, "float32": "tk_real"}
    heap_scopes = ()                      # no malloc on an FPGA: arrays are BRAM / registers
    max_stack_bytes = None
    parallel_pragma = None
    unroll_pragma = None                  # HLS reads UNROLL inside the loop body (loop_body_pragmas)
    vectorize_pragma = None

    math_functions = {
        **CSourceEmitter.math_functions,
        "tk_dataflow_stage_begin": f"TK_STAGE_BEGIN({_DATAFLOW_REGION})",
        "tk_dataflow_stage_end": "TK_STAGE_END",
        "tk_dataflow_join": f"TK_DATAFLOW_JOIN({_DATAFLOW_REGION})",
    }

    # --- entry point -------------------------------------------------------------------------

    def emit_source(self, funcs, target=None):
        options = getattr(target, "options", {}) or {}
        spelling = spelling_for(options.get("tool_version") or DEFAULT_TOOL_VERSION)
        funcs = list(funcs)
        types = {f.name: kernel_types(f, target) for f in funcs if isinstance(f, tir.PrimFunc)}
        state = _EmitState(spelling, types, fixed_module=any(t.fixed for t in types.values()))
        if state.fixed_module:
            untyped = [f"{name} of {kernel}" for kernel, t in types.items() for name in t.untyped_floats]
            if untyped:
                raise CompileError(f"fpga_hls: fixed-point and float tensors are mixed in one module; float "
                                   f"arithmetic runs in one fixed type ({ACCUMULATOR}), so give these a type too: "
                                   f"{', '.join(untyped)} (-data_type=ap_fixed<W,I> types every float tensor)")
        prepared = [self._prepare(f, types[f.name]) if isinstance(f, tir.PrimFunc) else f for f in funcs]
        for func in prepared:
            if isinstance(func, tir.PrimFunc):
                for buffer in _buffers(func):
                    state.by_buffer[id(buffer)] = types[func.name].of(buffer)
        token = _STATE.set(state)
        try:
            source, kernels = super().emit_source(prepared, target)
        finally:
            _STATE.reset(token)
        source = respell(source, spelling)
        lint_module([f for f in funcs if isinstance(f, tir.PrimFunc)], source, spelling)
        real = ACCUMULATOR if state.fixed_module else "float"
        head, _, rest = source.partition("\n")
        source = f"{head}\n\ntypedef {real} tk_real;   // float arithmetic of the kernels\n{rest}"
        for original, func in zip(funcs, prepared):
            if isinstance(func, tir.PrimFunc):
                kernels[func.name]["hls_types"] = {name: t.cpp for name, t in types[func.name].by_buffer.items()}
                kernels[func.name]["dataflow"] = bool(func.attr("dataflow"))
                kernels[func.name]["estimate"] = estimate_kernel(original, target)
        return source, kernels

    def _prepare(self, func: tir.PrimFunc, types: KernelTypes) -> tir.PrimFunc:
        """The kernel with fixed outputs computed into tk_real arrays, and dataflow stage markers."""
        # stages first: the exact-output copy then runs after the dataflow join, and the stages stay
        # the schedule's root stages (marking after wrapping made the whole body one stage, whose
        # producer filled its FIFO with no consumer running: a deadlock)
        if func.attr("dataflow"):
            func = _mark_dataflow_stages(func)
        if types.fixed:
            func = _accumulate_outputs_exactly(func, types)
            func = _widen_fixed_loads(func, types)
        return func

    # --- per-kernel state --------------------------------------------------------------------

    @property
    def _state(self) -> _EmitState:
        state = _STATE.get(None)
        if state is None:   # called outside emit_source (a plugin asking for a type): defaults
            return _EmitState(spelling_for(DEFAULT_TOOL_VERSION), {})
        return state

    def buffer_type_name(self, buffer) -> str:
        hls_type = self._state.by_buffer.get(id(buffer), FLOAT)
        return self.storage_type_name(buffer.dtype) if hls_type.is_float else hls_type.cpp

    def storage_type_name(self, dtype: str) -> str:
        # a float tensor without an HLS type is a float array, whatever tk_real is
        return "float" if dtype == "float32" else super().storage_type_name(dtype)

    def kernel_pragmas(self, func: tir.PrimFunc, names: dict[str, str]) -> list[str]:
        state = self._state
        state.current_func = func
        spell = state.spelling
        lines = []
        for index, param in enumerate(p for p in func.params if isinstance(p, tir.Buffer)):
            depth = 1
            for extent in param.shape:
                depth *= int(extent.value) if isinstance(extent, tir.IntImm) else 1
            lines.append(spell.interface("m_axi", names[param.name], bundle=f"gmem{index}", depth=depth,
                                         offset="slave"))
        for param in func.params:
            if not isinstance(param, tir.Buffer):
                lines.append(spell.interface("s_axilite", names[param.name], bundle="control"))
        lines.append(spell.interface("s_axilite", "return", bundle="control"))
        if func.attr("dataflow"):
            lines += [spell.dataflow(), f"TK_DATAFLOW_REGION({_DATAFLOW_REGION});"]
        return lines

    # --- loops -------------------------------------------------------------------------------

    def loop_label(self, loop: tir.For, name: str) -> str:
        return f"L_{name}"

    def loop_body_pragmas(self, loop: tir.For) -> list[str]:
        spell = self._state.spelling
        lines = []
        if loop.kind in (tir.ForKind.UNROLLED, tir.ForKind.VECTORIZED):
            lines.append(spell.unroll())
        for key, value in loop.annotations:
            if key == "pipeline":
                lines.append(spell.pipeline(int(value)))
            elif key == "unroll_factor":
                lines.append(spell.unroll(int(value)))
            elif key == "loop_tripcount":
                lines.append(spell.loop_tripcount(*value))
        return lines

    # --- memory ------------------------------------------------------------------------------

    def declare_allocation(self, buffer, name, size):
        func_attrs = self._allocation_attrs()
        hls_type = self._state.by_buffer.get(id(buffer), FLOAT)
        element = self.type_name(buffer.dtype) if hls_type.is_float and buffer.dtype == "float32" \
            else (self.storage_type_name(buffer.dtype) if hls_type.is_float else hls_type.cpp)
        spell = self._state.spelling
        depth = func_attrs["stream"].get(buffer.name)
        if depth is not None:
            return [f'tk::stream<{element}> {name}("{buffer.name}", {depth});', spell.stream(name, depth)], []
        # large arrays are static: C-simulation's stack is small, an FPGA's BRAM is not a stack
        storage = "static " if size * 8 > 64 * 1024 else ""
        lines = [f"{storage}{element} {name}[{size}];"]
        partition = func_attrs["array_partition"].get(buffer.name)
        if partition is not None:
            lines.append(spell.array_partition(name, *partition))
        return lines, []

    def _allocation_attrs(self) -> dict[str, dict]:
        current = self._state.current_func
        attrs = {"stream": {}, "array_partition": {}}
        if current is not None:
            attrs["stream"] = {name: depth for name, depth in current.attr("stream") or ()}
            attrs["array_partition"] = {name: (kind, factor) for name, kind, factor in
                                        current.attr("array_partition") or ()}
        return attrs

    # --- expressions -------------------------------------------------------------------------

    def literal(self, value, dtype):
        if self._state.fixed_module and dtype == "float32" and abs(float(value)) >= _REAL_LIMIT:
            # float's lowest (max pool's padding) would wrap in tk_real: its nearest end holds the
            # same meaning, below every value a fixed-point tensor can hold
            value = _REAL_LIMIT - 1.0 if float(value) > 0 else -_REAL_LIMIT
        text = super().literal(value, dtype)
        # in a fixed-point module float constants are tk_real, so `c ? x : 0.0f` has one type
        return f"((tk_real){text})" if self._state.fixed_module and dtype == "float32" else text

    def math_call(self, name, args, dtype):
        if name.startswith("tk_dataflow_"):
            return self.math_functions[name]
        if self._state.fixed_module and name == "fma":   # exact in fixed point: multiply, then add
            return f"(({args[0]}) * ({args[1]}) + ({args[2]}))"
        if self._state.fixed_module and dtype_of(dtype).is_float and name in CSourceEmitter.math_functions \
                and name not in _FIXED_SAFE_CALLS:
            raise CompileError(f"fpga_hls: a kernel with fixed-point tensors calls {name}, which has no exact "
                               "fixed-point form; give this kernel's tensors the float type (-tensor_types) or "
                               "keep fixed point to linear ops, max and relu")
        if self._state.fixed_module and name in ("floor", "ceil", "trunc", "fabs") and dtype_of(dtype).is_float:
            return _fixed_rounding(name, args[0])
        return super().math_call(name, args, dtype)


def _fixed_rounding(name: str, value: str) -> str:
    """floor/ceil/trunc/fabs on tk_real (ap_fixed), which <cmath> does not know."""
    if name == "fabs":
        return f"(({value}) < 0 ? (tk_real)(-({value})) : (tk_real)({value}))"
    integer = f"(tk_real)(({value}).to_int64())"         # toward zero
    if name == "trunc":
        return integer
    if name == "floor":
        return f"(({integer}) > ({value}) ? {integer} - 1 : {integer})"
    return f"(({integer}) < ({value}) ? {integer} + 1 : {integer})"


def _accumulate_outputs_exactly(func: tir.PrimFunc, types: KernelTypes) -> tir.PrimFunc:
    """Compute each written fixed-point parameter into a tk_real array, then quantise it once."""
    written: set[str] = set()
    post_order_visit(func.body, lambda x: written.add(x.buffer.name) if isinstance(x, (tir.Store,
                                                                                    tir.BufferPointer)) else None)
    body = func.body
    for param in func.params:
        if not isinstance(param, tir.Buffer) or param.name not in written or types.of(param).is_float:
            continue
        if dtype_of(param.dtype).element != "float32":
            continue
        size = 1
        for extent in param.shape:
            size *= int(extent.value)
        shadow = tir.Buffer(f"{param.name}_exact", (tir.IntImm("int32", size),), param.dtype, None, "local")

        def redirect(node, param=param, shadow=shadow):
            if isinstance(node, (tir.Store, tir.Load, tir.BufferPointer)) and node.buffer.name == param.name:
                return dataclasses.replace(node, buffer=shadow)
            return None
        body = rewrite(body, post=redirect)
        index = tir.Var(f"{param.name}_q", "int32")
        copy = tir.For(index, tir.IntImm("int32", 0), tir.IntImm("int32", size), tir.ForKind.SERIAL,
                       tir.Store(param, tir.Load(shadow, index), index), None, (("pipeline", 1),))
        body = tir.Allocate(shadow, tir.SeqStmt((body, copy)))
    return dataclasses.replace(func, body=body)


def _widen_fixed_loads(func: tir.PrimFunc, types: KernelTypes) -> tir.PrimFunc:
    """Every read of a fixed-point tensor as tk_real, so mixed expressions (a select between a
    tensor and 0.0f, a tensor times another type) have one C++ type; widening is exact."""
    def widen(node):
        if isinstance(node, tir.Load) and not types.of(node.buffer).is_float and node.dtype == "float32":
            return tir.Cast("float32", node)
        return None
    return dataclasses.replace(func, body=rewrite(func.body, post=widen))


def _mark_dataflow_stages(func: tir.PrimFunc) -> tir.PrimFunc:
    """Each statement of the function's top-level sequence (under its allocations) is one dataflow
    process: bracketed by stage markers the emitter writes as TK_STAGE_BEGIN / TK_STAGE_END."""
    def mark(stmt):
        if isinstance(stmt, tir.Allocate):
            return dataclasses.replace(stmt, body=mark(stmt.body))
        stages = stmt.stmts if isinstance(stmt, tir.SeqStmt) else (stmt,)
        marked = []
        for stage in stages:
            marked += [_marker("tk_dataflow_stage_begin"), stage, _marker("tk_dataflow_stage_end")]
        return tir.SeqStmt((*marked, _marker("tk_dataflow_join")))
    return dataclasses.replace(func, body=mark(func.body))


def _marker(name: str) -> tir.Evaluate:
    return tir.Evaluate(tir.Call("void", name, ()))
