"""thread_pool.py: builds and loads the thread pool that runs cpu_llvm's parallel regions (thread_pool.c).

Kernels call `tk_parallel(task, closure, threads)` and `tk_team_size()` (cgutils.run_parallel).
The pool is C compiled once per machine with the system C compiler (`cc -O2 -shared -pthread`),
into $TENSORKILN_CACHE_DIR/runtime (else ~/.cache/tensorkiln/runtime), named by a digest of the
source and the compiler, and loaded into the process for MCJIT's kernels; exported libraries
compile the same source into themselves (runtime.link_shared_library), so a deployed package
needs no compiler.

Without a C compiler, or with TENSORKILN_THREAD_POOL=libgomp, the JIT gets the same two functions
over libgomp (`GOMP_parallel`, `omp_get_num_threads`), compiled by MCJIT: correct, since every task
claims its work until none is left, but a region then waits for every team thread, as before the
pool. `backend()` says which one the process uses.
"""
from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import llvmlite.binding as llvm
import llvmlite.ir as ir

from tensorkiln.ir.errors import CompileError

__all__ = ["SOURCE", "FUNCTIONS", "compiler", "pool_library", "load_into_process", "backend", "pool_counts",
           "AFFINITY_MODES", "BACKEND_ENV"]

SOURCE = Path(__file__).with_name("thread_pool.c")
FUNCTIONS = ("tk_parallel", "tk_team_size")
AFFINITY_MODES = {"none": 0, "close": 1, "spread": 2}
BACKEND_ENV = "TENSORKILN_THREAD_POOL"
"""'pool' (the default) or 'libgomp': what runs parallel regions in this process (read once, at the first load)."""
COMPILE_FLAGS = ("-O2", "-std=gnu11", "-fPIC", "-pthread")


def compiler() -> str | None:
    """The C compiler driver: $CC, else cc, gcc or clang on PATH; None when there is none."""
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def _cache_folder() -> Path:
    root = os.environ.get("TENSORKILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tensorkiln")
    return Path(root) / "runtime"


@functools.cache
def pool_library() -> str | None:
    """The built pool library's path (built on first use), or None without a C compiler or a writable cache."""
    driver = compiler()
    if driver is None:
        return None
    source = SOURCE.read_bytes()
    digest = hashlib.sha256(source + driver.encode() + " ".join(COMPILE_FLAGS).encode()).hexdigest()[:16]
    for folder in (_cache_folder(), Path(tempfile.gettempdir()) / f"tensorkiln-runtime-{os.getuid()}"):
        path = folder / f"tk_thread_pool_{digest}.so"
        if path.exists():
            return str(path)
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryDirectory(dir=folder) as scratch:
                built = Path(scratch) / path.name
                result = subprocess.run([driver, *COMPILE_FLAGS, "-shared", "-o", str(built), str(SOURCE)],
                                        capture_output=True, text=True)
                if result.returncode != 0:
                    raise CompileError(f"cpu_llvm: building its thread pool ({SOURCE.name}) with {driver} failed:\n"
                                       f"{result.stderr}")
                os.replace(built, path)   # atomic: concurrent processes build the same bytes
            return str(path)
        except OSError:
            continue
    return None


_backend: list[str] = []


def backend() -> str:
    """"pool" (thread_pool.c) or "libgomp" (no C compiler): what runs this process's parallel regions."""
    return _backend[0] if _backend else "not loaded"


@functools.cache
def load_into_process() -> str:
    """Make tk_parallel / tk_team_size resolvable for MCJIT's kernels; returns backend()."""
    wanted = os.environ.get(BACKEND_ENV, "pool").strip().lower()
    if wanted not in ("pool", "libgomp"):
        raise CompileError(f"{BACKEND_ENV}={wanted!r}: use 'pool' (thread_pool.c) or 'libgomp'")
    path = pool_library() if wanted == "pool" else None
    if path is not None:
        llvm.load_library_permanently(path)
        _set_affinity(path)
        _backend.append("pool")
    else:
        _define_over_libgomp()
        _backend.append("libgomp")
    return _backend[0]


def pool_counts() -> dict[str, int]:
    """Regions this process ran on the pool's team ("pooled"), on the caller alone while backed off from a
    loaded machine ("alone"), and how often it backed off ("backoffs"); all zero under libgomp or before
    the pool is loaded. A 2-thread run no faster than 1 thread with many "alone" regions was backed off."""
    import ctypes
    path = pool_library() if backend() == "pool" else None
    if path is None:
        return {"pooled": 0, "alone": 0, "backoffs": 0}
    counts = (ctypes.c_int64 * 3)()
    ctypes.CDLL(path).tk_pool_counts(counts)
    return {"pooled": counts[0], "alone": counts[1], "backoffs": counts[2]}


def _set_affinity(path: str) -> None:
    """TENSORKILN_THREAD_AFFINITY (close / spread / none, runtime.AFFINITY_ENV) for the pool's workers."""
    import ctypes
    wanted = os.environ.get("TENSORKILN_THREAD_AFFINITY", "").strip().lower() or "none"
    if wanted in AFFINITY_MODES:
        ctypes.CDLL(path).tk_pool_set_affinity(ctypes.c_int32(AFFINITY_MODES[wanted]))


_engines: list = []   # the fallback's engine lives as long as the process


def _define_over_libgomp() -> None:
    """tk_parallel(task, closure, threads) = GOMP_parallel(task, closure, threads, 0) and
    tk_team_size() = omp_get_num_threads(), compiled by MCJIT and registered as process symbols."""
    module = ir.Module(name="tk_thread_pool_libgomp")
    i8p, i32 = ir.IntType(8).as_pointer(), ir.IntType(32)
    gomp = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i8p, i32, i32]), "GOMP_parallel")
    team = ir.Function(module, ir.FunctionType(i32, []), "omp_get_num_threads")
    parallel = ir.Function(module, ir.FunctionType(ir.VoidType(), [i8p, i8p, i32]), "tk_parallel")
    builder = ir.IRBuilder(parallel.append_basic_block("entry"))
    builder.call(gomp, [*parallel.args, i32(0)])
    builder.ret_void()
    size = ir.Function(module, ir.FunctionType(i32, []), "tk_team_size")
    builder = ir.IRBuilder(size.append_basic_block("entry"))
    builder.ret(builder.call(team, []))
    from .host import MachineConfig, new_target_machine
    parsed = llvm.parse_assembly(str(module))
    parsed.verify()
    machine = new_target_machine(MachineConfig(triple=llvm.get_process_triple(), cpu=llvm.get_host_cpu_name(),
                                               features="", opt_level=2, num_threads=0))
    engine = llvm.create_mcjit_compiler(parsed, machine)
    engine.finalize_object()
    for name in FUNCTIONS:
        llvm.add_symbol(name, engine.get_function_address(name))
    _engines.append(engine)
