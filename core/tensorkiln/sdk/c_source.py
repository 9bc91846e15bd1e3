"""sdk/c_source.py: CSourceEmitter, the shared base of every C-dialect emitter.

The base turns tir PrimFuncs into plain C99 (a `.c` file the system compiler builds).
A vendor whose device speaks a C dialect (OpenCL C, CUDA C, HLS C++) subclasses it and
overrides *data*: class attributes and a few small methods. The traversal of the loop IR
stays here, shared, so a fix reaches every dialect:

    class OpenCLEmitter(CSourceEmitter):
        target_name = "opencl"
        artifact_format = "opencl-c"
        kernel_prefix = "__kernel void"
        buffer_prefix = "__global "
        scope_prefix = {"global": "", "shared": "__local ", "local": ""}
        thread_index = {"blockIdx": "get_group_id({dim})", "threadIdx": "get_local_id({dim})"}
        barriers = {"shared": "barrier(CLK_LOCAL_MEM_FENCE);", "global": "barrier(CLK_GLOBAL_MEM_FENCE);"}

The override points are listed in the `CSourceEmitter` class docstring (`help(CSourceEmitter)`).

Launch geometry: every THREAD_BINDING loop ("blockIdx.x", "threadIdx.y", ...) becomes
an index expression (`int32_t i = get_group_id(0);`), guarded by `if (i < extent)` when
the launch is wider than that loop. The launch size per tag is the largest extent bound
to it; the emitter records it per kernel in `Artifact.metadata["kernels"][name]` as
`{"symbol": C name, "grid": [x, y, z], "block": [x, y, z], ...}`, which
`launch_geometry(artifact, name)` and `artifact.kernel_symbol(name)` read back for the loader. A dialect with no thread model (`thread_index = {}`, plain C)
runs THREAD_BINDING loops as serial loops with a launch of one thread.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, Sequence

from ..ir.dtypes import dtype_of
from ..ir.errors import CompileError
from ..tir import nodes as tir
from ..tir.functor import ExprFunctor, StmtFunctor
from ..tir.passes.lower_thread_allreduce import lower_thread_allreduce
from ..tir.arith import non_negative
from ..tir.visit import post_order_visit
from .codegen import Artifact, Emitter, signature_of

__all__ = ["CSourceEmitter", "LaunchGeometry", "launch_geometry", "parse_thread_tag", "c_source_op_limits"]

_THREAD_TAG = re.compile(r"^(blockIdx|threadIdx)\.([xyz])$")
_C_KEYWORDS = frozenset("""
    auto break case char const continue default do double else enum extern float for goto if inline int long
    register restrict return short signed sizeof static struct switch typedef union unsigned void volatile while
    bool true false main
""".split())


@dataclass(frozen=True)
class LaunchGeometry:
    """Grid (blocks / work-groups) and block (threads / work-items) sizes of one kernel."""

    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (1, 1, 1)

    @property
    def global_size(self) -> tuple[int, int, int]:
        """Total threads per dimension (OpenCL's global work size)."""
        return tuple(g * b for g, b in zip(self.grid, self.block))

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.block)

    @property
    def ndim(self) -> int:
        """Dimensions in use (at least 1): trailing dimensions of size 1 are dropped."""
        for dim in (2, 1):
            if self.grid[dim] > 1 or self.block[dim] > 1:
                return dim + 1
        return 1

    def to_dict(self) -> dict[str, list[int]]:
        return {"grid": list(self.grid), "block": list(self.block)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LaunchGeometry":
        return cls(tuple(int(x) for x in data["grid"]), tuple(int(x) for x in data["block"]))


def launch_geometry(artifact: Artifact, kernel: str) -> LaunchGeometry:
    """The launch geometry a C-source emitter recorded for `kernel` in `artifact`.

    Called by runtime loaders before a launch; kernels without metadata run on one thread.
    """
    info = artifact.metadata.get("kernels", {}).get(kernel)
    return LaunchGeometry() if info is None else LaunchGeometry.from_dict(info)


def parse_thread_tag(tag: str) -> tuple[str, int]:
    """"threadIdx.y" -> ("threadIdx", 1); raises CompileError for other tags."""
    match = _THREAD_TAG.match(tag or "")
    if match is None:
        raise CompileError(f"unknown thread tag {tag!r}; use blockIdx.x/y/z or threadIdx.x/y/z")
    return match.group(1), "xyz".index(match.group(2))


class CSourceEmitter(Emitter):
    """tir PrimFunc -> C99 source; subclass and override the data below for a C dialect.

    Called by the core's build driver through a plugin's TargetSpec (`emit`); a plugin
    may also call `emit_source` to get only the text. The output of the base is plain
    C99 that `cc -std=c99 -shared` compiles: one `void SYMBOL(float* restrict A, ...)` per
    PrimFunc, buffers first, then scalar parameters, in PrimFunc order. SYMBOL is the
    PrimFunc's name unless that clashes with C (`main` -> `main_1`); the Artifact records
    it per kernel (`artifact.kernel_symbol(name)`), and loaders call that.

        class AcmeEmitter(CSourceEmitter):
            target_name = "acme"
            parallel_pragma = None          # no OpenMP
            math_functions = {**CSourceEmitter.math_functions, "exp": "acme_fast_exp{f}({0})"}

    Override points: class attributes (data), and methods marked "method". The
    traversal of the loop IR stays in the base, so a fix reaches every dialect.

    Identity:
      `target_name`          name in messages and the Artifact's default target
      `artifact_format`      Artifact.format ("c", "opencl-c", ...)
      `intrinsic_languages`  SourceImpl languages this dialect pastes in (("c",))
    File text:
      `preamble`             text at the top of every file (#include lines)
      `helper_prefix`        qualifiers of helper functions ("static inline")
      `extensions`           method(dtypes) -> lines enabling extensions for the dtypes used
    Types:
      `type_names`           dtype -> C type of values ("float32": "float")
      `storage_type_names`   dtype -> element type of buffers where it differs ("bool": "uint8_t")
      `int_literal_suffix`   dtype -> literal suffix ("int64": "LL")
      `vector_lanes`         lane counts with native vector types; () = none, lane-by-lane code
      `type_name`            method(dtype) -> C type; raises CompileError for a dtype it lacks
      `storage_type_name`    method(dtype) -> element type of a buffer
      `vector_type_name`     method(dtype) -> "float4" or None
      `literal`              method(value, dtype) -> C text of an immediate
      `cast`                 method(dtype, value, from_dtype) -> C text of a conversion
    Functions and parameters:
      `kernel_prefix`        before the kernel name ("void", "__kernel void", "extern \"C\" __global__ void")
      `buffer_prefix`        address-space keyword of pointer parameters ("__global ")
      `restrict`             pointer qualifier ("restrict", "__restrict__", "")
      `const_inputs`         whether buffers the kernel never writes are `const`
      `reserved_words`       the dialect's own keywords, never used as identifiers
      `kernel_header`        method(name, params) -> the line opening a kernel
      `launch_attributes`    method(geometry) -> qualifiers before the kernel name from its launch
                             geometry (CUDA's `__launch_bounds__(256)`); "" by default
    Memory:
      `scope_prefix`         memory scope -> declaration prefix ({"shared": "__local "})
      `hoisted_scopes`       scopes declared at the top of the kernel (OpenCL __local)
      `heap_scopes`          scopes allocated with malloc/free
      `max_stack_bytes`      larger arrays go to the heap; None = never
      `declare_allocation`   method(buffer, name, size) -> (lines before, lines after)
    Threads:
      `thread_index`         tag kind -> index expression ({"blockIdx": "get_group_id({dim})"},
                             {dim} the number, {axis} the letter: "blockIdx.{axis}");
                             {} runs thread-bound loops serially (plain C)
      `barriers`             scope -> barrier statement
      `warp_shuffle`         shuffle call name -> template, for cross-thread reductions by warp
                             shuffles ({} = through work-group memory); `shuffle_dtypes` they move
      `lower_thread_allreduce`  method(func, target) -> func with tir.ThreadAllReduce expanded
    Loops:
      `parallel_pragma`      before a parallel loop ("#pragma omp parallel for"; None = serial);
                             with OpenMP see sdk_docs/native_abi.md for threads
      `unroll_pragma`        before an unrolled loop
      `vectorize_pragma`     before a vectorized loop that stays a loop
      `loop_pragmas`         method(loop) -> pragma lines before a loop
      `loop_body_pragmas`    method(loop) -> pragma lines at the top of its body (HLS PIPELINE, UNROLL)
      `loop_label`           method(loop, name) -> a label for the loop ("L_i"), or None
    Per-tensor types and kernel text (HLS C++):
      `buffer_type_name`     method(buffer) -> element type of a buffer parameter (default: by dtype)
      `kernel_pragmas`       method(func, names) -> lines at the top of a kernel body (INTERFACE pragmas)
    Vectors (for lane counts in `vector_lanes`):
      `vector_literal`       "(({type})({elements}))"
      `vector_broadcast`     "(({type})({value}))"
      `vector_load`          e.g. "vload{lanes}(0, {pointer})"; None = element by element
      `vector_store`         e.g. "vstore{lanes}({value}, 0, {pointer});"
      `vector_cast`          e.g. "convert_{type}({value})"
      `vector_math`          whether math functions take vector types (OpenCL); False = lane by lane
    Memory hints:
      `prefetch_statement`   e.g. "prefetch({pointer}, {count});" for tir.PREFETCH_CALL (te's Stage.prefetch:
                             `count` elements of a buffer parameter from `pointer` are read soon); None =
                             the hint is left out
    Math:
      `math_functions`       te name -> template with {0}, {1}, ... and {f} for the float suffix
      `float_suffix`         dtype -> suffix of float math functions ("float32": "f")
      `min_max_functions`    element kind -> (min, max) templates; None = a helper function
      `math_call`            method(name, args, dtype) -> C text, or None for no math function
    Entry points (called, rarely overridden):
      `emit`                 method(funcs, target) -> Artifact
      `emit_source`          method(funcs, target) -> (source text, {kernel: metadata})
    """

    # --- identity -----------------------------------------------------------------------
    target_name = "c"
    artifact_format = "c"
    intrinsic_languages: tuple[str, ...] = ("c",)

    # --- file text ----------------------------------------------------------------------
    preamble = "#include <stdint.h>\n#include <stdbool.h>\n#include <stdlib.h>\n#include <math.h>\n"
    helper_prefix = "static inline"

    # --- types --------------------------------------------------------------------------
    type_names: dict[str, str] = {
        "bool": "bool", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
        "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
        "float32": "float", "float64": "double",
    }
    # Element type of buffers where it differs from type_names (numpy bools are bytes).
    storage_type_names: dict[str, str] = {"bool": "uint8_t"}
    int_literal_suffix: dict[str, str] = {"int64": "LL", "uint64": "ULL", "uint32": "U"}
    vector_lanes: tuple[int, ...] = ()   # lane counts with a native vector type; () = none

    prefetch_statement: str | None = None   # None: prefetch hints are left out

    # --- functions and parameters ---------------------------------------------------------
    kernel_prefix = "void"
    buffer_prefix = ""                    # address-space keyword of pointer parameters
    restrict = "restrict"
    const_inputs = True                   # `const` on buffers the kernel never writes

    # --- memory -------------------------------------------------------------------------
    scope_prefix: dict[str, str] = {"global": "", "shared": "", "local": ""}
    hoisted_scopes: tuple[str, ...] = ()  # declared at the top of the kernel (OpenCL __local)
    heap_scopes: tuple[str, ...] = ("global",)   # malloc/free instead of an array
    max_stack_bytes: int | None = 64 * 1024       # larger arrays go to the heap; None = never

    reserved_words: tuple[str, ...] = ()  # the dialect's own keywords ("kernel", "global", ...): never identifiers

    # --- threads ------------------------------------------------------------------------
    thread_index: dict[str, str] = {}     # {"blockIdx": "get_group_id({dim})", "threadIdx": ...}
    barriers: dict[str, str] = {}         # {"shared": "barrier(CLK_LOCAL_MEM_FENCE);", ...}
    # Warp shuffles for cross-thread reductions: {"tk_shfl_down": template, "tk_shfl": template} with {0}
    # the value, {1} the offset / lane, {2} the segment width (see tir.passes.lower_thread_allreduce);
    # {} reduces through work-group memory only. `shuffle_dtypes`: the dtypes the shuffles move.
    warp_shuffle: dict[str, str] = {}
    shuffle_dtypes: tuple[str, ...] = ()

    # --- loops --------------------------------------------------------------------------
    parallel_pragma: str | None = "#pragma omp parallel for"
    unroll_pragma: str | None = None
    vectorize_pragma: str | None = None

    # --- vectors (used only for lane counts in vector_lanes) ----------------------------------
    vector_literal = "(({type})({elements}))"
    vector_broadcast = "(({type})({value}))"
    vector_load: str | None = None        # e.g. "vload{lanes}(0, {pointer})"
    vector_store: str | None = None       # e.g. "vstore{lanes}({value}, 0, {pointer});"
    vector_cast: str | None = None        # e.g. "convert_{type}({value})"
    vector_math = True                    # math functions are overloaded for vector types

    # --- math: te name -> template; {f} is float_suffix of the dtype ---------------------------
    float_suffix: dict[str, str] = {"float32": "f", "float64": ""}
    math_functions: dict[str, str] = {
        **{name: name + "{f}({0})" for name in (
            "exp", "exp2", "log", "log2", "log10", "sqrt", "tanh", "erf", "floor", "ceil", "trunc",
            "sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "fabs")},
        "pow": "pow{f}({0}, {1})", "atan2": "atan2{f}({0}, {1})", "fmod": "fmod{f}({0}, {1})",
        "fma": "fma{f}({0}, {1}, {2})",
        "round": "rint{f}({0})",          # numpy rounds half to even, as rint does
        "rsqrt": "(1.0{f} / sqrt{f}({0}))",
        "sigmoid": "(1.0{f} / (1.0{f} + exp{f}(-({0}))))",
        "isnan": "isnan({0})", "isinf": "isinf({0})",
    }
    # Min/Max per element kind; None -> a helper function of the base, which propagates NaN like
    # numpy's minimum/maximum (C's fmin/fmax return the other operand instead).
    min_max_functions: dict[str, tuple[str, str] | None] = {
        "float": None, "int": None, "uint": None, "bool": None,
    }

    # --- methods a dialect may override ------------------------------------------------------

    def emit(self, funcs: Sequence[Any], target: Any = None) -> Artifact:
        """Compile `funcs` into one source file; record launch geometry per kernel."""
        funcs = list(funcs)
        source, kernels = self.emit_source(funcs, target)
        return Artifact(
            target=getattr(target, "name", None) or self.target_name, format=self.artifact_format,
            source=source, kernels=tuple(signature_of(f) for f in funcs),
            metadata={"kernels": kernels, "emitter": type(self).__name__})

    def emit_source(self, funcs: Sequence[Any], target: Any = None) -> tuple[str, dict[str, dict]]:
        """(source text, {kernel name: metadata}) for `funcs`; the text-only half of `emit`."""
        module = _ModuleState()
        texts, kernels = [], {}
        for func in funcs:
            if not isinstance(func, tir.PrimFunc):
                raise CompileError(f"{type(self).__name__} emits tir.PrimFunc, got {type(func).__name__}")
            if func.name in kernels:
                raise CompileError(f"two kernels are named {func.name!r}; kernel names must be unique")
            func = self.lower_thread_allreduce(func, target)
            writer = _KernelWriter(self, func, module, target)
            # a renamed kernel ("main" -> "main_1") must not take another kernel's name
            writer.names.used |= module.symbols | {f.name for f in funcs if f is not func}
            texts.append(writer.write())
            kernels[func.name] = writer.metadata()
        prelude = [self.preamble.rstrip("\n")] if self.preamble else []
        prelude += self.extensions(module.dtypes)
        prelude += list(module.helpers.values())
        prelude += list(module.intrinsic_code.values())
        return "\n\n".join([*(p for p in prelude if p), *texts]) + "\n", kernels

    def extensions(self, dtypes: set[str]) -> list[str]:
        """Lines enabling dialect extensions for the element dtypes the kernels use (none in C99)."""
        return []

    def lower_thread_allreduce(self, func: tir.PrimFunc, target: Any = None) -> tir.PrimFunc:
        """`func` with its cross-thread reductions (tir.ThreadAllReduce) expanded into loop IR this
        dialect prints: a tree in work-group memory with barriers, or warp shuffles where the dialect
        names them (`warp_shuffle`) and the target declares a warp size (capabilities.warp_size)."""
        warp = 0
        if self.warp_shuffle:
            warp = getattr(getattr(target, "capabilities", None), "warp_size", 0) or 0
        return lower_thread_allreduce(func, warp_size=warp, shuffle_dtypes=self.shuffle_dtypes)

    def type_name(self, dtype: str) -> str:
        """C type of a scalar or vector dtype; raises CompileError when the dialect lacks it."""
        parsed = dtype_of(dtype)
        if parsed.lanes > 1:
            name = self.vector_type_name(dtype)
            if name is None:
                raise CompileError(f"{self.target_name}: no vector type for {dtype}")
            return name
        name = self.type_names.get(parsed.element)
        if name is None:
            raise CompileError(f"{self.target_name} cannot emit dtype {dtype!r}; supported: "
                               f"{', '.join(sorted(self.type_names))}")
        return name

    def storage_type_name(self, dtype: str) -> str:
        """Element type of a buffer of `dtype` (how it is laid out in memory)."""
        return self.storage_type_names.get(dtype) or self.type_name(dtype)

    def vector_type_name(self, dtype: str) -> str | None:
        """"float32x4" -> "float4" where the dialect has the type, else None (lane-by-lane code)."""
        parsed = dtype_of(dtype)
        if parsed.lanes not in self.vector_lanes or parsed.is_bool:
            return None
        scalar = self.type_names.get(parsed.element)
        return None if scalar is None else f"{scalar}{parsed.lanes}"

    def literal(self, value: int | float, dtype: str) -> str:
        """C text of a scalar immediate of `dtype`."""
        parsed = dtype_of(dtype)
        if parsed.is_bool:
            return "true" if value else "false"
        if parsed.is_float:
            value = float(value)
            if math.isnan(value):
                return "NAN"
            if math.isinf(value):
                return "INFINITY" if value > 0 else "(-INFINITY)"
            text = repr(value)
            if "e" not in text and "." not in text:
                text += ".0"
            if dtype == "float32":
                return f"{text}f"
            return text if dtype == "float64" else f"(({self.type_name(dtype)}){text}f)"
        value = int(value)
        if dtype == "int32":
            return str(value) if value > -2**31 else "(-2147483647 - 1)"
        suffix = self.int_literal_suffix.get(dtype, "")
        if dtype in ("int64",) and value == -2**63:
            return f"(({self.type_name(dtype)})(-9223372036854775807{suffix} - 1))"
        return f"(({self.type_name(dtype)}){value}{suffix})"

    def cast(self, dtype: str, value: str, from_dtype: str) -> str:
        """C text converting `value` (of from_dtype) to `dtype`; vectors use `vector_cast`."""
        if dtype_of(dtype).lanes > 1:
            return self.vector_cast.format(type=self.type_name(dtype), value=value)
        if dtype == "bool":
            return f"({value} != 0)"
        return f"(({self.type_name(dtype)}){value})"

    def math_call(self, name: str, args: Sequence[str], dtype: str) -> str | None:
        """C text of te math function `name` on `args`, or None when `name` is no math function."""
        template = self.math_functions.get(name) or self.warp_shuffle.get(name)
        if template is None:
            return None
        element = dtype_of(dtype).element
        if dtype_of(dtype).is_int and name == "fabs":
            return f"(({args[0]}) < 0 ? -({args[0]}) : ({args[0]}))"
        suffix = self.float_suffix.get(element, "")
        return template.format(*args, f=suffix)

    def kernel_header(self, name: str, params: Sequence[str]) -> str:
        """The line opening a kernel definition, without the `{`."""
        return f"{self.kernel_prefix} {name}({', '.join(params) or 'void'})"

    def launch_attributes(self, geometry: LaunchGeometry) -> str:
        """Qualifiers written between `kernel_prefix` and the kernel name, from the kernel's launch
        geometry (CUDA: `__launch_bounds__(threads)`); none in C."""
        return ""

    def declare_allocation(self, buffer: Any, name: str, size: int) -> tuple[list[str], list[str]]:
        """Lines declaring an Allocate of `buffer` (`size` elements, C identifier `name`) and
        lines releasing it after its body. Heap scopes and arrays past `max_stack_bytes` use malloc."""
        type_name = self.storage_type_name(buffer.dtype)
        too_big = self.max_stack_bytes is not None and size * dtype_of(buffer.dtype).bytes > self.max_stack_bytes
        if buffer.scope in self.heap_scopes or (too_big and buffer.scope not in self.hoisted_scopes):
            return ([f"{type_name}* {name} = ({type_name}*)malloc(sizeof({type_name}) * {size});"],
                    [f"free({name});"])
        return [f"{self.scope_prefix.get(buffer.scope, '')}{type_name} {name}[{size}];"], []

    def loop_body_pragmas(self, loop: tir.For) -> list[str]:
        """Pragma lines at the top of a loop's body, where HLS tools read PIPELINE and UNROLL."""
        return []

    def loop_label(self, loop: tir.For, name: str) -> str | None:
        """A label for the loop whose variable is called `name` in C, so reports and pragmas can
        refer to it; None writes none. Variable names are unique per kernel, so labels made from them are."""
        return None

    def buffer_type_name(self, buffer: Any) -> str:
        """Element type of a buffer parameter; a dialect with per-tensor types (HLS ap_fixed) overrides it."""
        return self.storage_type_name(buffer.dtype)

    def kernel_pragmas(self, func: tir.PrimFunc, names: dict[str, str]) -> list[str]:
        """Lines at the top of the kernel body of `func` (HLS INTERFACE pragmas); `names` maps each
        parameter's name to its C name."""
        return []

    def loop_pragmas(self, loop: tir.For) -> list[str]:
        """Pragma lines emitted before a loop (OpenMP, `#pragma unroll`)."""
        pragma = {tir.ForKind.PARALLEL: self.parallel_pragma, tir.ForKind.UNROLLED: self.unroll_pragma,
                  tir.ForKind.VECTORIZED: self.vectorize_pragma}.get(loop.kind)
        return [pragma] if pragma else []


class _ModuleState:
    """What the kernels of one source file share: helper functions, intrinsic code, dtypes."""

    def __init__(self) -> None:
        self.helpers: dict[str, str] = {}
        self.intrinsic_code: dict[str, str] = {}
        self.dtypes: set[str] = set()
        self.symbols: set[str] = set()   # C symbols of the kernels written so far


class _Names:
    """Unique C identifiers for Vars and Buffers (which are identified by object identity)."""

    def __init__(self, reserved: set[str]) -> None:
        self.used = set(reserved)
        self.by_id: dict[int, str] = {}

    def bind(self, obj: object, hint: str) -> str:
        base = re.sub(r"\W", "_", hint) or "v"
        if base[0].isdigit():
            base = f"v_{base}"
        name, counter = base, 0
        while name in self.used or name.startswith("tk_"):
            counter += 1
            name = f"{base}_{counter}"
        self.used.add(name)
        self.by_id[id(obj)] = name
        return name

    def get(self, obj: object) -> str | None:
        return self.by_id.get(id(obj))


def _const_int(e: tir.PrimExpr) -> int | None:
    if isinstance(e, tir.IntImm):
        return e.value
    if isinstance(e, tir.Broadcast):
        return _const_int(e.value)
    return None


class _KernelWriter(StmtFunctor, ExprFunctor):
    """Writes one PrimFunc as C text through the dialect's data and methods.

    `visit_<Stmt>(s)` appends lines; `visit_<Expr>(e, lane)` returns C text, evaluated at
    `lane` (a C expression) for a vector `e`, whole otherwise. Read expressions through
    `expr`, which checks that a vector has a vector form before dispatching.
    """

    def __init__(self, dialect: CSourceEmitter, func: tir.PrimFunc, module: _ModuleState, target: Any) -> None:
        self.d, self.func, self.module, self.target = dialect, func, module, target
        reserved = set(_C_KEYWORDS) | set(dialect.math_functions) | set(dialect.type_names.values())
        reserved |= {"min", "max", "fmin", "fmax", "abs", "select", "barrier", "malloc", "free", "INFINITY", "NAN"}
        reserved |= set(dialect.reserved_words)
        self.names = _Names(reserved)
        self.lines: list[str] = []
        self.depth = 1
        self.buffers: dict[int, tir.Buffer] = {}
        self.nonneg: set[int] = set()
        self.array_vars: set[int] = set()    # vector lets held as arrays (lane by lane)
        self.hoisted: set[int] = set()
        self.serial_threads = 0              # depth inside thread loops run serially
        self.launch: dict[tuple[str, int], int] = {}
        self.written = self._written_buffers()
        self.shared_bytes = 0

    # --- kernel ---------------------------------------------------------------------------

    def write(self) -> str:
        func = self.func
        self.symbol = self.names.bind(func, func.name)
        self.module.symbols.add(self.symbol)
        self._collect_launch(func.body)
        params = []
        for p in func.params:
            if isinstance(p, tir.Buffer):
                name = self.names.bind(p, p.name)
                self.buffers[id(p)] = p
                self.module.dtypes.add(dtype_of(p.dtype).element)
                const = "const " if self.d.const_inputs and p.name not in self.written else ""
                restrict = f"{self.d.restrict} " if self.d.restrict else ""
                params.append(f"{const}{self.d.buffer_prefix}{self.d.buffer_type_name(p)}* {restrict}{name}")
            else:
                name = self.names.bind(p, p.name)
                self.module.dtypes.add(dtype_of(p.dtype).element)
                params.append(f"{self.d.type_name(p.dtype)} {name}")
        self._hoist_allocations(func.body)
        param_names = {p.name: self.names.get(p) for p in func.params}
        self.lines.extend("    " + text for text in self.d.kernel_pragmas(func, param_names))
        self.visit_stmt(func.body)
        body = self.lines
        self.lines = []
        attributes = self.d.launch_attributes(self.geometry())
        name = f"{attributes} {self.symbol}" if attributes else self.symbol
        return "\n".join([self.d.kernel_header(name, params) + " {", *self.hoisted_lines, *body, "}"])

    def geometry(self) -> LaunchGeometry:
        grid, block = [1, 1, 1], [1, 1, 1]
        for (kind, dim), extent in self.launch.items():
            (grid if kind == "blockIdx" else block)[dim] = extent
        return LaunchGeometry(tuple(grid), tuple(block))

    def metadata(self) -> dict[str, Any]:
        return {"symbol": self.symbol, **self.geometry().to_dict(),
                "written": sorted(self.written), "shared_bytes": self.shared_bytes}

    def _written_buffers(self) -> set[str]:
        from .arg_checks import written_buffers   # stores, and pointers passed to intrinsics (not prefetches)
        return set(written_buffers(self.func))

    def _collect_launch(self, body: tir.Stmt) -> None:
        def visit(node):
            if isinstance(node, tir.For) and node.kind is tir.ForKind.THREAD_BINDING:
                kind, dim = parse_thread_tag(node.thread_tag)
                if kind not in self.d.thread_index:
                    return
                if not isinstance(node.extent, tir.IntImm):
                    raise CompileError(f"kernel {self.func.name}: loop {node.loop_var.name} bound to "
                                       f"{node.thread_tag} has a non-constant extent {node.extent}")
                self.launch[(kind, dim)] = max(self.launch.get((kind, dim), 1), node.extent.value)
        post_order_visit(body, visit)

    def _hoist_allocations(self, body: tir.Stmt) -> None:
        self.hoisted_lines: list[str] = []

        def visit(node):
            if isinstance(node, tir.Allocate) and node.buffer.scope in self.d.hoisted_scopes:
                before, _ = self._allocation_lines(node.buffer)
                self.hoisted_lines.extend("    " + line for line in before)
                self.hoisted.add(id(node))
        post_order_visit(body, visit)

    def _allocation_lines(self, buffer: tir.Buffer) -> tuple[list[str], list[str]]:
        size = 1
        for dim in buffer.shape:
            if not isinstance(dim, tir.IntImm):
                raise CompileError(f"kernel {self.func.name}: allocation {buffer.name} has a non-constant "
                                   f"dimension {dim}; bound it with a constant split factor")
            size *= dim.value
        name = self.names.bind(buffer, buffer.name)
        self.buffers[id(buffer)] = buffer
        self.module.dtypes.add(dtype_of(buffer.dtype).element)
        if buffer.scope == "shared":
            self.shared_bytes += size * dtype_of(buffer.dtype).bytes
        return self.d.declare_allocation(buffer, name, max(size, 1))

    # --- statements -----------------------------------------------------------------------

    def line(self, text: str) -> None:
        self.lines.append("    " * self.depth + text)

    def block(self, stmt: tir.Stmt) -> None:
        self.depth += 1
        self.visit_stmt(stmt)
        self.depth -= 1

    def visit_default(self, node, *args) -> None:
        if isinstance(node, tir.Stmt):
            raise CompileError(f"{self.d.target_name}: cannot emit statement {type(node).__name__}:\n{node}")
        raise CompileError(f"{self.d.target_name}: cannot emit expression {type(node).__name__}: {node}")

    def visit_SeqStmt(self, s: tir.SeqStmt) -> None:
        for child in s.stmts:
            self.visit_stmt(child)

    def visit_Evaluate(self, s: tir.Evaluate) -> None:
        if isinstance(s.value, tir.Call) and s.value.name == tir.PREFETCH_CALL:
            # kernel parameters only: an intermediate may live in private memory, which has no prefetch
            if self.d.prefetch_statement is not None and any(p.name == s.value.args[0].buffer.name
                                                            for p in self.func.params):
                pointer, count = (_strip(self.expr(arg)) for arg in s.value.args)
                self.line(self.d.prefetch_statement.format(pointer=pointer, count=count))
        elif not isinstance(s.value, (tir.IntImm, tir.FloatImm)):
            self.line(f"{self.expr(s.value)};")

    def visit_IfThenElse(self, s: tir.IfThenElse) -> None:
        self.line(f"if ({_strip(self.expr(s.condition))}) {{")
        self.block(s.then_case)
        if s.else_case is not None:
            self.line("} else {")
            self.block(s.else_case)
        self.line("}")

    def visit_LetStmt(self, s: tir.LetStmt) -> None:
        name = self.names.bind(s.var, s.var.name)
        if self._is_nonneg(s.value):
            self.nonneg.add(id(s.var))
        if s.value.lanes == 1:
            self.line(f"{self.d.type_name(s.value.dtype)} {name} = {_strip(self.expr(s.value))};")
        else:   # held as an array so both vector and lane-by-lane code can read it
            self.array_vars.add(id(s.var))
            element = dtype_of(s.value.dtype).element
            self.line(f"{self.d.type_name(element)} {name}[{s.value.lanes}];")
            self._lane_loop(s.value.lanes, lambda lane: f"{name}[{lane}] = {_strip(self.expr(s.value, lane))};")
        self.visit_stmt(s.body)

    def visit_Barrier(self, s: tir.Barrier) -> None:
        text = self.d.barriers.get(s.scope)
        if text is not None and self.serial_threads == 0:
            self.line(text)
        elif self.serial_threads:
            raise CompileError(f"kernel {self.func.name}: barrier({s.scope}) inside thread-bound loops, but "
                               f"{self.d.target_name} runs thread-bound loops serially and has no barrier; "
                               "use a target with threads or a schedule without shared-memory stages")
        # outside any thread loop a serial program needs no barrier

    def visit_Allocate(self, s: tir.Allocate) -> None:
        if id(s) in self.hoisted:
            self.visit_stmt(s.body)
            return
        if s.buffer.scope == "global" and self.d.thread_index:
            self._check_private_global(s)
        before, after = self._allocation_lines(s.buffer)
        self.line("{")
        self.depth += 1
        for text in before:
            self.line(text)
        self.visit_stmt(s.body)
        for text in after:
            self.line(text)
        self.depth -= 1
        self.line("}")

    def _check_private_global(self, s: tir.Allocate) -> None:
        """A global intermediate inside one kernel is private to each thread: refuse it when threads share it."""
        def visit(node):
            if isinstance(node, tir.For) and node.kind is tir.ForKind.THREAD_BINDING:
                stores = []
                post_order_visit(node.body, lambda x: stores.append(x) if isinstance(x, tir.Store)
                                 and x.buffer.name == s.buffer.name else None)
                if stores:
                    raise CompileError(
                        f"kernel {self.func.name}: intermediate {s.buffer.name} (scope global) is written by "
                        f"loop {node.loop_var.name} bound to {node.thread_tag}, so threads would need to share "
                        "it; compute it at (compute_at) the consumer's thread loops, inline it, or cache it in "
                        "'shared' scope with a barrier")
        post_order_visit(s.body, visit)

    def visit_For(self, s: tir.For) -> None:
        loop_type = self.d.type_name(s.loop_var.dtype)
        if s.kind is tir.ForKind.THREAD_BINDING:
            kind, dim = parse_thread_tag(s.thread_tag)
            if kind in self.d.thread_index:
                self._thread_loop(s, kind, dim, loop_type)
                return
            self.serial_threads += 1
        name = self.names.bind(s.loop_var, s.loop_var.name)
        if self._is_nonneg(s.min):
            self.nonneg.add(id(s.loop_var))
        start = _strip(self.expr(s.min))
        end = self.expr(s.extent) if _const_int(s.min) == 0 else f"{self.expr(s.min)} + {self.expr(s.extent)}"
        for pragma in self.d.loop_pragmas(s):
            self.line(pragma)
        label = self.d.loop_label(s, name)
        self.line(f"{label + ': ' if label else ''}for ({loop_type} {name} = {start}; {name} < {_strip(end)}; "
                  f"++{name}) {{")
        self.depth += 1
        for pragma in self.d.loop_body_pragmas(s):
            self.line(pragma)
        self.depth -= 1
        self.block(s.body)
        self.line("}")
        if s.kind is tir.ForKind.THREAD_BINDING:
            self.serial_threads -= 1

    def _thread_loop(self, s: tir.For, kind: str, dim: int, loop_type: str) -> None:
        index = self.d.thread_index[kind].format(dim=dim, axis="xyz"[dim])
        name = self.names.bind(s.loop_var, s.loop_var.name)
        if self._is_nonneg(s.min):
            self.nonneg.add(id(s.loop_var))
        offset = "" if _const_int(s.min) == 0 else f" + {self.expr(s.min)}"
        self.line("{")
        self.depth += 1
        self.line(f"{loop_type} {name} = ({loop_type}){index}{offset};")
        guarded = s.extent.value < self.launch[(kind, dim)]
        if guarded:
            self._refuse_barrier_under_guard(s)
            self.line(f"if (({loop_type}){index} < {self.expr(s.extent)}) {{")
            self.block(s.body)
            self.line("}")
        else:
            self.visit_stmt(s.body)
        self.depth -= 1
        self.line("}")

    def _refuse_barrier_under_guard(self, s: tir.For) -> None:
        found = []
        post_order_visit(s.body, lambda x: found.append(x) if isinstance(x, tir.Barrier) else None)
        if found:
            raise CompileError(
                f"kernel {self.func.name}: loop {s.loop_var.name} bound to {s.thread_tag} has extent {s.extent} "
                f"but the launch has {self.launch[parse_thread_tag(s.thread_tag)]} threads there, and its body "
                "holds a barrier that the idle threads would skip; bind loops of equal extent to that axis")

    def visit_Store(self, s: tir.Store) -> None:
        buffer = self.buffer_name(s.buffer)
        lanes = s.value.lanes
        if lanes == 1:
            text = f"{buffer}[{_strip(self.expr(s.index))}] = {_strip(self.expr(s.value))};"
            self.line(text if s.predicate is None else f"if ({_strip(self.expr(s.predicate))}) {text}")
            return
        stride = _const_int(s.index.stride) if isinstance(s.index, tir.Ramp) else None
        if (self.d.vector_store and stride == 1 and s.predicate is None and self._is_vector(s.value)):
            pointer = f"{buffer} + {self.expr(s.index.base)}"
            self.line(self.d.vector_store.format(value=_strip(self.expr(s.value)), pointer=pointer, lanes=lanes))
            return

        def lane_store(lane: str) -> str:
            text = f"{buffer}[{_strip(self.expr(s.index, lane))}] = {_strip(self.expr(s.value, lane))};"
            return text if s.predicate is None else f"if ({_strip(self.expr(s.predicate, lane))}) {text}"
        self._lane_loop(lanes, lane_store)

    def _lane_loop(self, lanes: int, body) -> None:
        lane = self.names.bind(object(), "lane")
        self.line(f"for (int {lane} = 0; {lane} < {lanes}; ++{lane}) {{")
        self.depth += 1
        self.line(body(lane))
        self.depth -= 1
        self.line("}")

    # --- expressions ------------------------------------------------------------------------

    def buffer_name(self, buffer: tir.Buffer) -> str:
        name = self.names.get(buffer)
        if name is not None:
            return name
        # Passes may rebuild a Buffer (e.g. flattened); fall back to a unique name match.
        same = [b for b in self.buffers.values() if b.name == buffer.name]
        if len(same) == 1:
            return self.names.get(same[0])
        raise CompileError(f"kernel {self.func.name} uses buffer {buffer.name}, which is neither a parameter "
                           "nor allocated in the kernel")

    def var_name(self, var: tir.Var) -> str:
        name = self.names.get(var)
        if name is None:
            raise CompileError(f"kernel {self.func.name} uses variable {var.name} before it is defined "
                               "(not a parameter, loop variable or let)")
        return name

    def expr(self, e: tir.PrimExpr, lane: str | None = None) -> str:
        """C text of `e`; with `lane`, a vector `e` is evaluated at that lane (a C expression)."""
        lanes = _lanes(e)
        if lanes == 1:
            lane = None
        if lanes > 1 and lane is None and not self._is_vector(e):
            raise CompileError(f"{self.d.target_name}: vector expression {e} has no vector form here")
        if e.dtype not in _NO_VALUE:
            self.module.dtypes.add(dtype_of(e.dtype).element)
        return self.visit_expr(e, lane)

    def visit_IntImm(self, e, lane):
        return self.d.literal(e.value, e.dtype)

    def visit_FloatImm(self, e, lane):
        return self.d.literal(e.value, e.dtype)

    def visit_StringImm(self, e, lane):
        return '"' + e.value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    def visit_Var(self, e, lane):
        name = self.var_name(e)
        return f"{name}[{lane}]" if id(e) in self.array_vars else name

    def visit_BinaryOp(self, e, lane):
        a, b = self.expr(e.a, lane), self.expr(e.b, lane)
        element = dtype_of(e.dtype)
        if isinstance(e, (tir.Min, tir.Max)):
            return self._min_max(e, a, b)
        if isinstance(e, tir.BITWISE_OPS):
            return self._bit_op(e, a, b)
        if isinstance(e, (tir.FloorDiv, tir.FloorMod)):
            is_div = isinstance(e, tir.FloorDiv)
            if element.is_float:
                floor = self.d.math_call("floor", [f"{a} / {b}"], e.dtype)
                return floor if is_div else f"({a} - {floor} * {b})"
            if not element.is_signed or (self._is_nonneg(e.a) and (_const_int(e.b) or 0) > 0):
                return f"({a} {'/' if is_div else '%'} {b})"
            return f"{self._helper('floordiv' if is_div else 'floormod', e.dtype)}({_strip(a)}, {_strip(b)})"
        return f"({a} {e.symbol} {b})"

    def _bit_op(self, e, a, b):
        """C promotes char and short operands to int: the result is cast back to the dtype. A signed
        value shifts left through its unsigned type (shifting a negative value left is undefined in C)."""
        element = dtype_of(e.dtype)
        t = self.d.type_name(element.element)
        if isinstance(e, tir.ShiftLeft) and element.is_signed:
            a = f"({self.d.type_name(f'uint{element.bits}')}){a}"
        return f"(({t})({a} {e.symbol} {b}))"

    def visit_CompareOp(self, e, lane):
        return f"({self.expr(e.a, lane)} {e.symbol} {self.expr(e.b, lane)})"

    def _min_max(self, e, a, b):
        kind = dtype_of(e.dtype).kind
        pair = self.d.min_max_functions.get(kind)
        is_min = isinstance(e, tir.Min)
        if pair is None:
            return f"{self._helper('min' if is_min else 'max', e.dtype)}({_strip(a)}, {_strip(b)})"
        suffix = self.d.float_suffix.get(dtype_of(e.dtype).element, "")
        if kind in ("int", "uint") and dtype_of(e.dtype).bits < 32 and e.lanes == 1:
            # C promotes char/short operands to int, and an overloaded min(uchar, int) is ambiguous
            t = self.d.type_name(e.dtype)
            a, b = f"(({t}){a})", f"(({t}){b})"
        return f"{pair[0 if is_min else 1].format(f=suffix)}({_strip(a)}, {_strip(b)})"

    def visit_Not(self, e, lane):
        return f"(!{self.expr(e.a, lane)})"

    def visit_Select(self, e, lane):
        return f"({self.expr(e.condition, lane)} ? {self.expr(e.true_value, lane)} : {self.expr(e.false_value, lane)})"

    def visit_Cast(self, e, lane):
        dtype = e.dtype if lane is None else dtype_of(e.dtype).element
        return self.d.cast(dtype, self.expr(e.value, lane), e.value.dtype)

    def visit_Reinterpret(self, e, lane):
        """Through a union: C has no bit cast of values, and a pointer cast breaks strict aliasing."""
        source, target = dtype_of(e.value.dtype).element, dtype_of(e.dtype).element
        name = f"tk_reinterpret_{source}_{target}"
        if name not in self.module.helpers:
            s, t = self.d.type_name(source), self.d.type_name(target)
            self.module.helpers[name] = (f"{self.d.helper_prefix} {t} {name}({s} v) "
                                         f"{{ union {{ {s} a; {t} b; }} u; u.a = v; return u.b; }}")
        return f"{name}({_strip(self.expr(e.value, lane))})"

    def visit_Ramp(self, e, lane):
        if lane is None:
            elements = ", ".join(self._ramp_lane(e, str(i)) for i in range(e.lanes_count))
            return self.d.vector_literal.format(type=self.d.type_name(e.dtype), elements=elements)
        return self._ramp_lane(e, lane)

    def _ramp_lane(self, e: tir.Ramp, lane: str) -> str:
        if lane == "0":
            return self.expr(e.base)
        stride = self.expr(e.stride)
        offset = lane if _const_int(e.stride) == 1 else f"{stride} * {lane}"
        return f"({self.expr(e.base)} + {offset})"

    def visit_Broadcast(self, e, lane):
        if lane is None:
            return self.d.vector_broadcast.format(type=self.d.type_name(e.dtype), value=_strip(self.expr(e.value)))
        return self.expr(e.value)

    def visit_Load(self, e, lane):
        buffer = self.buffer_name(e.buffer)
        if lane is None and e.lanes > 1:
            stride = _const_int(e.index.stride) if isinstance(e.index, tir.Ramp) else None
            if stride == 1 and self.d.vector_load and e.predicate is None:
                return self.d.vector_load.format(pointer=f"{buffer} + {self.expr(e.index.base)}", lanes=e.lanes)
            elements = ", ".join(self.visit_Load(e, str(i)) for i in range(e.lanes))
            return self.d.vector_literal.format(type=self.d.type_name(e.dtype), elements=elements)
        text = f"{buffer}[{_strip(self.expr(e.index, lane))}]"
        if e.predicate is None:
            return text
        zero = self.d.literal(0, dtype_of(e.dtype).element)
        return f"({self.expr(e.predicate, lane)} ? {text} : {zero})"

    def visit_BufferPointer(self, e, lane):
        return f"({self.buffer_name(e.buffer)} + {self.expr(e.index)})"

    def visit_Call(self, e, lane):
        args = [_strip(self.expr(a, lane)) for a in e.args]
        dtype = e.args[0].dtype if e.args else e.dtype
        if lane is not None:
            dtype = dtype_of(dtype).element
        text = self.d.math_call(e.name, args, dtype)
        if text is not None:
            return text
        return f"{self._intrinsic_symbol(e.name)}({', '.join(args)})"

    def _intrinsic_symbol(self, name: str) -> str:
        intrinsics = self.func.tensor_intrinsics()
        intrin = intrinsics.get(name)
        if intrin is None:
            raise CompileError(f"kernel {self.func.name} calls {name!r}, which is neither a math function of "
                               f"{self.d.target_name} nor an intrinsic in func.tensor_intrinsics() "
                               f"(it has: {', '.join(sorted(intrinsics)) or 'none'}); tensorize onto a "
                               "te.decl_tensor_intrin, or list the intrinsic under the PrimFunc attribute "
                               f"{tir.TENSOR_INTRINSICS_ATTR!r}")
        implementations = getattr(intrin, "implementations", {}) or {}
        target_names = [getattr(self.target, "name", None), self.d.target_name]
        target_names += list(getattr(getattr(self.target, "manifest", None), "plugin", None) and
                             self.target.manifest.plugin.aliases or ())
        for key in target_names:
            impl = implementations.get(key) if key else None
            if impl is not None and getattr(impl, "language", None) in self.d.intrinsic_languages:
                symbol = getattr(impl, "symbol", None) or name
                self.module.intrinsic_code.setdefault(symbol, getattr(impl, "code", "") or "")
                return symbol
        raise CompileError(f"intrinsic {name!r} has no implementation in {'/'.join(self.d.intrinsic_languages)} "
                           f"for target {self.d.target_name}; it has implementations for: "
                           f"{', '.join(sorted(implementations)) or 'none'}")

    # --- analyses ---------------------------------------------------------------------------

    def _is_vector(self, e: tir.PrimExpr) -> bool:
        """Whether `e` can be written with the dialect's vector types (else: lane by lane)."""
        if _lanes(e) == 1:
            return True
        if self.d.vector_type_name(e.dtype) is None:
            return False
        if isinstance(e, (tir.Ramp, tir.Broadcast)):
            return True
        if isinstance(e, tir.Load):
            return e.predicate is None
        if isinstance(e, (tir.Add, tir.Sub, tir.Mul, tir.Div, tir.Min, tir.Max)):
            return self._is_vector(e.a) and self._is_vector(e.b)
        if isinstance(e, (tir.FloorDiv, tir.FloorMod)):
            return (dtype_of(e.dtype).is_int and self._is_nonneg(e.a) and (_const_int(e.b) or 0) > 0
                    and self._is_vector(e.a) and self._is_vector(e.b))
        if isinstance(e, tir.Cast):
            return self.d.vector_cast is not None and self._is_vector(e.value) \
                and self.d.vector_type_name(e.value.dtype) is not None
        if isinstance(e, tir.Call):
            return self.d.vector_math and e.name in self.d.math_functions and e.name not in ("isnan", "isinf") \
                and all(self._is_vector(a) for a in e.args)
        return False

    def _is_nonneg(self, e: tir.PrimExpr) -> bool:
        """Conservative proof that an integer expression is >= 0 (lets / and % replace floor ops)."""
        return non_negative(e, self.nonneg)

    def _helper(self, op: str, dtype: str) -> str:
        """Name of a helper function (floordiv, floormod, min, max) for `dtype`, defined once per file."""
        element = dtype_of(dtype).element
        name = f"tk_{op}_{element}"
        if name not in self.module.helpers:
            t = self.d.type_name(element)
            prefix = self.d.helper_prefix
            body = {
                "floordiv": f"{t} q = a / b; {t} r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? q - 1 : q;",
                "floormod": f"{t} r = a % b; return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;",
                # floats: a != a holds only for NaN, so a NaN on either side is the result (numpy's rule)
                "min": "return (a < b || a != a) ? a : b;" if dtype_of(element).is_float else "return a < b ? a : b;",
                "max": "return (a > b || a != a) ? a : b;" if dtype_of(element).is_float else "return a > b ? a : b;",
            }[op]
            self.module.helpers[name] = f"{prefix} {t} {name}({t} a, {t} b) {{ {body} }}"
        return name


_NO_VALUE = ("void", "handle")


def _lanes(e: tir.PrimExpr) -> int:
    """Lanes of `e`; intrinsic calls of dtype "void" and pointers count as scalars."""
    return 1 if e.dtype in _NO_VALUE else e.lanes


def _strip(text: str) -> str:
    """Drop one pair of outer parentheses when they enclose the whole text."""
    if len(text) < 2 or text[0] != "(" or text[-1] != ")":
        return text
    depth = 0
    for i, char in enumerate(text):
        depth += char == "("
        depth -= char == ")"
        if depth == 0 and i < len(text) - 1:
            return text
    return text[1:-1]


def _grid_sample_elsewhere(call):
    # the emitter prints expressions as trees (no shared subexpressions): the 16 cubic taps, and the
    # reflection of every tap's coordinates (nested folds; 100 s for one nearest-mode kernel), grow
    # past what it prints in reasonable time
    if call.attrs.mode == "cubic":
        return ("cubic grid_sample: the C-source emitter prints expressions as trees (no shared subexpressions), "
                "and the 16 cubic taps grow past what it prints in reasonable time; the CPU runs it")
    if call.attrs.padding_mode == "reflection":
        return ("grid_sample with reflection padding: the C-source emitter prints expressions as trees (no shared "
                "subexpressions), and the reflected tap coordinates grow past what it prints in reasonable time; "
                "the CPU runs it")
    return True


def c_source_op_limits() -> dict:
    """Ops a C-source dialect should send elsewhere, as `tensorkiln_supported_ops` predicates (op -> call ->
    True or a reason): what this emitter cannot print in reasonable time. A plugin merges them into its own."""
    return {"image.grid_sample": _grid_sample_elsewhere}
