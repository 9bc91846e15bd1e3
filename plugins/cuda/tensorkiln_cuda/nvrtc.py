"""nvrtc.py: CUDA C -> CUBIN (or PTX) through NVRTC (cuda.bindings.nvrtc), with an on-disk cache.

    result = compile_cuda(source, "sm_90", fast_math=False)
    result.binary, result.format          # CUBIN bytes, "cubin"; PTX text and "ptx" for compute_XX
    result.resources["add"]               # {"registers": 12, "shared_bytes": 256, "spill_stores": 0, ...}

The ptxas report (`--ptxas-options=-v`, what `nvcc -Xptxas -v` prints) gives per kernel
its registers, static shared memory, stack frame and spills. A failed compile raises
CompileError with NVRTC's log and the numbered source lines it points at. Results are
cached in `cache_dir()` (TENSORKILN_CUDA_CACHE, else ~/.cache/tensorkiln/cuda) under the
hash of the source, the architecture, the NVRTC version and the options, so a model
compiles once per machine; scripts/gpu_check.sh carries a prebuilt cache to a GPU host.
`compiler="nvcc"` uses nvcc from PATH instead (same options, same report).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tensorkiln.ir.errors import CompileError

__all__ = ["CompileResult", "compile_cuda", "cache_dir", "nvrtc_version", "cached_nvrtc_version", "include_dirs", "parse_ptxas_log",
           "numbered_excerpt"]


@dataclass(frozen=True)
class CompileResult:
    binary: bytes
    format: str                      # "cubin" or "ptx"
    arch: str                        # what was passed to --gpu-architecture
    log: str = ""
    resources: dict[str, dict] = field(default_factory=dict)
    cached: bool = False


def cache_dir() -> Path:
    return Path(os.environ.get("TENSORKILN_CUDA_CACHE") or Path.home() / ".cache" / "tensorkiln" / "cuda")


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as error:   # the dependency is declared; say how to get it back
        raise CompileError(f"cuda: NVRTC is not importable ({error}); run `pip install -e plugins/cuda` "
                           "(cuda-bindings and nvidia-cuda-nvrtc)") from None
    return nvrtc


def nvrtc_version() -> str:
    try:
        _, major, minor = _nvrtc().nvrtcVersion()
    except (RuntimeError, OSError) as error:   # the bindings are there but libnvrtc is not
        raise CompileError(f"cuda: NVRTC does not load ({error}); run `pip install -e plugins/cuda`") from None
    return f"{major}.{minor}"


_VERSION_FILE = "nvrtc_version.txt"


def cached_nvrtc_version() -> str:
    """The NVRTC version in cache keys. A machine without NVRTC (a GPU host given a prebuilt cache) uses
    the version the cache was built with, recorded beside it: cached CUBINs load, anything else fails
    to compile with the reason."""
    recorded = cache_dir() / _VERSION_FILE
    try:
        version = nvrtc_version()
    except CompileError:
        if recorded.exists():
            return recorded.read_text().strip()
        raise
    try:
        if not recorded.exists():
            cache_dir().mkdir(parents=True, exist_ok=True)
            recorded.write_text(version)
    except OSError:
        pass
    return version


def include_dirs() -> list[str]:
    """Header folders of the nvidia-cuda-runtime / nvidia-cuda-crt wheels (cuda_fp16.h, mma.h, crt/)."""
    found = []
    try:
        import nvidia
        for root in nvidia.__path__:
            for candidate in sorted(Path(root).glob("cu*/include")) + sorted(Path(root).glob("cuda_runtime/include")):
                if (candidate / "cuda_fp16.h").exists() and str(candidate) not in found:
                    found.append(str(candidate))
    except ImportError:
        pass
    return found


def _options(arch: str, fast_math: bool, extra: tuple[str, ...]) -> list[str]:
    options = [f"--gpu-architecture={arch}", "-std=c++17", "--device-as-default-execution-space"]
    if arch.startswith("sm_"):
        options.append("--ptxas-options=-v")
    if fast_math:
        options.append("--use_fast_math")
    return [*options, *extra]


def compile_cuda(source: str, arch: str, fast_math: bool = False, extra_options: tuple[str, ...] = (),
                 compiler: str = "nvrtc", name: str = "kernels.cu", use_cache: bool = True) -> CompileResult:
    """Compile `source` for `arch` ("sm_90a" -> CUBIN, "compute_80" -> PTX); CompileError on failure."""
    options = _options(arch, fast_math, tuple(extra_options))
    version = cached_nvrtc_version() if compiler == "nvrtc" else _nvcc_version()
    key = hashlib.sha256("\0".join([source, arch, compiler, version, *options]).encode()).hexdigest()
    cached = _read_cache(key) if use_cache else None
    if cached is not None:
        return cached
    if compiler == "nvrtc":
        binary, log = _compile_nvrtc(source, options, name)
    elif compiler == "nvcc":
        binary, log = _compile_nvcc(source, arch, options, name)
    else:
        raise CompileError(f"cuda: unknown -compiler={compiler!r}; use nvrtc or nvcc")
    result = CompileResult(binary, "cubin" if arch.startswith("sm_") else "ptx", arch, log, parse_ptxas_log(log))
    if use_cache:
        _write_cache(key, result)
    return result


def _compile_nvrtc(source: str, options: list[str], name: str) -> tuple[bytes, str]:
    nvrtc = _nvrtc()
    options = [*options, *(f"-I{d}" for d in include_dirs())]
    error, program = nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], [])
    _check(nvrtc, error, "nvrtcCreateProgram")
    try:
        (status,) = nvrtc.nvrtcCompileProgram(program, len(options), [o.encode() for o in options])
        log = _program_log(nvrtc, program)
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"cuda: NVRTC failed ({status.name}) with options {' '.join(options[:4])}:\n"
                               f"{log.strip()}\n--- source lines it points at ---\n{numbered_excerpt(source, log)}")
        is_cubin = any(o.startswith("--gpu-architecture=sm_") for o in options)
        size_call, get_call = ((nvrtc.nvrtcGetCUBINSize, nvrtc.nvrtcGetCUBIN) if is_cubin
                               else (nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX))
        error, size = size_call(program)
        _check(nvrtc, error, size_call.__name__)
        buffer = b" " * size
        (error,) = get_call(program, buffer)
        _check(nvrtc, error, get_call.__name__)
        return (buffer if is_cubin else buffer.rstrip(b"\0")), log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _program_log(nvrtc, program) -> str:
    error, size = nvrtc.nvrtcGetProgramLogSize(program)
    buffer = b" " * size
    nvrtc.nvrtcGetProgramLog(program, buffer)
    return buffer.rstrip(b"\0").decode(errors="replace")


def _check(nvrtc, error, call: str) -> None:
    if error != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        raise CompileError(f"cuda: {call} failed: {error.name}")


def _nvcc_version() -> str:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        raise CompileError("cuda: -compiler=nvcc but nvcc is not on PATH; use the default -compiler=nvrtc")
    return subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]


def _compile_nvcc(source: str, arch: str, options: list[str], name: str) -> tuple[bytes, str]:
    kind = "-cubin" if arch.startswith("sm_") else "-ptx"
    flags = [o.replace("--ptxas-options=-v", "-Xptxas=-v") for o in options
             if not o.startswith(("--gpu-architecture", "--device-as-default"))]
    with tempfile.TemporaryDirectory(prefix="tensorkiln-nvcc-") as directory:
        path = os.path.join(directory, name)
        Path(path).write_text(source)
        out = os.path.join(directory, "out.bin")
        command = ["nvcc", kind, f"-arch={arch}", *flags, "-o", out, path]
        built = subprocess.run(command, capture_output=True, text=True)
        if built.returncode != 0:
            log = built.stderr.replace(path, name)
            raise CompileError(f"cuda: {' '.join(command[:3])} failed:\n{log.strip()}\n"
                               f"--- source lines it points at ---\n{numbered_excerpt(source, log)}")
        return Path(out).read_bytes(), built.stderr + built.stdout


# ---- the ptxas report --------------------------------------------------------------------

_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_PROPERTIES = re.compile(r"Function properties for (\w+)")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(.*)")


def parse_ptxas_log(log: str) -> dict[str, dict]:
    """{entry kernel: {"registers", "shared_bytes", "stack_bytes", "spill_stores", "spill_loads",
    "barriers"}} from a `ptxas -v` report; device functions that were not inlined are skipped."""
    entries: dict[str, dict] = {}
    current = None
    for line in log.splitlines():
        if (match := _ENTRY.search(line)):
            current = match.group(1)
            entries[current] = {"registers": 0, "shared_bytes": 0, "stack_bytes": 0, "spill_stores": 0,
                                "spill_loads": 0, "barriers": 0}
        elif (match := _PROPERTIES.search(line)):
            current = match.group(1)
        elif current in entries and (match := _FRAME.search(line)):
            entries[current].update(stack_bytes=int(match.group(1)), spill_stores=int(match.group(2)),
                                    spill_loads=int(match.group(3)))
        elif current in entries and (match := _USED.search(line)):
            rest = match.group(2)
            entries[current]["registers"] = int(match.group(1))
            if (smem := re.search(r"(\d+) bytes smem", rest)):
                entries[current]["shared_bytes"] = int(smem.group(1))
            if (barriers := re.search(r"used (\d+) barriers", rest)):
                entries[current]["barriers"] = int(barriers.group(1))
    return entries


_LOG_LINE = re.compile(r"\((\d+)\): (?:error|warning)|:(\d+):\d*:? ?(?:error|warning)")


def numbered_excerpt(source: str, log: str, context: int = 2) -> str:
    """The numbered source lines the log's messages point at ("kernels.cu(12): error ..."), with context."""
    lines = source.splitlines()
    wanted: set[int] = set()
    for match in _LOG_LINE.finditer(log):
        number = int(match.group(1) or match.group(2))
        wanted.update(range(max(1, number - context), min(len(lines), number + context) + 1))
    if not wanted:
        wanted = set(range(1, len(lines) + 1))
    out, previous = [], 0
    for number in sorted(wanted):
        if previous and number != previous + 1:
            out.append("   ...")
        out.append(f"{number:5d}  {lines[number - 1]}")
        previous = number
    return "\n".join(out)


# ---- the on-disk cache ------------------------------------------------------------------


def _read_cache(key: str) -> CompileResult | None:
    folder = cache_dir() / key[:2]
    meta, payload = folder / f"{key}.json", folder / f"{key}.bin"
    try:
        record = json.loads(meta.read_text())
        binary = payload.read_bytes()
    except (OSError, ValueError):
        return None
    if hashlib.sha256(binary).hexdigest() != record.get("sha256"):
        return None   # a torn or edited entry: compile again
    return CompileResult(binary, record["format"], record["arch"], record["log"], record["resources"], cached=True)


def _write_cache(key: str, result: CompileResult) -> None:
    folder = cache_dir() / key[:2]
    try:
        folder.mkdir(parents=True, exist_ok=True)
        # write then rename: concurrent compiles of one kernel never see half a file
        for suffix, data in ((".bin", result.binary), (".json", json.dumps({
                "format": result.format, "arch": result.arch, "log": result.log, "resources": result.resources,
                "sha256": hashlib.sha256(result.binary).hexdigest()}).encode())):
            handle, temporary = tempfile.mkstemp(dir=folder)
            with os.fdopen(handle, "wb") as file:
                file.write(data)
            os.replace(temporary, folder / f"{key}{suffix}")
    except OSError:
        pass   # a read-only home: compile every time rather than fail
