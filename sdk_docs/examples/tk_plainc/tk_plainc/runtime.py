"""PlaincLoader: compile an Artifact's C source with the system compiler, load it with ctypes.

Each kernel `void NAME(float* A, ...)` gets a packed wrapper `int32_t NAME_packed(TKArg*, int32_t)`
(the native ABI of tensorkiln.sdk.native), so `NativeModule` / `NativeKernel` do the argument
checks (count, dtype, shape -> RuntimeLaunchError) before native code runs.
"""
from __future__ import annotations

import dataclasses
import ctypes
import os
import shutil
import subprocess
import tempfile

from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import Artifact, RuntimeLoader
from tensorkiln.sdk.native import ERROR_NARGS, NativeModule

_TKARG = """\
typedef struct {
  void* data; const int64_t* shape; const int64_t* strides; int32_t ndim;
  uint8_t dtype_code; uint8_t dtype_bits; uint16_t dtype_lanes;
  union { int64_t i; double f; } value;
} TKArg;
"""


def packed_wrappers(artifact: Artifact) -> str:
    """C text of one packed wrapper per kernel: buffers first, then scalars, as CSourceEmitter orders them."""
    lines = [_TKARG]
    for kernel in artifact.kernels:
        order = [i for i, p in enumerate(kernel.params) if p.kind == "buffer"]
        order += [i for i, p in enumerate(kernel.params) if p.kind != "buffer"]
        values = []
        for i in order:
            param = kernel.params[i]
            if param.kind == "buffer":
                values.append(f"args[{i}].data")
            else:
                values.append(f"args[{i}].value.{'f' if param.dtype.startswith('float') else 'i'}")
        lines.append(f"int32_t {kernel.name}_packed(TKArg* args, int32_t nargs) {{\n"
                     f"  if (nargs != {len(kernel.params)}) return {ERROR_NARGS};\n"
                     f"  {kernel.name}({', '.join(values)});\n  return 0;\n}}\n")
    return "\n".join(lines)


class PlaincLoader(RuntimeLoader):
    """Host memory (numpy arrays) and kernels built by `cc` into a shared library."""

    compiler = os.environ.get("CC", "cc")
    flags = ("-O2", "-std=c99", "-shared", "-fPIC")

    def describe_device(self) -> str:
        return f"host CPU, kernels built with {shutil.which(self.compiler) or self.compiler}"

    def load(self, artifact: Artifact, target=None) -> NativeModule:
        directory = tempfile.mkdtemp(prefix="plainc-")
        source, library = os.path.join(directory, "kernels.c"), os.path.join(directory, "kernels.so")
        with open(source, "w") as file:
            file.write(artifact.source + "\n" + packed_wrappers(artifact))
        built = subprocess.run([self.compiler, *self.flags, "-o", library, source, "-lm"],
                               capture_output=True, text=True)
        if built.returncode != 0:
            raise CompileError(f"plainc: {self.compiler} failed for kernels "
                               f"{[k.name for k in artifact.kernels]}:\n{built.stderr}")
        handle = ctypes.CDLL(library)
        symbols = {k.name: f"{k.name}_packed" for k in artifact.kernels}
        artifact = dataclasses.replace(artifact, metadata={**artifact.metadata, "symbols": symbols})

        def lookup(symbol: str) -> int:
            try:
                return ctypes.cast(getattr(handle, symbol), ctypes.c_void_p).value or 0
            except AttributeError:
                return 0

        return NativeModule(artifact, lookup, owner=(handle, directory))
