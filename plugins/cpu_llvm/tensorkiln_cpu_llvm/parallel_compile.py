"""parallel_compile.py: LLVM optimisation of a large module in several processes.

LLVM's O3 pipeline is most of a cold compile (densenet121: two thirds), it runs one
function at a time, and llvmlite serialises every call into LLVM behind one lock, so
threads cannot share the work. The emitter therefore splits a module's kernels into
chunks, builds each chunk as its own LLVM module, and optimises the chunks in worker
processes (`python -m tensorkiln_cpu_llvm.parallel_compile`, which imports llvmlite only:
never the user's main script, as multiprocessing's spawn would). Each worker returns
bitcode and, when asked (`ChunkJob.emit_object`), its chunk's object code too: code
generation is a quarter of a cold compile and also runs one function at a time. The
parent links the bitcode into one module (the artifact's optimized IR) and merges the
chunk objects into one relocatable object (`merge_objects`, `ld -r`), or emits the
object from the linked module itself where no linker is found.

`optimize_chunks` draws the chunks from an iterator that builds them: the workers start first,
each built chunk joins a queue, and a worker takes the costliest queued chunk as soon as it is
done with its last one. The emitter's iterator lowers the
kernels as it goes (`Emitter.emit_stream`), so the workers optimise the first chunks while the
parent is still lowering and writing the rest. When every chunk is built, the parent takes queued
chunks too. A module is cut into several chunks per process as its kernels arrive (`ChunkCutter`),
smaller at the end, so all processes finish at about the same time whatever the kernels cost.

Workers are started per compile (about 0.1 s of CPU each) and only for modules large
enough to repay it. TENSORKILN_COMPILE_JOBS sets the number of processes (1: serial);
by default it is the CPUs this process may use, and 1 inside a child process (a tuning
builder pool already fills the machine).
"""
from __future__ import annotations

import functools
import math
import multiprocessing
import os
import pickle
import queue
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Iterable, Union

import llvmlite.binding as llvm

from .llvm_passes import link_intrinsic_sources, optimize

__all__ = ["ChunkJob", "ChunkResult", "ChunkCutter", "compile_jobs", "optimize_chunk", "optimize_chunks",
           "merge_objects", "object_linker", "JOBS_ENV", "MIN_PARALLEL_KERNELS", "CHUNKS_PER_JOB"]

JOBS_ENV = "TENSORKILN_COMPILE_JOBS"
MIN_PARALLEL_KERNELS = 12
"""Below this many kernels a module compiles in the parent alone: a worker's start-up is
about what LLVM spends on a dozen small kernels."""


@dataclass(frozen=True)
class ChunkJob:
    """One chunk: unoptimised IR text, the LLVM source of the intrinsics it calls, and the machine."""

    text: str
    intrinsic_sources: tuple[tuple[str, str], ...]    # (symbol, LLVM IR text)
    triple: str
    cpu: str
    features: str
    opt_level: int
    emit_object: bool = False   # also return the chunk's object code (merged by merge_objects)
    light: bool = False         # copy and elementwise kernels only: llvm_passes.optimize's light pipeline
    vectorize: bool = True      # False: explicitly vectorized kernels only, LLVM's vectorizers are not run
    codegen_level: int | None = None   # the object's code generation (-O) level, when not opt_level
    cost: float = 1.0           # its estimated cost: of the queued chunks, the costliest is taken first


@dataclass(frozen=True)
class ChunkResult:
    """What a chunk comes back as: optimised bitcode, and its object code when the job asked for it."""

    bitcode: bytes
    object_code: bytes | None = None


CHUNKS_PER_JOB = 6
"""Chunks per process: enough that the queue evens out kernels of unequal cost, few enough that the
per-chunk costs (a module of its own, its pickling, an object to merge) stay small."""
MIN_CHUNK_KERNELS = 4


class ChunkCutter:
    """Cuts kernels into chunks as they arrive, before the last one is known (the emitter's kernels are
    lowered one by one while the first chunks are being optimised).

    A chunk holds kernels of one kind (the pipeline that optimises them). A kind's kernels are held
    until their estimated cost reaches a chunk's share of `expected_cost` (the first chunk half of
    it: a worker starts on it early), then they go out as one chunk. `finish` cuts what is still
    held into pieces of at most half a share, the costliest first, so the processes run out of work
    together. The cut depends on the kernels alone, never on timing: a module compiled again is cut
    the same way (the kernel cache keys chunks).
    """

    def __init__(self, expected_cost: float, jobs: int) -> None:
        self.share = max(expected_cost, 1.0) / (max(jobs, 1) * CHUNKS_PER_JOB)
        self._held: dict[str, list] = {}
        self._cost: dict[str, float] = {}
        self._cut_any = False

    def add(self, item, kind: str, cost: float) -> list | None:
        """Hold `item`; returns a chunk (a list of held items of `kind`) once they are enough."""
        held = self._held.setdefault(kind, [])
        held.append(item)
        self._cost[kind] = self._cost.get(kind, 0.0) + cost
        limit = self.share * (1.0 if self._cut_any else 0.5)
        if self._cost[kind] < limit or len(held) < MIN_CHUNK_KERNELS:
            return None
        self._cut_any = True
        self._held[kind], self._cost[kind] = [], 0.0
        return held

    def finish(self, cost_of: Callable[[object], float]) -> list[list]:
        """Every item still held, in chunks of at most half a share (`cost_of` each item), costliest first."""
        pieces: list[tuple[float, int, list]] = []
        for kind, held in self._held.items():
            piece, piece_cost = [], 0.0
            for item in held:
                piece.append(item)
                piece_cost += cost_of(item)
                if piece_cost >= self.share / 2 and len(piece) >= MIN_CHUNK_KERNELS:
                    pieces.append((piece_cost, len(pieces), piece))
                    piece, piece_cost = [], 0.0
            if piece:
                pieces.append((piece_cost, len(pieces), piece))
        self._held, self._cost = {}, {}
        return [piece for _, _, piece in sorted(pieces, key=lambda p: (-p[0], p[1]))]


def compile_jobs(kernel_count: int) -> int:
    """How many processes to optimise a module of `kernel_count` kernels with."""
    requested = os.environ.get(JOBS_ENV, "")
    if requested:
        try:
            jobs = max(1, int(requested))
        except ValueError:
            raise ValueError(f"{JOBS_ENV}={requested!r}: expected a whole number of processes (1 = serial)") from None
    elif multiprocessing.parent_process() is not None:
        jobs = 1
    else:
        jobs = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if kernel_count < MIN_PARALLEL_KERNELS:
        return 1
    return min(jobs, kernel_count // (MIN_PARALLEL_KERNELS // 2))


def _plain_parse(text: str) -> llvm.ModuleRef:
    module = llvm.parse_assembly(text)
    module.verify()
    return module


def optimize_chunk(job: ChunkJob, link: Callable[[llvm.ModuleRef, dict], None] = link_intrinsic_sources,
                   parse: Callable[[str], llvm.ModuleRef] = _plain_parse) -> ChunkResult:
    """Parse, link the intrinsics' source, optimise (and emit): the chunk's result. Runs in a worker or in
    the parent; `parse` lets the parent name the chunk's kernels when LLVM rejects its text."""
    module = parse(job.text)
    link(module, dict(job.intrinsic_sources))
    machine = None
    if job.opt_level or job.emit_object:
        # the options of host.new_target_machine: the parent's own object is emitted with the same ones
        machine = llvm.Target.from_triple(job.triple).create_target_machine(
            cpu=job.cpu, features=job.features, opt=job.opt_level, reloc="pic", codemodel="default")
    if job.opt_level:
        optimize(module, machine, job.opt_level, light=job.light, vectorize=job.vectorize)
    object_code = None
    if job.emit_object:
        if job.codegen_level is not None and job.codegen_level != job.opt_level:
            if job.codegen_level == 0:
                _keep_register_allocation()
            machine = llvm.Target.from_triple(job.triple).create_target_machine(
                cpu=job.cpu, features=job.features, opt=job.codegen_level, reloc="pic", codemodel="default")
        object_code = bytes(machine.emit_object(module))
    return ChunkResult(module.as_bitcode(), object_code)


@functools.cache
def _keep_register_allocation() -> None:
    # O0 code generation allocates registers with the fast allocator, which spills every value live
    # across a block (a loop's pointers and counters, each iteration). This keeps the optimising
    # allocator at O0 (LLVM's -optimize-regalloc), and instruction selection stays fast. The option is
    # process-wide and only O0 reads it: a later opt_level=0 compile in this process gets the same
    # allocation (better code, its code generation about 1.8x as long).
    llvm.set_option("tensorkiln", "-optimize-regalloc")


def optimize_chunks(jobs: Iterable[Union[ChunkJob, Callable[[], ChunkJob]]],
                    link: Callable[[llvm.ModuleRef, dict], None] = link_intrinsic_sources,
                    parse: Callable[[str], llvm.ModuleRef] = _plain_parse,
                    workers: int | None = None) -> list[ChunkResult]:
    """Results of every chunk, in order: `workers` processes (default one per job after the first; a
    job list of unknown length, an iterator, needs `workers`) and this one share them: a free
    process takes the costliest queued job (`ChunkJob.cost`).

    `jobs` may be an iterator and a job a function returning it; both are drawn here, in order: the
    worker processes start first (Python, llvmlite and LLVM start up while this process builds the
    first chunk), each job is queued as soon as it is drawn and a worker takes the next queued job
    when it is done with its last. An iterator lets the caller make its chunks while the workers
    optimise the first ones (the emitter's kernels are lowered as they are drawn: emit_stream). Once
    every job is drawn, this process takes queued jobs too. A worker that cannot start or fails
    leaves its chunk to this process, so the result never depends on whether processes were available.
    """
    if workers is None:
        jobs = list(jobs)
        workers = len(jobs) - 1
    workers = max(0, workers)
    outputs: list[ChunkResult | None] = []
    resolved: list[ChunkJob] = []
    # (-cost, index) of built jobs, the costliest first (the cheap ones even out the end);
    # (inf, -1): a worker stops
    queued: queue.PriorityQueue = queue.PriorityQueue()
    processes = [_start_worker() for _ in range(workers)]

    def put(index: int) -> None:
        queued.put((-getattr(resolved[index], "cost", 1.0), index))

    # a thread per worker feeds it jobs and reads its results while this process builds the jobs
    def serve(process: subprocess.Popen) -> None:
        try:
            while (index := queued.get()[1]) >= 0:
                outputs[index] = _exchange(process, resolved[index])
                if outputs[index] is None:   # a broken worker: this process does the job, and the rest
                    put(index)
                    return
        finally:
            _close(process)

    threads = [threading.Thread(target=serve, args=(process,), daemon=True) for process in processes if process]
    for thread in threads:
        thread.start()
    try:
        for job in jobs:
            resolved.append(job() if callable(job) else job)
            outputs.append(None)
            put(len(resolved) - 1)
        while True:
            try:
                _, index = queued.get_nowait()
            except queue.Empty:
                break
            outputs[index] = optimize_chunk(resolved[index], link, parse)
    except BaseException:
        # building or optimising a chunk failed here: no worker is left waiting for a job, and no
        # thread feeding one outlives this call
        for process in processes:
            if process is not None and process.poll() is None:
                process.kill()
        raise
    finally:
        for _ in threads:
            queued.put((math.inf, -1))
        for thread in threads:
            thread.join()
    # a job a broken worker put back after this process stopped taking jobs
    return [output if output is not None else optimize_chunk(resolved[index], link, parse)
            for index, output in enumerate(outputs)]


_LENGTH = struct.Struct("<Q")


def _exchange(process: subprocess.Popen, job: ChunkJob) -> ChunkResult | None:
    """The worker's result for `job`, or None when it fails (it is then closed)."""
    try:
        payload = pickle.dumps(job, protocol=pickle.HIGHEST_PROTOCOL)
        process.stdin.write(_LENGTH.pack(len(payload)) + payload)
        process.stdin.flush()
        answer = _read_message(process.stdout)
        bitcode, object_code = pickle.loads(answer)
    except Exception:   # a dead worker, a truncated or foreign answer, or its failure: the parent compiles the chunk
        _close(process, kill=True)
        return None
    return ChunkResult(bitcode, object_code)


def _read_message(stream) -> bytes:
    header = stream.read(_LENGTH.size)
    if len(header) != _LENGTH.size:
        raise EOFError("the worker closed its output")
    (length,) = _LENGTH.unpack(header)
    payload = stream.read(length)
    if len(payload) != length:
        raise EOFError("the worker's answer is truncated")
    return payload


def _close(process: subprocess.Popen, kill: bool = False) -> None:
    try:
        if kill and process.poll() is None:
            process.kill()
        process.stdin.close()
    except OSError:
        pass
    process.wait()
    process.stdout.close()


def _start_worker() -> subprocess.Popen | None:
    try:
        return subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    except OSError:
        return None


def object_linker() -> str | None:
    """The linker that merges chunk objects (`ld -r`), or None: then the parent emits one object itself."""
    return shutil.which("ld")


def merge_objects(objects: list[bytes], linker: str | None = None) -> bytes | None:
    """One relocatable object holding every chunk's code (`ld -r`), or None when it cannot be made.

    Symbols one chunk declares and another defines (the thread-count global) are resolved by
    the merge. Each chunk's local symbols get a suffix naming the chunk first (`_rename_locals`):
    chunks reuse local names for different things (constant pools `.LCPI12_3`, a kernel's static
    scratch), and MCJIT's loader resolves relocations to local symbols by name, so two locals of
    one name would share one address (wrong constants, kernels sharing scratch memory).
    """
    if len(objects) == 1:
        return objects[0]
    linker = linker or object_linker()
    if linker is None:
        return None
    renamed = [objects[0], *(_rename_locals(code, f".chunk{index}") for index, code in enumerate(objects) if index)]
    if any(code is None for code in renamed):
        return None
    objects = renamed
    with tempfile.TemporaryDirectory(prefix="tensorkiln-chunks-") as scratch:
        paths = []
        for index, code in enumerate(objects):
            paths.append(os.path.join(scratch, f"chunk{index}.o"))
            with open(paths[-1], "wb") as handle:
                handle.write(code)
        merged = os.path.join(scratch, "module.o")
        try:
            result = subprocess.run([linker, "-r", "-o", merged, *paths], capture_output=True)
        except OSError:
            return None
        if result.returncode != 0 or not os.path.exists(merged):
            return None
        with open(merged, "rb") as handle:
            return handle.read()


_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")   # Elf64_Shdr
_SYMBOL = struct.Struct("<IBBHQQ")                # Elf64_Sym
_SHT_SYMTAB, _STB_LOCAL, _STT_SECTION, _STT_FILE = 2, 0, 3, 4


def _rename_locals(code: bytes, suffix: str) -> bytes | None:
    """`code` (a little-endian ELF64 relocatable object) with `suffix` added to every named local
    symbol, or None for another format. The new names go into a copy of the symbol string table
    appended at the end of the file (the old names stay a prefix of it: section names may share
    the table), so no other section moves."""
    if code[:4] != b"\x7fELF" or code[4] != 2 or code[5] != 1:
        return None
    data = bytearray(code)
    (section_table,) = struct.unpack_from("<Q", data, 0x28)
    entry_size, count = struct.unpack_from("<HH", data, 0x3A)
    headers = [list(_SECTION_HEADER.unpack_from(data, section_table + index * entry_size)) for index in range(count)]
    symtabs = [index for index, header in enumerate(headers) if header[1] == _SHT_SYMTAB]
    if len(symtabs) != 1:
        return None
    symtab = headers[symtabs[0]]
    strtab_index = symtab[6]
    strtab = headers[strtab_index]
    strings = bytearray(data[strtab[4]:strtab[4] + strtab[5]])
    for offset in range(symtab[4], symtab[4] + symtab[5], _SYMBOL.size):
        name, info, other, shndx, value, size = _SYMBOL.unpack_from(data, offset)
        if name == 0 or info >> 4 != _STB_LOCAL or info & 0xF in (_STT_SECTION, _STT_FILE):
            continue
        end = strings.index(b"\0", name)
        new_name = len(strings)
        strings += strings[name:end] + suffix.encode() + b"\0"
        _SYMBOL.pack_into(data, offset, new_name, info, other, shndx, value, size)
    strtab[4], strtab[5] = len(data), len(strings)
    _SECTION_HEADER.pack_into(data, section_table + strtab_index * entry_size, *strtab)
    return bytes(data + strings)


def _worker_main() -> None:
    """Optimise length-prefixed pickled jobs from stdin until it closes, answering each on stdout."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    source, sink = sys.stdin.buffer, sys.stdout.buffer
    while True:
        try:
            job = pickle.loads(_read_message(source))
        except EOFError:
            return
        result = optimize_chunk(job)
        # plain bytes, not a ChunkResult: this module runs as __main__ here, and the parent could not
        # unpickle a class of this process's __main__
        answer = pickle.dumps((result.bitcode, result.object_code), protocol=pickle.HIGHEST_PROTOCOL)
        sink.write(_LENGTH.pack(len(answer)) + answer)
        sink.flush()


if __name__ == "__main__":
    _worker_main()
