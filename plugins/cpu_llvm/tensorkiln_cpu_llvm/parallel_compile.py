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

The parent optimises a chunk of its own while the workers run. `optimize_chunks` takes
the chunks as functions building them: the workers start first and each gets its chunk as
soon as it is written, and the parent writes its own chunk last, while they optimise theirs
(`chunk_sizes` gives the parent a smaller share for that reason).

Workers are started per compile (about 0.1 s of CPU each) and only for modules large
enough to repay it. TENSORKILN_COMPILE_JOBS sets the number of processes (1: serial);
by default it is the CPUs this process may use, and 1 inside a child process (a tuning
builder pool already fills the machine).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from dataclasses import dataclass
from typing import Callable, Union

import llvmlite.binding as llvm

from .llvm_passes import link_intrinsic_sources, optimize

__all__ = ["ChunkJob", "ChunkResult", "compile_jobs", "chunk_sizes", "optimize_chunk", "optimize_chunks",
           "merge_objects", "object_linker", "JOBS_ENV", "MIN_PARALLEL_KERNELS", "PARENT_SHARE"]

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


@dataclass(frozen=True)
class ChunkResult:
    """What a chunk comes back as: optimised bitcode, and its object code when the job asked for it."""

    bitcode: bytes
    object_code: bytes | None = None


PARENT_SHARE = 0.9
"""The parent's chunk holds PARENT_SHARE / jobs of the kernels: it writes its chunk's LLVM IR while the
workers optimise theirs (about a quarter of what LLVM then spends on the chunk), so an equal share
would leave the workers done and the parent still busy."""


def chunk_sizes(kernel_count: int, jobs: int) -> list[int]:
    """Kernels per chunk, the parent's (chunk 0) first; they add up to `kernel_count`."""
    if jobs <= 1:
        return [kernel_count]
    parent = max(1, round(kernel_count * PARENT_SHARE / jobs))
    rest, extra = divmod(kernel_count - parent, jobs - 1)
    return [parent] + [rest + (1 if index < extra else 0) for index in range(jobs - 1)]


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
        optimize(module, machine, job.opt_level)
    object_code = bytes(machine.emit_object(module)) if job.emit_object else None
    return ChunkResult(module.as_bitcode(), object_code)


def optimize_chunks(jobs: list[Union[ChunkJob, Callable[[], ChunkJob]]],
                    link: Callable[[llvm.ModuleRef, dict], None] = link_intrinsic_sources,
                    parse: Callable[[str], llvm.ModuleRef] = _plain_parse) -> list[ChunkResult]:
    """Results of every chunk: all but the first in worker processes, the first in this one meanwhile.

    A job may be a function returning it, called when its chunk is due: the worker processes start
    first (Python, llvmlite and LLVM start up while the parent writes the chunks' IR), each gets
    its job as soon as it is built, and the parent's own chunk (jobs[0]) is built last, while the
    workers optimise theirs. A worker that cannot start or fails has its chunk optimised here
    instead, so the result never depends on whether processes were available.
    """
    outputs: list[ChunkResult | None] = [None] * len(jobs)
    resolved: list[ChunkJob | None] = [None] * len(jobs)
    processes = [_start_worker() for _ in jobs[1:]]

    # a thread per worker feeds its job and drains its result while this process works on:
    # a worker blocked on a full pipe would otherwise wait for the parent
    def run_worker(index: int, process: subprocess.Popen) -> None:
        try:
            output, _ = process.communicate(pickle.dumps(resolved[index], protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return
        if process.returncode == 0 and output:
            try:
                bitcode, object_code = pickle.loads(output)
            except Exception:   # a truncated or foreign answer: the parent compiles the chunk
                return
            outputs[index] = ChunkResult(bitcode, object_code)

    threads = []
    try:
        for index in range(1, len(jobs)):
            resolved[index] = jobs[index]() if callable(jobs[index]) else jobs[index]
            process = processes[index - 1]
            if process is not None:
                threads.append(threading.Thread(target=run_worker, args=(index, process), daemon=True))
                threads[-1].start()
        resolved[0] = jobs[0]() if callable(jobs[0]) else jobs[0]
        results = [optimize_chunk(resolved[0], link, parse)]
    except BaseException:
        # building or optimising a chunk failed here: no worker is left waiting for a job
        for process in processes:
            if process is not None and process.poll() is None:
                process.kill()
        raise
    for thread in threads:
        thread.join()
    for index in range(1, len(jobs)):
        results.append(outputs[index] if outputs[index] is not None else optimize_chunk(resolved[index], link, parse))
    return results


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
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    job = pickle.loads(sys.stdin.buffer.read())
    result = optimize_chunk(job)
    # plain bytes, not a ChunkResult: this module runs as __main__ here, and the parent could not
    # unpickle a class of this process's __main__
    sys.stdout.buffer.write(pickle.dumps((result.bitcode, result.object_code), protocol=pickle.HIGHEST_PROTOCOL))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _worker_main()
