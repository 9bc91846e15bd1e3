"""csim.py: the C-simulation device: HLS C++ built with g++ into a shared library, run through ctypes.

    module = CSimLoader().load(artifact, target)      # g++ once per distinct source (cached)
    module.get_function("dense")(a, b, c)             # numpy float32 in, quantised results out

The library holds the kernels as the emitter wrote them, a generated float<->fixed bridge
per kernel (`<symbol>_csim`: converts each float tensor to its ap_fixed / ap_int type
with the type's rounding and saturation, calls the kernel, converts written tensors
back, and turns a C++ exception, such as a stream error, into a message), and the SDK's
packed wrappers. Libraries are cached by the SHA-256 of their source, flags and headers
under $TENSORKILN_FPGA_CACHE (default ~/.cache/tensorkiln/fpga_hls); the headers
(tk_hls.h with ap_fixed.h) are precompiled once per flag set.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import importlib.util
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tensorkiln.ir.errors import CompileError, RuntimeLaunchError, TargetError
from tensorkiln.sdk import Artifact, NativeModule, RuntimeLoader, packed_wrappers

__all__ = ["CSimLoader", "CSimModule", "bridge_source", "build_library", "include_dirs", "cache_dir", "CXX_FLAGS",
           "precompiled_headers", "ap_types_dir"]

CXX_FLAGS = ("-O2", "-std=c++17", "-fPIC", "-pthread", "-w")
ERROR_SYMBOL = "tk_csim_error"
_INCLUDE = Path(__file__).parent / "include"
_HEADERS = ("tk_hls.h", "tk_stream.h")


def ap_types_dir() -> Path:
    """The folder of ap_int.h / ap_fixed.h (Apache-2.0) inside the hls4ml package, found without
    importing hls4ml (its import pulls in an ML stack)."""
    spec = importlib.util.find_spec("hls4ml")
    for location in (spec.submodule_search_locations or []) if spec else []:
        candidate = Path(location) / "templates" / "vivado" / "ap_types"
        if (candidate / "ap_fixed.h").exists():
            return candidate
    raise TargetError("fpga_hls: the ap_int/ap_fixed headers were not found; install them with "
                      "`pip install --no-deps hls4ml` (scripts/setup.sh does)")


def include_dirs() -> tuple[Path, Path]:
    return _INCLUDE, ap_types_dir()


def cache_dir() -> Path:
    path = Path(os.environ.get("TENSORKILN_FPGA_CACHE") or Path.home() / ".cache" / "tensorkiln" / "fpga_hls")
    path.mkdir(parents=True, exist_ok=True)
    return path


def _compiler() -> str:
    compiler = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not compiler:
        raise TargetError("fpga_hls: C-simulation needs a C++ compiler (g++); install it (apt-get install g++) "
                          "or set CXX")
    return compiler


def _run(command: list[str], what: str) -> None:
    built = subprocess.run(command, capture_output=True, text=True)
    if built.returncode != 0:
        raise CompileError(f"fpga_hls: {what} failed ({' '.join(command[:3])} ...):\n{built.stderr[-6000:]}")


def precompiled_headers(compiler: str | None = None, flags: tuple[str, ...] = CXX_FLAGS) -> Path:
    """A folder holding tk_hls.h, tk_stream.h and tk_hls.h.gch built with `flags` (once per flag set);
    put it first on the include path."""
    compiler = compiler or _compiler()
    headers = "".join((_INCLUDE / name).read_text() for name in _HEADERS)
    key = hashlib.sha256(f"{compiler}\n{flags}\n{headers}\n{ap_types_dir()}".encode()).hexdigest()[:16]
    folder = cache_dir() / f"pch-{key}"
    if (folder / "tk_hls.h.gch").exists():
        return folder
    work = Path(tempfile.mkdtemp(prefix="pch-", dir=cache_dir()))
    for name in _HEADERS:
        shutil.copy(_INCLUDE / name, work / name)
    _run([compiler, *flags, "-I", str(ap_types_dir()), "-x", "c++-header", str(work / "tk_hls.h"),
          "-o", str(work / "tk_hls.h.gch")], "precompiling tk_hls.h")
    try:
        os.replace(work, folder)
    except OSError:          # another process finished first: use theirs
        shutil.rmtree(work, ignore_errors=True)
    return folder


def build_library(source: str, flags: tuple[str, ...] = CXX_FLAGS) -> Path:
    """The shared library built from C++ `source` (cached by content hash)."""
    compiler = _compiler()
    pch = precompiled_headers(compiler, flags)
    key = hashlib.sha256(f"{compiler}\n{flags}\n{pch.name}\n{source}".encode()).hexdigest()
    library = cache_dir() / f"{key}.so"
    if library.exists():
        return library
    with tempfile.TemporaryDirectory(prefix="tk-hls-", dir=cache_dir()) as work:
        path = Path(work) / "kernels.cpp"
        path.write_text(source)
        temporary = Path(work) / "kernels.so"
        _run([compiler, *flags, "-shared", "-Winvalid-pch", "-I", str(pch), "-I", str(ap_types_dir()),
              "-o", str(temporary), str(path)], "C-simulation build")
        os.replace(temporary, library)
    return library


# --- the float <-> fixed bridge ------------------------------------------------------------

_BRIDGE_HEAD = f"""\
#include <cstring>
#include <exception>
#include <vector>
extern "C" {{ char {ERROR_SYMBOL}[2048]; }}
static void tk_csim_fail(const char* what) {{
    std::strncpy({ERROR_SYMBOL}, what, sizeof({ERROR_SYMBOL}) - 1);
}}
"""

_C_TYPES = {"bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
            "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
            "float32": "float", "float64": "double"}


def bridge_symbol(symbol: str) -> str:
    return f"{symbol}_csim"


def bridge_source(artifact: Artifact) -> str:
    """C++ of one `<symbol>_csim` function per kernel: plain C arrays in, HLS types inside."""
    parts = [_BRIDGE_HEAD]
    for kernel in artifact.kernels:
        info = artifact.metadata["kernels"][kernel.name]
        types, written = info.get("hls_types", {}), set(info.get("written", ()))
        params, before, args, after = [], [], [], []
        for param in kernel.params:
            c_type = _C_TYPES[param.dtype]
            name = f"p_{len(params)}"
            if param.kind != "buffer":
                params.append(f"{c_type} {name}")
                args.append(name)
                continue
            params.append(f"{c_type}* {name}")
            hls_type = types.get(param.name)
            if hls_type is None:
                args.append(name)
                continue
            size = 1
            for extent in param.shape:
                size *= int(extent)
            fixed = "fixed" in hls_type
            back = "to_double()" if fixed else "to_int64()"
            into = f"(double){name}[i]" if fixed else f"(int64_t){name}[i]"
            before.append(f"std::vector<{hls_type}> {name}_hls({size});")
            before.append(f"for (long i = 0; i < {size}; ++i) {name}_hls[i] = {into};")
            args.append(f"{name}_hls.data()")
            if param.name in written:
                after.append(f"for (long i = 0; i < {size}; ++i) {name}[i] = ({c_type}){name}_hls[i].{back};")
        symbol = artifact.kernel_symbol(kernel.name)
        body = [*before, f"{symbol}({', '.join(args)});", *after]
        parts.append(f'extern "C" void {bridge_symbol(symbol)}({", ".join(params) or "void"}) {{\n'
                     f"    try {{\n" + "".join(f"        {line}\n" for line in body) +
                     "    } catch (const std::exception& error) {\n        tk_csim_fail(error.what());\n"
                     "    } catch (...) {\n        tk_csim_fail(\"unknown C++ exception\");\n    }\n}\n")
    return "\n".join(parts)


def library_source(artifact: Artifact) -> str:
    """Everything the C-simulation library is built from: kernels, bridges, packed wrappers."""
    bridged = dataclasses.replace(artifact, metadata={**artifact.metadata, "kernels": {
        name: {**info, "symbol": bridge_symbol(info["symbol"])}
        for name, info in artifact.metadata["kernels"].items()}})
    return (f"{artifact.source}\n{bridge_source(artifact)}\n"
            f'extern "C" {{\n{packed_wrappers(bridged)}\n}}\n')


# --- loader and module ---------------------------------------------------------------------

class _CheckedKernel:
    """A packed kernel that raises the C++ exception message the bridge recorded."""

    def __init__(self, kernel, error: ctypes.Array) -> None:
        self._kernel, self._error = kernel, error
        self.signature = kernel.signature

    def __call__(self, *args: Any) -> None:
        self._kernel(*args)
        self._check()

    def bind(self, *args: Any):
        """The kernel bound to `args` (the graph executor's fast path), still raising a recorded
        C++ exception: the inner kernel's own bind skipped this check, so a model run whose
        dataflow deadlocked returned whatever its outputs held."""
        bound = self._kernel.bind(*args)

        def call() -> None:
            bound()
            self._check()
        return call

    def _check(self) -> None:
        if self._error.value:
            message = self._error.value.decode(errors="replace")
            ctypes.memset(self._error, 0, len(self._error))
            raise RuntimeLaunchError(f"fpga_hls C-simulation of {self.signature.name}: {message}")

    def __getattr__(self, name: str):
        return getattr(self._kernel, name)


class CSimModule(NativeModule):
    """The kernels of one artifact, running in C-simulation."""

    def __init__(self, artifact: Artifact, library: Path) -> None:
        handle = ctypes.CDLL(str(library))
        self.library_path = library
        entries = {name: f"{bridge_symbol(artifact.kernel_symbol(name))}_packed"
                   for name in (k.name for k in artifact.kernels)}
        loaded = dataclasses.replace(artifact, metadata={**artifact.metadata, "symbols": entries})

        def lookup(symbol: str) -> int:
            try:
                return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value or 0
            except AttributeError:
                return 0
        self._error = (ctypes.c_char * 2048).in_dll(handle, ERROR_SYMBOL)
        super().__init__(loaded, lookup, owner=handle)

    def get_function(self, name: str):
        return _CheckedKernel(super().get_function(name), self._error)

    def time_function(self, name: str, args, number: int, repeat: int) -> list[float]:
        """Seconds per call *on the FPGA*: the estimator's latency at the target clock, after one
        simulated call checks that the kernel runs. C-simulation's own wall time says nothing about
        the hardware, so this is what time_evaluator and the tuner see (the estimator is the cost)."""
        self.get_function(name)(*args)
        estimate = (self.artifact.metadata.get("kernels", {}).get(name) or {}).get("estimate")
        if estimate is None:
            return super().time_function(name, args, number, repeat)
        return [float(estimate["LatencySeconds"])] * repeat

    def get_source(self) -> str:
        return self.artifact.source


class CSimLoader(RuntimeLoader):
    """Loads fpga_hls artifacts on the C-simulation device (the host CPU)."""

    def load(self, artifact: Artifact, target: Any = None) -> CSimModule:
        return CSimModule(artifact, build_library(library_source(artifact)))

    def describe_device(self, target: Any = None) -> str:
        return "fpga_hls C-simulation (g++, bit-accurate ap_fixed) on the host CPU"
