"""sdk/native_c.py: the native ABI for plugins whose emitter writes C: packed wrappers and a ready loader.

Who uses it: the runtime loader of a C-like plugin (the `tensorkiln new-plugin`
scaffold, the tutorial's plainc, a C99 + OpenMP vendor target). Its emitter
(`CSourceEmitter`) writes one `void SYMBOL(float* A, ...)` per kernel; the ABI of
`tensorkiln.sdk.native` wants `int32_t ENTRY(TKArg* args, int32_t nargs)`. This
module bridges the two:

- `packed_wrappers(artifact)` is C text: `TKARG_HEADER`, then per kernel
  `int32_t SYMBOL_packed(TKArg* args, int32_t nargs)`, which checks the argument
  count, then each argument's dtype, ndim, data pointer, shape and strides (as
  cpu_llvm's generated entry points do) and only then calls the kernel;
- `build_native_module(artifact, compiler=..., flags=...)` compiles the artifact's
  source and those wrappers with the system C compiler in a temporary folder, loads
  the library with ctypes, deletes the folder, and returns a `NativeModule` whose
  kernels check their arguments in Python first (`RuntimeLaunchError` names the
  argument).

So a C-like loader is a few lines:

    class AcmeLoader(RuntimeLoader):
        def load(self, artifact, target=None):
            return build_native_module(artifact, compiler="cc", label="acme")

Threads (sdk_docs/native_abi.md): with `num_threads=N` the wrappers also define
`int32_t tensorkiln_num_threads = N`, the global `tensorkiln.runtime.set_num_threads`
writes, and set OpenMP's thread count from it before each call, 0 meaning all cores
(`omp_get_num_procs()`); compile with `-fopenmp` and emit `#pragma omp parallel for`.
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from typing import Any, Sequence

from ..ir.dtypes import dtype_of
from ..ir.errors import CompileError
from .codegen import Artifact, KernelSignature
from .native import NUM_THREADS_SYMBOL, TKARG_HEADER, NativeModule, dtype_fields

__all__ = ["packed_symbol", "packed_wrapper", "packed_wrappers", "build_native_module", "DEFAULT_FLAGS"]

DEFAULT_FLAGS = ("-O2", "-std=c99", "-shared", "-fPIC")
"""Flags of `build_native_module` unless given: an optimized, position-independent shared library."""

_CHECKS = """\
static inline int32_t tk_abi_check_dtype(const TKArg* arg, int32_t index, uint8_t code, uint8_t bits, uint16_t lanes) {
  if (arg->dtype_code != code || arg->dtype_bits != bits || arg->dtype_lanes != lanes)
    return TK_ERROR(index, TK_FIELD_DTYPE);
  return 0;
}

static inline int32_t tk_abi_check_buffer(const TKArg* arg, int32_t index, uint8_t code, uint8_t bits,
                                          uint16_t lanes, int32_t ndim, const int64_t* shape) {
  int32_t error = tk_abi_check_dtype(arg, index, code, bits, lanes);
  if (error) return error;
  if (arg->ndim != ndim) return TK_ERROR(index, TK_FIELD_NDIM);
  if (arg->data == NULL) return TK_ERROR(index, TK_FIELD_DATA);
  for (int32_t d = 0; d < ndim; ++d)
    if (arg->shape[d] != shape[d]) return TK_ERROR(index, TK_FIELD_SHAPE + d);
  if (arg->strides != NULL) {   /* only C-contiguous arrays; a dimension of extent 1 may carry any stride */
    int64_t expected = 1;
    for (int32_t d = ndim - 1; d >= 0; --d) {
      if (shape[d] != 1 && arg->strides[d] != expected) return TK_ERROR(index, TK_FIELD_STRIDES);
      expected *= shape[d];
    }
  }
  return 0;
}

static inline int32_t tk_abi_check_scalar(const TKArg* arg, int32_t index, uint8_t code, uint8_t bits, uint16_t lanes) {
  int32_t error = tk_abi_check_dtype(arg, index, code, bits, lanes);
  if (error) return error;
  if (arg->ndim != 0) return TK_ERROR(index, TK_FIELD_NDIM);
  return 0;
}
"""

_OPENMP_THREADS = """\
#include <omp.h>
int32_t {symbol} = {count};   /* threads of parallel loops; 0 = all cores. tensorkiln.runtime.set_num_threads writes it */

static inline void tk_abi_set_threads(void) {{
  omp_set_num_threads({symbol} > 0 ? {symbol} : omp_get_num_procs());
}}
"""

_C_TYPES = {
    "bool": "uint8_t", "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t",
    "float32": "float", "float64": "double",
}


def packed_symbol(symbol: str) -> str:
    """The entry point `packed_wrapper` defines for the C function `symbol`."""
    return f"{symbol}_packed"


def _storage_type(dtype: str, emitter: Any) -> str:
    if emitter is not None:
        return emitter.storage_type_name(dtype)
    name = _C_TYPES.get(dtype)
    if name is None:
        raise CompileError(f"packed_wrapper: no C type for dtype {dtype!r}; pass the plugin's emitter")
    return name


def _scalar_value(index: int, dtype: str, emitter: Any) -> str:
    parsed = dtype_of(dtype)
    if parsed.is_bool:
        return f"(args[{index}].value.i != 0)"
    type_name = emitter.type_name(dtype) if emitter is not None else _C_TYPES[dtype]
    return f"({type_name})args[{index}].value.{'f' if parsed.is_float else 'i'}"


def packed_wrapper(kernel: KernelSignature, symbol: str | None = None, emitter: Any = None,
                   set_threads: bool = False) -> str:
    """C text of `int32_t SYMBOL_packed(TKArg* args, int32_t nargs)` for one kernel.

    It returns TK_ERROR_NARGS for a wrong count, TK_ERROR(i, field) for the first argument
    whose dtype, ndim, data pointer, shape or strides differ from `kernel`, and 0 after
    calling `symbol(...)` (default `kernel.name`) with the parameters in signature order.
    Needs `TKARG_HEADER` and the checks of `packed_wrappers` before it; `emitter` (the
    plugin's CSourceEmitter) gives the C types where they differ from C99's.
    """
    symbol = symbol or kernel.name
    lines = [f"int32_t {packed_symbol(symbol)}(TKArg* args, int32_t nargs) {{"]
    body = [f"if (nargs != {len(kernel.params)}) return TK_ERROR_NARGS;", "int32_t error;"]
    values = []
    for index, param in enumerate(kernel.params):
        code, bits, lanes = dtype_fields(param.dtype)
        if param.kind == "buffer":
            extents = ", ".join(str(int(extent)) for extent in param.shape) or "0"
            lines.append(f"  static const int64_t shape{index}[{max(1, len(param.shape))}] = {{{extents}}};")
            body.append(f"if ((error = tk_abi_check_buffer(&args[{index}], {index}, {code}, {bits}, {lanes}, "
                        f"{len(param.shape)}, shape{index}))) return error;")
            values.append(f"({_storage_type(param.dtype, emitter)}*)args[{index}].data")
        else:
            body.append(f"if ((error = tk_abi_check_scalar(&args[{index}], {index}, {code}, {bits}, {lanes}))) "
                        "return error;")
            values.append(_scalar_value(index, param.dtype, emitter))
    if set_threads:
        body.append("tk_abi_set_threads();")
    body += [f"{symbol}({', '.join(values)});", "return 0;"]
    return "\n".join([*lines, *(f"  {line}" for line in body), "}"]) + "\n"


def packed_wrappers(artifact: Artifact, emitter: Any = None, num_threads: int | None = None) -> str:
    """C text to append to `artifact.source`: the ABI header, the checks, one packed wrapper per kernel.

    Each wrapper calls the kernel by the symbol the emitter gave it (`artifact.kernel_symbol`).
    With `num_threads` (an int, 0 = all cores) it also defines `tensorkiln_num_threads` and
    sets OpenMP's thread count from it before each call: link with -fopenmp.
    """
    symbols = {artifact.kernel_symbol(k.name) for k in artifact.kernels}
    for kernel in artifact.kernels:
        entry = packed_symbol(artifact.kernel_symbol(kernel.name))
        if entry in symbols:
            raise CompileError(f"kernel {kernel.name!r}: its packed wrapper {entry!r} would clash with a kernel of "
                               "that name; rename one of them")
    parts = [TKARG_HEADER, _CHECKS]
    if num_threads is not None:
        parts.append(_OPENMP_THREADS.format(symbol=NUM_THREADS_SYMBOL, count=int(num_threads)))
    # C linkage under a C++ compiler too (a C++ dialect such as CUDA C built by g++), so ctypes finds them
    parts.append('#ifdef __cplusplus\nextern "C" {\n#endif')
    parts += [packed_wrapper(k, artifact.kernel_symbol(k.name), emitter, set_threads=num_threads is not None)
              for k in artifact.kernels]
    parts.append("#ifdef __cplusplus\n}\n#endif\n")
    return "\n".join(parts)


def build_native_module(artifact: Artifact, compiler: str = "cc", flags: Sequence[str] = DEFAULT_FLAGS,
                        libraries: Sequence[str] = ("-lm",), label: str | None = None, emitter: Any = None,
                        num_threads: int | None = None, cache_dir: str | os.PathLike | None = None) -> NativeModule:
    """Compile `artifact.source` + `packed_wrappers(...)` into a shared library and load it.

    Called by a C-like plugin's `RuntimeLoader.load`. Runs `compiler *flags -o LIB SOURCE
    *libraries` in a temporary folder that is deleted once the library is loaded (the loaded
    code stays mapped), so loading leaves no files behind. A compiler failure raises
    `CompileError` naming `label` (default: the artifact's target) and the kernels, with the
    compiler's messages. With `num_threads`, add "-fopenmp" to `flags`. With `cache_dir`,
    the library is kept there under the hash of the source, compiler, flags and libraries,
    and a later build of the same text loads it instead of compiling again.
    """
    label = label or artifact.target
    kernels = [k.name for k in artifact.kernels]
    source = f"{artifact.source}\n{packed_wrappers(artifact, emitter, num_threads)}"
    cached = _cached_library(cache_dir, source, compiler, flags, libraries)
    if cached is not None and os.path.exists(cached):
        return _load_library(artifact, cached, label, kernels)
    with tempfile.TemporaryDirectory(prefix=f"tensorkiln-{label}-") as directory:
        source_path, library_path = os.path.join(directory, "kernels.c"), os.path.join(directory, "kernels.so")
        with open(source_path, "w") as file:
            file.write(source)
        command = [compiler, *flags, "-o", library_path, source_path, *libraries]
        try:
            built = subprocess.run(command, capture_output=True, text=True)
        except FileNotFoundError:
            raise CompileError(f"{label}: C compiler {compiler!r} not found; install one or set the loader's "
                               "compiler (e.g. the CC environment variable)") from None
        if built.returncode != 0:
            raise CompileError(f"{label}: {' '.join(command[:1 + len(flags)])} failed for kernels {kernels}:\n"
                               f"{built.stderr}")
        if cached is not None:
            try:   # copy then rename: a concurrent build never loads half a library
                os.makedirs(os.path.dirname(cached), exist_ok=True)
                shutil.copyfile(library_path, f"{cached}.{os.getpid()}")
                os.replace(f"{cached}.{os.getpid()}", cached)
            except OSError:
                pass   # an unwritable cache: the library still loads from the build folder
        return _load_library(artifact, library_path, label, kernels)


def _cached_library(cache_dir, source: str, compiler: str, flags: Sequence[str],
                    libraries: Sequence[str]) -> str | None:
    if cache_dir is None:
        return None
    key = hashlib.sha256("\0".join([source, compiler, *flags, "--", *libraries]).encode()).hexdigest()
    return os.path.join(os.fspath(cache_dir), key[:2], f"{key}.so")


def _load_library(artifact: Artifact, library_path: str, label: str, kernels: list[str]) -> NativeModule:
    try:
        handle = ctypes.CDLL(library_path)
    except OSError as error:
        raise CompileError(f"{label}: the library built for kernels {kernels} does not load: {error}") from None
    entries = {name: packed_symbol(artifact.kernel_symbol(name)) for name in kernels}
    loaded = dataclasses.replace(artifact, metadata={**artifact.metadata, "symbols": entries})

    def lookup(symbol: str) -> int:
        try:
            return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value or 0
        except AttributeError:
            return 0

    return NativeModule(loaded, lookup, owner=handle)
