"""emitter.py: The cpu_llvm emitter: tir PrimFuncs -> one optimized LLVM module -> Artifact.

Pipeline (`LLVMEmitter.emit`):

1. build the llvmlite module: per kernel `NAME.impl` (the body) and the packed,
   argument-checking entry `NAME` (see abi.py), the `tensorkiln_num_threads`
   global and the `tensorkiln_metadata` string;
2. parse it with LLVM and link in the LLVM source of every intrinsic it calls;
3. optimize with the new pass manager (O3: loop and SLP vectorization on); LLVM's
   optimisation remarks are printed on stderr only when TENSORKILN_LLVM_REMARKS names
   the passes to report (e.g. "loop-vectorize");
4. emit a position-independent object (assembly text only on request).

A module of many kernels is optimised and compiled to object code in chunks by worker
processes (parallel_compile.py), the kernels that need O3 first (those the schedule vectorized
explicitly without LLVM's vectorizers, `explicitly_vectorized`) and the copy and elementwise
kernels last, in chunks of their own with a light pipeline (`needs_full_pipeline`,
llvm_passes.optimize); their bitcode is linked back into one module (the
artifact's optimized IR) and their objects merged into one (`ld -r`; without a linker the
parent emits the object of the linked module). The object computes what a serial compile
makes. TENSORKILN_COMPILE_JOBS=1 keeps it in one process.

Steps 1-4 are skipped when kernel_cache.py holds the module (same kernels, target,
versions): a compile of the same model again, in this process or another, loads the
cached optimized IR and object.

Artifact: format "llvm-ir", `source` = the *optimized* LLVM IR, `sources["llvm-unoptimized"]`
= the IR before optimization, `binary` = object code; assembly is rendered on request
(`f.get_source("asm")`, runtime.JITModule.render_source).
"""
from __future__ import annotations

import functools
import itertools
import os
from dataclasses import dataclass
from typing import Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln import tir
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import Artifact, Emitter, signature_of
from tensorkiln.sdk.arg_checks import WRITTEN_METADATA_KEY
from tensorkiln.sdk.intrinsic_impl import ExternImpl, SourceImpl, implementation_for
from tensorkiln.sdk.native import METADATA_FORMAT_VERSION, METADATA_SYMBOL, NUM_THREADS_SYMBOL, metadata_json

from .abi import emit_packed_function, impl_function
from .cgutils import I32, I64, declare, value_type
from .gc_pause import collector_paused
from .host import MachineConfig, machine_config, target_machine
from .kernel_cache import cache_key, kernel_cache
from .llvm_passes import REMARKS_ENV, link_intrinsic_sources, optimize
from .lowp import add_bfloat_runtime
from .parallel_compile import ChunkJob, chunk_sizes, compile_jobs, merge_objects, object_linker, optimize_chunks
from .stmts import FunctionCodegen

__all__ = ["LLVMEmitter", "IntrinsicLinker", "optimize", "needs_full_pipeline", "explicitly_vectorized"]


class IntrinsicLinker:
    """Resolves intrinsic calls of the kernels being emitted to functions of the target.

    Lookup: the kernel's `func.tensor_intrinsics()` (name -> TensorIntrin, recorded by
    tensorize lowering under `tir.TENSOR_INTRINSICS_ATTR`), then every intrinsic
    registered for the target. Calls follow the convention of
    `tensorkiln.sdk.intrinsic_impl`: pointers, int64 strides and extents, and a final
    int32 accumulate flag.
    """

    def __init__(self, module: ir.Module, target, funcs: Sequence[tir.PrimFunc]) -> None:
        self.module = module
        self.target = target
        self.known: dict[str, object] = {}
        for func in funcs:
            self.known.update(func.tensor_intrinsics())
        self.sources: dict[str, str] = {}
        self.libraries: list[str] = []
        self._registered: dict[str, object] | None = None

    def _find(self, name: str):
        if name in self.known:
            return self.known[name]
        if self._registered is None:
            import tensorkiln
            self._registered = {i.name: i for i in tensorkiln.intrinsics(self.target)}
        if name in self._registered:
            return self._registered[name]
        known = ", ".join(sorted({*self.known, *self._registered})) or "none"
        raise CompileError(f"cpu_llvm: call to unknown function or intrinsic {name!r}; math functions are "
                           f"exp, log, sqrt, ...; intrinsics registered for {self.target}: {known}")

    def _coerce(self, builder: ir.IRBuilder, args: list[ir.Value]) -> list[ir.Value]:
        coerced = []
        for position, value in enumerate(args):
            if isinstance(value.type, ir.IntType) and value.type.width > 1:
                wanted = I32 if position == len(args) - 1 else I64
                if value.type.width < wanted.width:
                    value = builder.sext(value, wanted)
                elif value.type.width > wanted.width:
                    value = builder.trunc(value, wanted)
            coerced.append(value)
        return coerced

    def __call__(self, builder: ir.IRBuilder, call: tir.Call, args: list[ir.Value]) -> ir.Value:
        intrin = self._find(call.name)
        impl = implementation_for(intrin, self.target)
        if impl is None:
            offered = ", ".join(sorted(getattr(intrin, "implementations", {}) or {})) or "none"
            raise CompileError(f"intrinsic {call.name!r} has no implementation for {self.target.name} "
                               f"(it has: {offered}); register one with implementations={{'cpu_llvm': ...}}")
        if isinstance(impl, SourceImpl):
            if impl.language != "llvm":
                raise CompileError(f"intrinsic {call.name!r}: cpu_llvm compiles SourceImpl(language='llvm'), "
                                   f"not {impl.language!r}")
            self.sources[impl.symbol] = impl.code
        elif isinstance(impl, ExternImpl):
            if impl.library and impl.library not in self.libraries:
                self.libraries.append(impl.library)
        else:
            raise CompileError(f"intrinsic {call.name!r}: cpu_llvm does not know implementation kind "
                               f"{type(impl).__name__}")
        args = self._coerce(builder, args)
        return_type = ir.VoidType() if call.dtype == "void" else value_type(call.dtype)
        function = declare(self.module, impl.symbol, return_type, [a.type for a in args])
        return builder.call(function, args)


def written_buffers(func: tir.PrimFunc) -> tuple[str, ...]:
    """Names of the buffers `func` stores into, or hands to a tensor intrinsic as its output, sorted.

    An intrinsic call takes its input tiles' pointers first and the output tile's last
    (tensorkiln.sdk.intrinsic_impl), so only its last pointer is written through: a
    whole-GEMM call reading a constant weight in place does not make the weight written.
    """
    from tensorkiln.tir.visit import post_order_visit

    written: set[str] = set()

    def visit(node) -> None:
        if isinstance(node, tir.Store):
            written.add(node.buffer.name)
        elif isinstance(node, tir.Call):
            pointers = [a for a in node.args if isinstance(a, tir.BufferPointer)]
            if pointers:
                written.add(pointers[-1].buffer.name)
    post_order_visit(func.body, visit)
    return tuple(sorted(written))


def _string_global(module: ir.Module, name: str, text: str) -> None:
    data = bytearray(text.encode() + b"\0")
    variable = ir.GlobalVariable(module, ir.ArrayType(ir.IntType(8), len(data)), name)
    variable.initializer = ir.Constant(variable.type.pointee, data)
    variable.global_constant = True
    variable.visibility = "protected"


def _parse(text: str, what: str) -> llvm.ModuleRef:
    try:
        parsed = llvm.parse_assembly(text)
        parsed.verify()
    except RuntimeError as error:
        numbered = "\n".join(f"{n + 1:5d} {line}" for n, line in enumerate(text.splitlines()))
        raise CompileError(f"cpu_llvm: LLVM rejected {what}: {error}\n{numbered}") from None
    return parsed


class LLVMEmitter(Emitter):
    """tir -> LLVM IR -> object code for the host CPU (or -mcpu/-mattr)."""

    def emit(self, funcs: Sequence[tir.PrimFunc], target) -> Artifact:
        funcs = list(funcs)
        names = [f.name for f in funcs]
        if len(set(names)) != len(names):
            raise CompileError(f"cpu_llvm: kernel names must be unique in one module, got {names}")
        config = machine_config(target)
        # remarks come from running LLVM: a cached object would print none
        cache = None if os.environ.get(REMARKS_ENV) else kernel_cache()
        key = cache_key(funcs, target, config, functools.partial(_intrinsic_source, target=target)) if cache else ""
        cached = cache.get(key) if cache else None
        if cached is not None:
            record, binary = cached
            return Artifact(target=str(target), format="llvm-ir", source=record["source"],
                            kernels=_signatures(funcs), binary=binary, sources=dict(record["sources"]),
                            metadata=dict(record["metadata"]))
        machine = target_machine(config)
        jobs = compile_jobs(len(funcs))
        binary = None
        if jobs > 1:
            parsed, unoptimized, module, binary = self._build_in_chunks(funcs, target, config, machine, jobs)
        else:
            with collector_paused():
                module = self._build_module(funcs, target, config, machine)
                unoptimized = _unoptimized_text(module.llvm_module)
                _dismantle(module.llvm_module)
            parsed = _parse(unoptimized, f"the module for {names}")
            self._link_intrinsics(parsed, module.linker.sources)
            if config.opt_level:
                optimize(parsed, machine, config.opt_level)
        # no assembly here (about 15% of compile time): JITModule.render_source("asm") makes it on request
        record = {"source": str(parsed), "sources": {"llvm-unoptimized": unoptimized},
                  "metadata": {"format_version": METADATA_FORMAT_VERSION, "libraries": list(module.linker.libraries),
                               "cpu": config.cpu, "opt_level": config.opt_level, WRITTEN_METADATA_KEY: module.written}}
        if binary is None:
            binary = bytes(machine.emit_object(parsed))
        if cache:
            cache.put(key, record, binary)
        return Artifact(target=str(target), format="llvm-ir", source=record["source"], kernels=module.signatures,
                        binary=binary, sources=dict(record["sources"]), metadata=dict(record["metadata"]))

    def _build_in_chunks(self, funcs, target, config: MachineConfig, machine, jobs: int):
        """Optimise chunks of the kernels in `jobs` processes (parallel_compile.py), then link them into one module.

        The last chunk holds the module's globals (thread count, metadata of every kernel); the
        others declare the thread count and hold only their kernels. Each chunk goes to the first
        free process as soon as it is written, and this process takes chunks too once all are written.
        Returns the linked module, the unoptimized text, the last chunk's build and the merged
        object code (None: emit it from the linked module, no linker was found or the merge failed).
        """
        # kernels that need the full pipeline first (the costliest chunks are taken first): the explicitly
        # vectorized ones, then those LLVM may vectorize; then the copy and elementwise kernels, in
        # chunks of their own optimised with the light pipeline. A chunk holds kernels of one class.
        classes = [_pipeline_class(f) for f in funcs]
        ordered = [f for wanted in _PIPELINE_CLASSES for f, c in zip(funcs, classes) if c == wanted]
        counts = [classes.count(wanted) for wanted in _PIPELINE_CLASSES]
        costs = [1.0 if c == "light" else FULL_PIPELINE_COST for c in sorted(classes, key=_PIPELINE_CLASSES.index)]
        chunks = _cut(ordered, chunk_sizes(len(funcs), jobs, costs), list(itertools.accumulate(counts))[:-1])
        class_of = {f.name: c for f, c in zip(funcs, classes)}
        owner = len(chunks) - 1
        merge = object_linker() is not None
        built: list = [None] * len(chunks)
        texts: list = [None] * len(chunks)

        def chunk_job(index: int) -> ChunkJob:
            # the owner is built last: the other chunks' libraries are known by then
            others = [name for b in built[:index] for name in b.linker.libraries] if index == owner else ()
            with collector_paused():
                built[index] = self._build_module(funcs, target, config, machine, kernels=chunks[index],
                                                  owns_globals=index == owner, libraries=others)
                texts[index] = _unoptimized_text(built[index].llvm_module)
                _dismantle(built[index].llvm_module)
            pipeline = class_of[chunks[index][0].name]
            return ChunkJob(texts[index], tuple(built[index].linker.sources.items()), config.triple, config.cpu,
                            config.features, config.opt_level, emit_object=merge, light=pipeline == "light",
                            vectorize=pipeline != "vectorized")

        def parse(text: str) -> llvm.ModuleRef:   # a chunk LLVM rejects is named by its kernels
            index = texts.index(text)
            return _parse(text, f"the module for {[f.name for f in chunks[index]]}")

        results = optimize_chunks([functools.partial(chunk_job, index) for index in range(len(chunks))],
                                  link=self._link_intrinsics, parse=parse, workers=jobs - 1)
        parsed = llvm.parse_bitcode(results[0].bitcode)
        for result in results[1:]:
            parsed.link_in(llvm.parse_bitcode(result.bitcode))
        parsed.verify()
        binary = None
        if merge and all(r.object_code for r in results):
            binary = merge_objects([r.object_code for r in results])
        libraries = list(dict.fromkeys(library for b in built for library in b.linker.libraries))
        built[owner].linker.libraries[:] = libraries
        return parsed, "\n".join(texts), built[owner], binary

    def _build_module(self, funcs, target, config: MachineConfig, machine, kernels=None,
                      owns_globals: bool = True, libraries: Sequence[str] = ()) -> "_BuiltModule":
        """The llvmlite module of `kernels` (default: all of `funcs`); metadata describes all of `funcs`
        and names `libraries` (those of the other chunks) besides the ones its own kernels call.

        A module that does not own the globals only declares the thread count (see _build_in_chunks).
        """
        kernels = funcs if kernels is None else kernels
        module = ir.Module(name=kernels[0].name)
        module.triple = config.triple
        module.data_layout = str(machine.target_data)
        threads = ir.GlobalVariable(module, I32, NUM_THREADS_SYMBOL)
        if owns_globals:
            threads.initializer = I32(config.num_threads)
            threads.visibility = "protected"
        linker = IntrinsicLinker(module, target, kernels)
        for func in kernels:
            impl = impl_function(module, func)
            codegen = FunctionCodegen(module, impl, linker)
            for param, argument in zip(func.params, impl.args):
                if isinstance(param, tir.Buffer):
                    codegen.buffers[param] = argument
                else:
                    codegen.vars[param] = argument
            codegen.stmt(func.body)
            codegen.builder.ret_void()
            emit_packed_function(module, func, impl, func.name)
        if not owns_globals:   # the metadata of every kernel is the owning chunk's to write, once
            return _BuiltModule(module, linker, (), {})
        signatures = _signatures(funcs)
        # the buffer parameters each kernel writes: its loader refuses read-only arrays for them
        written = {f.name: [name for name in written_buffers(f) if name in {p.name for p in f.params}]
                   for f in funcs}
        _string_global(module, METADATA_SYMBOL, metadata_json(
            str(target), signatures, {"libraries": [*dict.fromkeys([*libraries, *linker.libraries])],
                                      "plugin": "cpu_llvm", WRITTEN_METADATA_KEY: written}))
        return _BuiltModule(module, linker, signatures, written)

    @staticmethod
    def _link_intrinsics(parsed: llvm.ModuleRef, sources) -> None:
        link_intrinsic_sources(parsed, sources, parse=_parse, error=CompileError)


def _dismantle(module: ir.Module) -> None:
    """Break the reference cycles of a built llvmlite module once its text is made (nothing reads it
    after): every value names its parent (instruction -> block -> function -> module, which lists
    them), so a dropped module waited for the cyclic GC, and densenet121's modules were two thirds
    of the garbage a compile leaves to it. Types and constants, which modules share, are left alone.
    An object without a __dict__ (another llvmlite) is left to the collector, as before."""
    def clear(value) -> None:
        attributes = getattr(value, "__dict__", None)
        if attributes is not None:
            attributes.clear()

    for value in getattr(module, "globals", {}).values():
        for block in getattr(value, "blocks", ()):
            for instruction in getattr(block, "instructions", ()):
                clear(instruction)
            clear(block)
        for argument in getattr(value, "args", ()):
            clear(argument)
        clear(value)
    for node in (*getattr(module, "metadata", ()), *getattr(module, "namedmetadata", {}).values()):
        clear(node)
    clear(module)


def _unoptimized_text(module: ir.Module) -> str:
    text = str(module)
    if "bfloat" in text and add_bfloat_runtime(module):   # see lowp.py
        text = str(module)
    return text


def _cut(funcs: list, sizes: list[int], boundaries: "int | Sequence[int]") -> list[list]:
    """`funcs` cut into consecutive chunks of `sizes`, with one more cut at each of `boundaries` (a chunk
    across one becomes two): the kernels on either side of a boundary never share a chunk."""
    boundaries = sorted({boundaries} if isinstance(boundaries, int) else set(boundaries))
    chunks, start = [], 0
    for size in sizes:
        end = start + size
        cuts = [start, *(b for b in boundaries if start < b < end), end]
        chunks += [funcs[low:high] for low, high in zip(cuts, cuts[1:])]
        start = end
    return chunks


FULL_PIPELINE_COST = 2.0
"""What a kernel of the full pipeline costs to optimise and emit, against a light one: densenet121's
convolutions against its copies and BN+ReLU kernels (chunks are cut by these costs)."""
LIGHT_MIN_TRIP = 16
"""A scalar store in a loop of fewer iterations than this (a layout transform's 3 channels) gains from
unrolling the loops around it: its kernel keeps the full pipeline."""


def needs_full_pipeline(func: tir.PrimFunc) -> bool:
    """Whether `func` needs the full O3 pipeline, unrolling included: it accumulates (a store whose
    value reads the buffer it stores into: convolution, GEMM, pooling, reductions), allocates
    scratch, calls a tensor intrinsic, or stores scalars in a short loop. Copies such as
    concatenation and elementwise kernels, vector stores or long loops, do not: they get
    llvm_passes.optimize's light pipeline, which vectorizes them as well (measured on densenet121)."""
    from tensorkiln.tir.visit import post_order_visit

    if func.tensor_intrinsics():
        return True

    def reads(value, buffer: tir.Buffer) -> bool:
        found = []
        post_order_visit(value, lambda node: found.append(node) if isinstance(node, (tir.Load, tir.BufferPointer))
                         and node.buffer.name == buffer.name else None)
        return bool(found)

    def full(stmt, trip: int | None) -> bool:   # trip: the extent of the innermost loop around stmt
        if isinstance(stmt, tir.Store):
            scalar_in_short_loop = not isinstance(stmt.index, tir.Ramp) and (trip is not None and trip < LIGHT_MIN_TRIP)
            return scalar_in_short_loop or reads(stmt.value, stmt.buffer)
        if isinstance(stmt, tir.For):
            extent = stmt.extent.value if isinstance(stmt.extent, tir.IntImm) else None
            return extent is None or full(stmt.body, extent)
        if isinstance(stmt, tir.SeqStmt):
            return any(full(inner, trip) for inner in stmt.stmts)
        if isinstance(stmt, tir.IfThenElse):
            return full(stmt.then_case, trip) or (stmt.else_case is not None and full(stmt.else_case, trip))
        if isinstance(stmt, tir.LetStmt):
            return full(stmt.body, trip)
        return True   # Allocate, Evaluate (calls), thread reductions, anything else
    return full(func.body, None)


_PIPELINE_CLASSES = ("vectorized", "full", "light")


def _pipeline_class(func: tir.PrimFunc) -> str:
    """How a chunk holding `func` is optimised: "vectorized" (O3 without LLVM's vectorizers,
    `explicitly_vectorized`), "full" (O3) or "light" (`needs_full_pipeline` is false)."""
    if not needs_full_pipeline(func):
        return "light"
    return "vectorized" if explicitly_vectorized(func) else "full"


def explicitly_vectorized(func: tir.PrimFunc) -> bool:
    """Whether every store of `func` is a vector store (the schedule vectorized every loop that
    writes memory) and it calls no tensor intrinsic: then LLVM's loop and SLP vectorizers find
    nothing to do (a loop holding vector code is not loop-vectorized) and only cost time: 0.5 s of
    densenet121's 4.8 s of O3 on its convolutions, whose objects came out byte-identical without
    them (llvm_passes.optimize's `vectorize`)."""
    from tensorkiln.tir.visit import post_order_visit

    if func.tensor_intrinsics():
        return False
    stores = []
    post_order_visit(func.body, lambda node: stores.append(node) if isinstance(node, tir.Store) else None)
    return bool(stores) and all(isinstance(store.index, tir.Ramp) for store in stores)


def _signatures(funcs) -> tuple:
    try:
        return tuple(signature_of(f) for f in funcs)
    except ValueError as error:
        raise CompileError(f"cpu_llvm: {error}; kernels need static buffer shapes") from None


def _intrinsic_source(intrin, target) -> str:
    """What an intrinsic's code is for the kernel cache's key: LLVM source, or an extern symbol and library."""
    impl = implementation_for(intrin, target)
    if isinstance(impl, SourceImpl):
        return f"{impl.language}:{impl.symbol}:{impl.code}"
    if isinstance(impl, ExternImpl):
        return f"extern:{impl.symbol}:{impl.library}"
    return repr(impl)


@dataclass(frozen=True)
class _BuiltModule:
    llvm_module: ir.Module
    linker: IntrinsicLinker
    signatures: tuple
    written: dict          # kernel name -> names of the buffer parameters it writes
