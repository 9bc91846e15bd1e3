"""runtime.py: The cpu_llvm runtime loader: object code -> MCJIT in this process, or -> a shared library.

`LLVMLoader.load(artifact, target)` adds the artifact's object code to an MCJIT
engine (no second compile) after making libgomp, libm and the intrinsics'
extern libraries visible, and returns a `JITModule` whose kernels take numpy
arrays (see `tensorkiln.sdk.native`). `JITModule.export_library(path)` links the
same object into a shared library with the system C compiler; it loads again
with `tensorkiln.runtime.load_module(path)`, which needs no llvmlite.
"""
from __future__ import annotations

import ctypes.util
import functools
import os
import shutil
import subprocess
import tempfile

import llvmlite.binding as llvm

from tensorkiln.ir.errors import ArtifactError, CompileError
from tensorkiln.sdk import Artifact, RuntimeLoader, check_elf
from tensorkiln.sdk.native import NativeModule

from . import thread_pool
from .host import machine_config, new_target_machine, target_machine

__all__ = ["LLVMLoader", "JITModule", "link_shared_library", "RUNTIME_LIBRARIES", "AFFINITY_ENV"]

RUNTIME_LIBRARIES = ("gomp", "m")
"""Linked into every exported library: libm for the math calls, libgomp for the thread count
(omp_get_max_threads: OMP_NUM_THREADS, else the cores); parallel regions run on thread_pool.c."""
_JIT_LIBRARIES = (*RUNTIME_LIBRARIES, "gcc_s")
"""The JIT also needs libgcc_s for float16 conversions (__truncdfhf2); `cc` links it by itself."""


AFFINITY_ENV = "TENSORKILN_THREAD_AFFINITY"
AFFINITIES = {"close": "close", "spread": "spread", "none": "false"}
"""Thread placement of parallel loops: TENSORKILN_THREAD_AFFINITY=close (threads pinned to neighbouring
cores), spread (pinned as far apart as possible) or none (the OS moves them; the default). libgomp reads
OMP_PROC_BIND / OMP_PLACES once, when it loads: the setting is applied then, unless OMP_PROC_BIND is
already set. The thread count is the -num_threads target option or tensorkiln.runtime.set_num_threads."""


def _apply_affinity() -> None:
    wanted = os.environ.get(AFFINITY_ENV, "").strip().lower()
    if not wanted:
        return
    if wanted not in AFFINITIES:
        raise CompileError(f"{AFFINITY_ENV}={wanted!r}: use one of {sorted(AFFINITIES)}")
    if "OMP_PROC_BIND" not in os.environ:
        os.environ["OMP_PROC_BIND"] = AFFINITIES[wanted]
        if wanted != "none":
            os.environ.setdefault("OMP_PLACES", "cores")


SPIN_COUNT = "1000"
"""libgomp's GOMP_SPINCOUNT unless the user sets it or OMP_WAIT_POLICY: how long an idle team thread
spins before it sleeps. libgomp's default (300,000 spins, ~0.3 ms) is right on an idle machine but
ruinous on a shared one: a spinning thread takes the core its team-mate needs. Measured on 2 cores,
squeezenet at 2 threads: idle 2.8 ms (default) vs 3.1 ms (1000); beside one busy process 25-330 ms
(default) vs 10.7 ms (1000). OMP_WAIT_POLICY=passive (never spin) keeps 2 threads at the 1-thread time
when loaded but loses the 2-thread gain on an idle machine."""


def _apply_spin_count() -> None:
    if "GOMP_SPINCOUNT" not in os.environ and "OMP_WAIT_POLICY" not in os.environ:
        os.environ["GOMP_SPINCOUNT"] = SPIN_COUNT


@functools.cache
def _load_runtime_libraries() -> None:
    _apply_affinity()
    _apply_spin_count()
    for name in _JIT_LIBRARIES:
        path = ctypes.util.find_library(name) or f"lib{name}.so.1"
        try:
            llvm.load_library_permanently(path)
        except RuntimeError as error:
            raise CompileError(f"cpu_llvm needs lib{name} at run time ({path}): {error}; "
                               f"install it (e.g. apt-get install lib{name}1)") from None
    thread_pool.load_into_process()   # tk_parallel / tk_team_size, after libgomp (its fallback)


@functools.cache
def _load_extern_library(path: str) -> None:
    try:
        llvm.load_library_permanently(path)
    except RuntimeError as error:
        raise CompileError(f"cpu_llvm: cannot load intrinsic library {path!r}: {error}") from None


def link_shared_library(object_code: bytes, path: str, libraries=(), extra_objects=()) -> None:
    """Link `object_code` (and `extra_objects`, more object code) into the shared library `path` with `cc -shared`."""
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        raise CompileError("export_library needs a C compiler driver (cc, gcc or clang) on PATH to link "
                           "the shared library")
    with tempfile.TemporaryDirectory(prefix="tensorkiln-") as scratch:
        object_path = os.path.join(scratch, "module.o")
        with open(object_path, "wb") as handle:
            handle.write(object_code)
        objects = [object_path]
        for number, extra in enumerate(extra_objects):
            objects.append(os.path.join(scratch, f"extra{number}.o"))
            with open(objects[-1], "wb") as handle:
                handle.write(extra)
        extern = []
        for library in libraries:
            extern += [library, f"-Wl,-rpath,{os.path.dirname(os.path.abspath(library))}"]
        # the thread pool the kernels' parallel regions call, compiled into the library
        command = [compiler, *thread_pool.COMPILE_FLAGS, "-shared", "-o", os.fspath(path), *objects,
                   str(thread_pool.SOURCE), *extern, *(f"-l{name}" for name in RUNTIME_LIBRARIES)]
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise CompileError(f"linking {path} failed ({' '.join(command)}):\n{result.stderr}")


class JITModule(NativeModule):
    """Kernels compiled into this process by MCJIT; exportable as a shared library."""

    rendered_views = ("asm",)
    plan_entry_control_flow = True   # plan_entry_control.py
    plan_entry_index_checks = True

    def __init__(self, artifact: Artifact, engine: llvm.ExecutionEngine, target=None) -> None:
        def lookup(symbol: str) -> int:
            return engine.get_global_value_address(symbol) or engine.get_function_address(symbol)
        super().__init__(artifact, lookup, engine)
        self.engine = engine
        self.target = target

    def render_source(self, fmt: str) -> str | None:
        """The assembly of the artifact's optimized IR ("asm"), made on request (not at compile time)."""
        if fmt != "asm" or self.target is None:
            return None
        return target_machine(machine_config(self.target)).emit_assembly(llvm.parse_assembly(self.artifact.source))

    def build_plan_entry(self, spec):
        """One native function running every step of `spec` (plan_entry.py): the executor's run is one call."""
        if self.target is None:
            return None
        from .plan_entry import build_plan_entry
        return build_plan_entry(self, spec)

    def export_library(self, path: str, plan_entry=None) -> None:
        """Write a shared library that `tensorkiln.runtime.load_module(path)` loads without llvmlite.

        `plan_entry` (a PlanEntrySpec): also link the whole-plan entry of a model's plan (plan_entry.py),
        which the library's NativeModule then offers to the graph executor."""
        extra = ()
        if plan_entry is not None and self.target is not None:
            from .plan_entry import entry_object
            extra = (entry_object(self.artifact, plan_entry, self.target),)
        link_shared_library(self.artifact.binary, path, self.artifact.metadata.get("libraries", ()), extra)


class LLVMLoader(RuntimeLoader):
    """Loads cpu_llvm artifacts (format "llvm-ir" with object code) into this process."""

    def load(self, artifact: Artifact, target) -> JITModule:
        if artifact.format != "llvm-ir" or not artifact.binary:
            raise ArtifactError(f"cpu_llvm loads artifacts of format 'llvm-ir' with object code, got "
                                f"{artifact.format!r}{'' if artifact.binary else ' without object code'}")
        # bytes from a package reach the JIT linker only as a sound ELF object for this host
        check_elf(artifact.binary, f"cpu_llvm object code for {target}")
        _load_runtime_libraries()
        for library in artifact.metadata.get("libraries", ()):
            _load_extern_library(library)
        machine = new_target_machine(machine_config(target))  # owned by the engine
        engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), machine)
        engine.add_object_file(llvm.ObjectFileRef.from_data(artifact.binary))
        engine.finalize_object()
        return JITModule(artifact, engine, target)
