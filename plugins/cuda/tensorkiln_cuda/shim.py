"""shim.py: run an emitted cuda-c Artifact on the CPU through shim.h (g++ -std=c++20 + ctypes).

    module = build_shim_module(artifact)            # a tensorkiln.sdk.NativeModule
    module.get_function("add")(a, b, c)              # numpy in, numpy out

Each kernel gets a C++ launcher `SYMBOL_tk_launch(...)` that runs it over the grid and
block the emitter recorded (`tk_shim::launch`), and the SDK's packed wrapper around that
launcher (`tensorkiln.sdk.native_c`), so arguments are checked exactly as on the C targets.
`tsan_report(artifact)` builds the same source with -fsanitize=thread into a program that
launches every kernel once on zero-filled buffers, and returns ThreadSanitizer's report.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Sequence

from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.ir.errors import CompileError
from tensorkiln.sdk import Artifact, launch_geometry
from tensorkiln.sdk.native_c import build_native_module

__all__ = ["SHIM_HEADER", "build_shim_module", "shim_source", "tsan_report", "shim_compiler", "needs_threads"]

SHIM_HEADER = str(Path(__file__).with_name("shim.h"))
FLAGS = ("-O2", "-std=c++20", "-shared", "-fPIC", "-pthread", "-fno-strict-aliasing", "-w")
LAUNCH_SUFFIX = "_tk_launch"


def shim_compiler() -> str | None:
    """The C++ compiler the shim uses (CXX, else g++), or None when there is none."""
    compiler = os.environ.get("CXX", "g++")
    return shutil.which(compiler)


def _kernel_text(source: str, symbol: str) -> str:
    """The text of kernel `symbol` (from its header to the next kernel), to see what it uses."""
    start = source.find(f" {symbol}(")
    end = source.find('extern "C" __global__', start + 1)
    return source[start:end if end >= 0 else len(source)]


def needs_threads(source: str, symbol: str) -> bool:
    """Whether a kernel needs its threads to run at once: it has a barrier, shared memory or a warp-level
    (wmma, shuffle) call. Other kernels cannot see another thread's work: running their threads one by one is the same."""
    text = _kernel_text(source, symbol)
    return any(word in text for word in ("__syncthreads", "__shared__", "TK_DYNAMIC_SHARED", "wmma", "__shfl"))


def _launcher(artifact: Artifact, emitter, name: str) -> tuple[str, str]:
    """(launcher symbol, C++ text of the launcher of kernel `name`)."""
    signature = artifact.kernel(name)
    symbol = artifact.kernel_symbol(name)
    info = artifact.metadata.get("kernels", {}).get(name, {})
    geometry = launch_geometry(artifact, name)
    params, args = [], []
    for index, param in enumerate(signature.params):
        if param.kind == "buffer":
            params.append(f"{emitter.storage_type_name(param.dtype)}* p{index}")
        else:
            params.append(f"{emitter.type_name(param.dtype)} p{index}")
        args.append(f"p{index}")
    grid = ", ".join(str(x) for x in geometry.grid)
    block = ", ".join(str(x) for x in geometry.block)
    threaded = "true" if needs_threads(artifact.source, symbol) else "false"
    launcher = f"{symbol}{LAUNCH_SUFFIX}"
    text = (f'extern "C" void {launcher}({", ".join(params) or "void"}) {{\n'
            f"  tk_shim::launch(dim3{{{grid}}}, dim3{{{block}}}, {int(info.get('dynamic_shared_bytes', 0))}, "
            f"{threaded}, [&] {{ {symbol}({', '.join(args)}); }});\n}}")
    return launcher, text


def precompiled_header(compiler: str, flags: Sequence[str]) -> str:
    """A copy of shim.h next to its precompiled form (.gch) for these flags, in the compile cache;
    including it saves most of g++'s time per module (the C++20 thread headers). Falls back to
    shim.h itself when the cache cannot be written."""
    from .nvrtc import cache_dir
    text = Path(SHIM_HEADER).read_text()
    version = subprocess.run([compiler, "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256("\0".join([text, version, *flags]).encode()).hexdigest()[:24]
    folder = cache_dir() / f"shim-{key}"
    header = folder / "tk_cuda_shim.h"
    if (folder / "tk_cuda_shim.h.gch").exists():
        return str(header)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        header.write_text(text)
        temporary = folder / f"tk_cuda_shim.h.gch.{os.getpid()}"
        pch_flags = [f for f in flags if f != "-shared"]
        built = subprocess.run([compiler, *pch_flags, "-x", "c++-header", str(header), "-o", str(temporary)],
                               capture_output=True, text=True)
        if built.returncode != 0:
            return SHIM_HEADER
        os.replace(temporary, folder / "tk_cuda_shim.h.gch")
    except OSError:
        return SHIM_HEADER
    return str(header)


def shim_source(artifact: Artifact, emitter, header: str = SHIM_HEADER) -> Artifact:
    """`artifact` with launchers appended and its kernel symbols pointing at them."""
    if artifact.format != "cuda-c":
        raise CompileError(f"the cuda CPU shim runs 'cuda-c' artifacts, got {artifact.format!r}")
    kernels = dict(artifact.metadata.get("kernels", {}))
    texts = [f'#include "{header}"', artifact.source]
    for signature in artifact.kernels:
        launcher, text = _launcher(artifact, emitter, signature.name)
        texts.append(text)
        kernels[signature.name] = {**kernels.get(signature.name, {}), "symbol": launcher}
    return dataclasses.replace(artifact, source="\n".join(texts), metadata={**artifact.metadata, "kernels": kernels})


def build_shim_module(artifact: Artifact, emitter, flags: Sequence[str] = FLAGS):
    """Compile the artifact with shim.h and load it; CompileError with g++'s messages on failure."""
    compiler = shim_compiler()
    if compiler is None:
        raise CompileError("cuda -device=cpu_shim needs a C++20 compiler (g++ >= 11) on PATH, or CXX set")
    shimmed = shim_source(artifact, emitter, precompiled_header(compiler, flags))
    from .nvrtc import cache_dir
    module = build_native_module(shimmed, compiler=compiler, flags=flags, libraries=("-lm",),
                                 label="cuda-cpu_shim", emitter=emitter, cache_dir=cache_dir() / "shim-libraries")
    # the module shows the CUDA source; only the packed entry points come from the shimmed build
    module.artifact = dataclasses.replace(
        artifact, metadata={**artifact.metadata, "symbols": module.artifact.metadata["symbols"]})
    return module


_TSAN_MAIN = """
#include <cstdio>
int main() {{
{body}
  std::puts("tk_tsan_done");
  return 0;
}}
"""


def tsan_report(artifact: Artifact, emitter, timeout: float = 120.0) -> str:
    """Build every kernel of `artifact` with -fsanitize=thread into a program launching each once on
    zero-filled buffers (threads at once, barriers real); returns the program's stderr."""
    compiler = shim_compiler()
    if compiler is None:
        raise CompileError("the TSan check needs g++ on PATH")
    shimmed = shim_source(artifact, emitter)
    body = []
    for signature in artifact.kernels:
        args = []
        for index, param in enumerate(signature.params):
            count = 1
            for extent in param.shape:
                count *= int(extent)
            if param.kind == "buffer":
                type_name = emitter.storage_type_name(param.dtype)
                body.append(f"  static {type_name} {signature.name}_{index}[{max(count, 1)}] = {{}};")
                args.append(f"{signature.name}_{index}")
            else:
                args.append("1" if dtype_of(param.dtype).is_int else "1.0")
        body.append(f"  {shimmed.kernel_symbol(signature.name)}({', '.join(args)});")
    program = shimmed.source + _TSAN_MAIN.format(body="\n".join(body))
    with tempfile.TemporaryDirectory(prefix="tensorkiln-cuda-tsan-") as directory:
        source, binary = os.path.join(directory, "tsan.cpp"), os.path.join(directory, "tsan")
        Path(source).write_text(program)
        built = subprocess.run([compiler, "-std=c++20", "-O1", "-g", "-fsanitize=thread", "-pthread", "-w",
                                "-o", binary, source], capture_output=True, text=True)
        if built.returncode != 0:
            raise CompileError(f"cuda TSan build failed:\n{built.stderr}")
        # setarch -R: TSan refuses the high-entropy ASLR layouts of some Linux kernels ("unexpected memory mapping")
        command = [binary]
        if shutil.which("setarch"):
            command = ["setarch", os.uname().machine, "-R", binary]
        ran = subprocess.run(command, capture_output=True, text=True, timeout=timeout,
                             env={**os.environ, "TSAN_OPTIONS": "halt_on_error=0 exitcode=66"})
        return ran.stderr + ran.stdout
