"""parallel_compile.py: LLVM optimisation of a large module in several processes.

LLVM's O3 pipeline is most of a cold compile (densenet121: two thirds), it runs one
function at a time, and llvmlite serialises every call into LLVM behind one lock, so
threads cannot share the work. The emitter therefore splits a module's kernels into
chunks, builds each chunk as its own LLVM module, and optimises the chunks in worker
processes (`python -m tensorkiln_cpu_llvm.parallel_compile`, which imports llvmlite only:
never the user's main script, as multiprocessing's spawn would). Each worker returns
bitcode; the parent links the chunks into one module and emits one object, so the
artifact is what a serial compile makes.

Workers are started per compile (about 0.1 s of CPU each) and only for modules large
enough to repay it. TENSORKILN_COMPILE_JOBS sets the number of processes (1: serial);
by default it is the CPUs this process may use, and 1 inside a child process (a tuning
builder pool already fills the machine).
"""
from __future__ import annotations

import multiprocessing
import os
import pickle
import subprocess
import sys
import threading
from dataclasses import dataclass
from typing import Callable

import llvmlite.binding as llvm

from .llvm_passes import link_intrinsic_sources, optimize

__all__ = ["ChunkJob", "compile_jobs", "optimize_chunks", "JOBS_ENV", "MIN_PARALLEL_KERNELS"]

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


def optimize_chunk(job: ChunkJob, link: Callable[[llvm.ModuleRef, dict], None] = link_intrinsic_sources) -> bytes:
    """Parse, link the intrinsics' source, optimise: the chunk's bitcode. Runs in a worker or in the parent."""
    module = llvm.parse_assembly(job.text)
    module.verify()
    link(module, dict(job.intrinsic_sources))
    if job.opt_level:
        machine = llvm.Target.from_triple(job.triple).create_target_machine(
            cpu=job.cpu, features=job.features, opt=job.opt_level, reloc="pic", codemodel="default")
        optimize(module, machine, job.opt_level)
    return module.as_bitcode()


def optimize_chunks(jobs: list[ChunkJob], link: Callable[[llvm.ModuleRef, dict], None] = link_intrinsic_sources
                    ) -> list[bytes]:
    """Bitcode of every chunk: all but the first in worker processes, the first in this one meanwhile.

    A worker that cannot start or fails has its chunk optimised here instead, so the
    result never depends on whether processes were available.
    """
    # a thread per worker feeds its job and drains its bitcode while this process optimises chunk 0:
    # a worker blocked on a full pipe would otherwise wait for the parent
    outputs: list[bytes | None] = [None] * len(jobs)

    def run_worker(index: int) -> None:
        try:
            process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            output, _ = process.communicate(pickle.dumps(jobs[index], protocol=pickle.HIGHEST_PROTOCOL))
        except OSError:
            return
        if process.returncode == 0 and output:
            outputs[index] = output

    threads = [threading.Thread(target=run_worker, args=(index,), daemon=True) for index in range(1, len(jobs))]
    for thread in threads:
        thread.start()
    results = [optimize_chunk(jobs[0], link)]
    for thread in threads:
        thread.join()
    for index in range(1, len(jobs)):
        results.append(outputs[index] if outputs[index] is not None else optimize_chunk(jobs[index], link))
    return results


def _worker_main() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    job = pickle.loads(sys.stdin.buffer.read())
    sys.stdout.buffer.write(optimize_chunk(job))
    sys.stdout.buffer.flush()


if __name__ == "__main__":
    _worker_main()
