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
processes (parallel_compile.py) as its kernels arrive: the driver hands them over one by one as
it lowers them (`emit_stream`), so the workers optimise the first chunks while the parent lowers
the rest. A chunk holds kernels of one pipeline class: O3 without LLVM's vectorizers for those
the schedule vectorized explicitly (`explicitly_vectorized`), O3, or a light pipeline for copy
and elementwise kernels (`needs_full_pipeline`, llvm_passes.optimize). The chunks' bitcode is
linked back into one module (the artifact's optimized IR) and their objects merged into one
(`ld -r`; without a linker the parent emits the object of the linked module). The object
computes what a serial compile makes. TENSORKILN_COMPILE_JOBS=1 keeps it in one process.

Steps 1-4 are skipped when kernel_cache.py holds the module (same kernels, target,
versions), or, for a module compiled in chunks, per chunk: a compile of the same model again,
in this process or another, loads the cached optimized IR and object.

Artifact: format "llvm-ir", `source` = the *optimized* LLVM IR, `sources["llvm-unoptimized"]`
= the IR before optimization, `binary` = object code; assembly is rendered on request
(`f.get_source("asm")`, runtime.JITModule.render_source).
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Iterable, Sequence

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import Artifact, Emitter, signature_of
from tensorkiln.sdk.arg_checks import WRITTEN_METADATA_KEY
from tensorkiln.sdk.intrinsic_impl import ExternImpl, SourceImpl, implementation_for
from tensorkiln.sdk.native import (CPU_FEATURES_METADATA_KEY, METADATA_FORMAT_VERSION, METADATA_SYMBOL,
                                  NUM_THREADS_SYMBOL, metadata_json)

from .abi import emit_packed_function, impl_function
from .cgutils import I32, I64, PTR, declare, for_range, value_type
from .gc_pause import collector_paused
from .host import MachineConfig, code_features, machine_config, target_machine
from .kernel_cache import cache_key, kernel_cache, pack_parts, unpack_parts
from .llvm_passes import REMARKS_ENV, link_intrinsic_sources, optimize
from .lowp import add_bfloat_runtime
from .parallel_compile import (ChunkCutter, ChunkJob, ChunkResult, compile_jobs, merge_objects, object_linker,
                               optimize_chunks)
from .stmts import FunctionCodegen

__all__ = ["LLVMEmitter", "IntrinsicLinker", "optimize", "needs_full_pipeline", "explicitly_vectorized", "COPY_CALL"]

COPY_CALL = "cpu_llvm.copy"
"""`Evaluate(Call("void", COPY_CALL, (BufferPointer(source, i), BufferPointer(destination, j), count)))`: copy
`count` contiguous elements (llvm.memcpy; the runs must not overlap). Source first and destination last, as
for intrinsics, so only the destination counts as written (`written_buffers`). strategies/concat.py copies
its rows with it: LLVM lowers a call (large copies: the C library's memcpy, small ones: a few moves) where
explicit copy loops cost it 30 ms of optimisation and code generation per concatenation kernel."""


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

    def _prefetch(self, builder: ir.IRBuilder, call: tir.Call, pointer: ir.Value, count: ir.Value) -> None:
        """Stage.prefetch's hint: llvm.prefetch (a read, kept in every cache level) of each cache line of the
        `count` elements from `pointer`, and of the line of the last one (the run need not start a line)."""
        from .host import cache_sizes

        element = dtype_of(call.args[0].buffer.dtype).bytes
        line = cache_sizes(self.target).line_bytes
        prefetch = declare(builder.module, "llvm.prefetch.p0i8", ir.VoidType(), [PTR, I32, I32, I32])
        nbytes = builder.mul(builder.sext(count, I64) if count.type != I64 else count, I64(element))

        def fetch(offset: ir.Value) -> None:
            builder.call(prefetch, [builder.gep(pointer, [offset]), I32(0), I32(3), I32(1)])
        lines = builder.udiv(builder.add(nbytes, I64(line - 1)), I64(line))
        with for_range(builder, I64(0), lines, name="prefetch") as index:
            fetch(builder.mul(index, I64(line)))
        with builder.if_then(builder.icmp_signed(">", nbytes, I64(0))):
            fetch(builder.sub(nbytes, I64(1)))
        return None

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

    def _copy(self, builder: ir.IRBuilder, call: tir.Call, source: ir.Value, destination: ir.Value,
              count: ir.Value) -> None:
        """COPY_CALL: llvm.memcpy of `count` elements of the source buffer's dtype."""
        element_bytes = dtype_of(call.args[0].buffer.dtype).bits // 8
        nbytes = builder.mul(builder.sext(count, I64) if count.type != I64 else count, I64(element_bytes))
        memcpy = self.module.declare_intrinsic("llvm.memcpy", [PTR, PTR, I64])
        builder.call(memcpy, [builder.bitcast(destination, PTR), builder.bitcast(source, PTR), nbytes,
                              ir.Constant(ir.IntType(1), 0)])

    def __call__(self, builder: ir.IRBuilder, call: tir.Call, args: list[ir.Value]) -> ir.Value:
        if call.name == tir.PREFETCH_CALL:
            return self._prefetch(builder, call, *args)
        if call.name == COPY_CALL:
            return self._copy(builder, call, *args)
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
        elif isinstance(node, tir.Call) and node.name != tir.PREFETCH_CALL:   # a prefetch only reads
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
        jobs = compile_jobs(len(funcs))
        if jobs > 1:
            return self._emit_in_chunks(funcs, target, len(funcs), jobs)
        config = machine_config(target)
        cache = _cache()
        key = cache_key(funcs, target, config, functools.partial(_intrinsic_source, target=target)) if cache else ""
        cached = cache.get(key) if cache else None
        if cached is not None:
            record, binary = cached
            # (records cached before the metadata named the CPU features get them here)
            return Artifact(target=str(target), format="llvm-ir", source=record["source"],
                            kernels=_signatures(funcs), binary=binary, sources=dict(record["sources"]),
                            metadata={**record["metadata"], CPU_FEATURES_METADATA_KEY: list(code_features(config))})
        machine = target_machine(config)
        with collector_paused():
            module = self._build_module(funcs, target, config, machine, owns_globals=True)
            unoptimized = _unoptimized_text(module.llvm_module)
            _dismantle(module.llvm_module)
        parsed = _parse(unoptimized, f"the module for {names}")
        self._link_intrinsics(parsed, module.linker.sources)
        if config.opt_level:
            optimize(parsed, machine, config.opt_level)
        # no assembly here (about 15% of compile time): JITModule.render_source("asm") makes it on request
        record = {"source": str(parsed), "sources": {"llvm-unoptimized": unoptimized},
                  "metadata": _metadata(config, module.linker.libraries, module.written)}
        binary = bytes(machine.emit_object(parsed))
        if cache:
            cache.put(key, record, binary)
        return Artifact(target=str(target), format="llvm-ir", source=record["source"], kernels=module.signatures,
                        binary=binary, sources=dict(record["sources"]), metadata=dict(record["metadata"]))

    def emit_stream(self, funcs: Iterable[tir.PrimFunc], target, count: int) -> Artifact:
        """The kernels as the driver lowers them: a module large enough for worker processes is cut into
        chunks as they arrive, and the workers optimise the first chunks while the rest are lowered."""
        jobs = compile_jobs(count)
        if jobs <= 1:
            return self.emit(list(funcs), target)
        return self._emit_in_chunks(funcs, target, count, jobs)

    def _emit_in_chunks(self, funcs: Iterable[tir.PrimFunc], target, count: int, jobs: int) -> Artifact:
        """Optimise chunks of the kernels in `jobs` processes (parallel_compile.py) as they arrive, then
        link them into one module.

        `ChunkCutter` cuts the kernels into chunks of one pipeline class each (`_pipeline_class`) as
        they come from `funcs`; each chunk is written as its own LLVM module, declaring the thread
        count, and queued for the first free process, unless the kernel cache holds it (keyed by its
        kernels: a chunk is the cache's unit here, since the whole module is known only at the end).
        Once every kernel has come, one more module holds the globals: the thread count and the
        metadata of every kernel. The chunks' bitcode is linked into the artifact's optimized IR and
        their objects merged (`merge_objects`; without a linker the object of the linked module is
        emitted here).
        """
        config = machine_config(target)
        machine = target_machine(config)
        cache = _cache()
        merge = object_linker() is not None
        source_of = functools.partial(_intrinsic_source, target=target)
        cutter = ChunkCutter(count * EXPECTED_KERNEL_COST, jobs)
        arrived: list[tir.PrimFunc] = []
        chunks: list[_Chunk] = []
        queued: list[_Chunk] = []     # the chunks the cache did not hold, in the order they were queued
        owner: list = []              # the globals module's build: signatures and written buffers of every kernel

        def written_chunk(kernels: list, owns_globals: bool = False) -> ChunkJob | None:
            key = ""
            if cache and not owns_globals:
                key = cache_key(kernels, target, config, source_of, kind=f"chunk|merge={merge}")
                cached = cache.get(key)
                if cached is not None:
                    record, binary = cached
                    bitcode, object_code = unpack_parts(binary)
                    chunks.append(_Chunk(kernels, record["unoptimized"], tuple(record["libraries"]), key,
                                         ChunkResult(bitcode, object_code)))
                    return None
            with collector_paused():
                if owns_globals:
                    libraries = [library for chunk in chunks for library in chunk.libraries]
                    built = self._build_module(arrived, target, config, machine, kernels=(), owns_globals=True,
                                               libraries=libraries)
                    owner.append(built)
                else:
                    built = self._build_module(arrived, target, config, machine, kernels=kernels)
                text = _unoptimized_text(built.llvm_module)
                _dismantle(built.llvm_module)
            chunk = _Chunk(kernels, text, tuple(built.linker.libraries), key)
            chunks.append(chunk)
            queued.append(chunk)
            pipeline = "light" if owns_globals else _pipeline_class(kernels[0])
            return ChunkJob(text, tuple(built.linker.sources.items()), config.triple, config.cpu, config.features,
                            0 if owns_globals else config.opt_level, emit_object=merge, light=pipeline == "light",
                            vectorize=pipeline != "vectorized",
                            codegen_level=LIGHT_CODEGEN_LEVEL if pipeline == "light" else None,
                            cost=len(text) * _COST_PER_CHARACTER[pipeline])

        def chunk_jobs():
            costs: dict[str, float] = {}
            for func in funcs:
                if func.name in costs:
                    raise CompileError(f"cpu_llvm: kernel names must be unique in one module, "
                                       f"{func.name!r} came twice")
                arrived.append(func)
                pipeline = _pipeline_class(func)
                costs[func.name] = PIPELINE_COSTS[pipeline]
                ready = cutter.add(func, pipeline, costs[func.name])
                if ready and (job := written_chunk(ready)):
                    yield job
            for ready in cutter.finish(lambda func: costs[func.name]):
                if job := written_chunk(ready):
                    yield job
            yield written_chunk([], owns_globals=True)

        def parse(text: str) -> llvm.ModuleRef:   # a chunk LLVM rejects is named by its kernels
            kernels = next((c.funcs for c in chunks if c.text is text), ())
            return _parse(text, f"the module for {[f.name for f in kernels]}")

        results = optimize_chunks(chunk_jobs(), link=self._link_intrinsics, parse=parse, workers=jobs - 1)
        for chunk, result in zip(queued, results):
            chunk.result = result
            if chunk.key:
                cache.put(chunk.key, {"unoptimized": chunk.text, "libraries": list(chunk.libraries)},
                          pack_parts(result.bitcode, result.object_code))
        parsed = llvm.parse_bitcode(chunks[0].result.bitcode)
        for chunk in chunks[1:]:
            parsed.link_in(llvm.parse_bitcode(chunk.result.bitcode))
        parsed.verify()
        objects = [chunk.result.object_code for chunk in chunks]
        binary = merge_objects(objects) if merge and all(objects) else None
        if binary is None:
            binary = bytes(machine.emit_object(parsed))
        libraries = [*dict.fromkeys(library for chunk in chunks for library in chunk.libraries)]
        (globals_module,) = owner
        metadata = _metadata(config, libraries, globals_module.written)
        return Artifact(target=str(target), format="llvm-ir", source=str(parsed), kernels=globals_module.signatures,
                        binary=binary, sources={"llvm-unoptimized": "\n".join(c.text for c in chunks)},
                        metadata=metadata)

    def _build_module(self, funcs, target, config: MachineConfig, machine, kernels=None,
                      owns_globals: bool = False, libraries: Sequence[str] = ()) -> "_BuiltModule":
        """The llvmlite module of `kernels` (default: all of `funcs`). With `owns_globals` it defines the
        thread count and holds the metadata, which describes all of `funcs` and names `libraries` (those
        of the other chunks) besides the ones its own kernels call; else it only declares the thread count.
        """
        kernels = funcs if kernels is None else kernels
        module = ir.Module(name=kernels[0].name if kernels else "tensorkiln_globals")
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
        if not owns_globals:   # the metadata of every kernel is the owning module's to write, once
            return _BuiltModule(module, linker, (), {})
        signatures = _signatures(funcs)
        # the buffer parameters each kernel writes: its loader refuses read-only arrays for them
        written = _written(funcs)
        _string_global(module, METADATA_SYMBOL, metadata_json(
            str(target), signatures, {"libraries": [*dict.fromkeys([*libraries, *linker.libraries])],
                                      "plugin": "cpu_llvm", WRITTEN_METADATA_KEY: written,
                                      CPU_FEATURES_METADATA_KEY: list(code_features(config))}))
        return _BuiltModule(module, linker, signatures, written)

    @staticmethod
    def _link_intrinsics(parsed: llvm.ModuleRef, sources) -> None:
        link_intrinsic_sources(parsed, sources, parse=_parse, error=CompileError)


def _cache():
    # remarks come from running LLVM: a cached object would print none
    return None if os.environ.get(REMARKS_ENV) else kernel_cache()


def _written(funcs) -> dict[str, list[str]]:
    """Kernel name -> the buffer parameters it writes (its loader refuses read-only arrays for them)."""
    return {f.name: [name for name in written_buffers(f) if name in {p.name for p in f.params}] for f in funcs}


def _metadata(config: MachineConfig, libraries, written: dict) -> dict:
    return {"format_version": METADATA_FORMAT_VERSION, "libraries": list(libraries), "cpu": config.cpu,
            "opt_level": config.opt_level, WRITTEN_METADATA_KEY: written,
            CPU_FEATURES_METADATA_KEY: list(code_features(config))}


@dataclass
class _Chunk:
    """One chunk of a module compiled in chunks: its kernels, unoptimised IR, the libraries its kernels
    call, its cache key ("" when not cached) and, once optimised (or read from the cache), its result."""

    funcs: list
    text: str
    libraries: tuple[str, ...]
    key: str
    result: ChunkResult | None = None


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


LIGHT_CODEGEN_LEVEL = 0
"""Code generation level of the light chunks' objects (their IR is optimised as
llvm_passes.optimize's light pipeline says): O0 instruction selection with the optimising register
allocator (parallel_compile._keep_register_allocation). Their loops are a few vector loads, an FMA or
a max and a store, for which -O2's machine passes add little: a BN+ReLU loop is 13 instructions
against 10. Measured on Zen 1, densenet121: the light chunks' code generation 1.44 -> 0.56 s, its
compile 8.67 -> 8.07 s; densenet121 (1 and 2 threads), shufflenet (2) and inception_v1 (1) run as
fast (within 1%, one process alternating). Not for the convolutions' vectorized chunks: O0 saves
0.76 s of resnet50's code generation but resnet50 runs 1.65x slower (with or without fast
instruction selection)."""
PIPELINE_COSTS = {"light": 0.7, "vectorized": 1.6, "full": 5.0}
"""What a kernel of each pipeline class costs to optimise and emit (densenet121: its copies and
BN+ReLU kernels 13 ms each, its convolutions 30 ms, its pools 120 ms, against 19 ms per unit); chunks
are cut by these costs (`ChunkCutter`)."""
EXPECTED_KERNEL_COST = 1.3
"""The mean cost of a kernel before any has been lowered (densenet121: 1.2, resnet50: 1.7); the
chunks' share of a module is cut from it."""
_COST_PER_CHARACTER = {"light": 1.05, "vectorized": 0.75, "full": 7.5}
"""Seconds per megabyte of unoptimised IR of each class (densenet121, resnet50): a written chunk's
cost, by which the queue orders the chunks waiting for a process."""
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
        if isinstance(stmt, tir.Evaluate) and isinstance(stmt.value, tir.Call) and stmt.value.name == COPY_CALL:
            return False   # a memcpy: nothing for O3 to do
        return True   # Allocate, Evaluate (calls), thread reductions, anything else
    return full(func.body, None)


def _pipeline_class(func: tir.PrimFunc) -> str:
    """How a chunk holding `func` is optimised: "vectorized" (O3 without LLVM's vectorizers,
    `explicitly_vectorized`), "full" (O3) or "light" (`needs_full_pipeline` is false)."""
    if not needs_full_pipeline(func):
        return "light"
    return "vectorized" if explicitly_vectorized(func) else "full"


def explicitly_vectorized(func: tir.PrimFunc) -> bool:
    """Whether every store of `func` is a vector store (the schedule vectorized every loop that
    writes memory) and every tensor intrinsic it calls is hand-vectorized LLVM source
    (SourceImpl.vectorized: cpu_llvm's micro-kernels and whole GEMMs): then LLVM's loop and SLP
    vectorizers find nothing to do (a loop holding vector code is not loop-vectorized) and only
    cost time: 0.5 s of densenet121's 4.8 s of O3 on its convolutions, whose objects came out
    byte-identical without them (llvm_passes.optimize's `vectorize`). densenet121's 17 1x1 convs
    on the packed micro-kernel: 1.91 -> 1.49 s of O3, the same FMAs."""
    from tensorkiln.tir.visit import post_order_visit

    intrinsics = func.tensor_intrinsics()
    if not all(_hand_vectorized(intrin) for intrin in intrinsics.values()):
        return False
    stores = []
    post_order_visit(func.body, lambda node: stores.append(node) if isinstance(node, tir.Store) else None)
    return bool(stores or intrinsics) and all(isinstance(store.index, tir.Ramp) for store in stores)


def _hand_vectorized(intrin) -> bool:
    """Whether `intrin` has LLVM source that is vectorized by hand (SourceImpl.vectorized)."""
    sources = [impl for impl in (getattr(intrin, "implementations", None) or {}).values()
               if isinstance(impl, SourceImpl) and impl.language == "llvm"]
    return bool(sources) and all(impl.vectorized for impl in sources)


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
