"""benchmarks/ort_isa.py: an onnxruntime held to AVX2 on an AVX-512 host, for the AVX2 column.

The AVX2 column asks what a user without AVX-512 gets, against what onnxruntime gives that same
user. MLAS (onnxruntime's kernel library) picks its kernels once, at start-up, from CPUID and from
XCR0, the register through which the OS says which vector state it saves. There is no option or
environment variable to restrict it, and this kind of VM has no CPUID faulting to lie to it.

What does work: MLAS and onnxruntime's CPU-feature probe both read XCR0 with the same instruction
sequence, `xgetbv; mov %eax,%eax; shl $32,%rdx; or %rax,%rdx` (the 64-bit value in rdx, the low
half in rax). In a copy of the package, each such sequence is rewritten to one of the same length
that keeps only bits 0-4 of XCR0 (x87, SSE, AVX; no opmask and no ZMM state). Both probes then see
an OS without AVX-512 and choose their AVX2/FMA kernels, exactly as on an AVX2 host; nothing else in
the library changes. The installed package is never touched.

Checked on onnxruntime 1.32 (2 sites; Zen 5): MatMul 1024^3 at one thread falls from 199 to 114
GFLOP/s, which is AVX2 FMA speed (the AVX2 peak there is about 144), and outputs match the unpatched
library. If the sequence is not found (another onnxruntime build), `avx2_onnxruntime` says so and
the caller must report the column as against native onnxruntime.
"""
from __future__ import annotations

import hashlib
import os
import shutil

__all__ = ["host_has_avx512", "avx2_onnxruntime", "held_sites", "XGETBV_SEQUENCE", "XGETBV_AVX2_ONLY"]

# xgetbv; mov %eax,%eax; shl $0x20,%rdx; or %rax,%rdx
XGETBV_SEQUENCE = bytes.fromhex("0f01d0" "89c0" "48c1e220" "4809c2")
# xgetbv; and $0x1f,%eax; xor %edx,%edx; mov %rax,%rdx; nop   (same 12 bytes)
XGETBV_AVX2_ONLY = bytes.fromhex("0f01d0" "83e01f" "31d2" "4889c2" "90")
MARKER = "tensorkiln_avx2_patch.txt"


def host_has_avx512() -> bool:
    """True when the kernel reports avx512f for this CPU (Linux /proc/cpuinfo)."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return "avx512f" in line.split()
    except OSError:
        pass
    return False


def _extension_modules(package: str) -> list[str]:
    capi = os.path.join(package, "capi")
    return [os.path.join(capi, name) for name in sorted(os.listdir(capi))
            if name.startswith("onnxruntime_pybind11_state") and name.endswith(".so")]


def avx2_onnxruntime(cache_root: str | None = None, source: str | None = None, version: str | None = None) -> str:
    """A folder to put first on PYTHONPATH so that `import onnxruntime` loads a copy held to AVX2.

    The copy is made once per installed onnxruntime (keyed by its version and the extension's size
    and mtime) under `cache_root` (default ~/.cache/tensorkiln/ort_avx2). `source` / `version`: the
    package folder and its version (default: the installed onnxruntime). Raises RuntimeError naming
    the library when the XCR0 probe sequence is not found, so no column is silently mislabelled."""
    if source is None:
        import onnxruntime
        source, version = os.path.dirname(onnxruntime.__file__), onnxruntime.__version__
    version = version or "unknown"
    modules = _extension_modules(source)
    if not modules:
        raise RuntimeError(f"no onnxruntime_pybind11_state*.so under {source}/capi: cannot hold onnxruntime to AVX2")
    stat = os.stat(modules[0])
    key = hashlib.sha1(f"{version}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    cache_root = cache_root or os.path.join(os.path.expanduser("~"), ".cache", "tensorkiln", "ort_avx2")
    root = os.path.join(cache_root, f"{version}-{key}")
    package = os.path.join(root, "onnxruntime")
    if os.path.exists(os.path.join(package, MARKER)):
        return root
    staging = root + ".partial"
    shutil.rmtree(staging, ignore_errors=True)
    shutil.copytree(source, os.path.join(staging, "onnxruntime"), symlinks=True)
    sites = 0
    for module in _extension_modules(os.path.join(staging, "onnxruntime")):
        with open(module, "rb") as handle:
            data = handle.read()
        count = data.count(XGETBV_SEQUENCE)
        if count:
            with open(module, "wb") as handle:
                handle.write(data.replace(XGETBV_SEQUENCE, XGETBV_AVX2_ONLY))
        sites += count
    if sites == 0:
        shutil.rmtree(staging, ignore_errors=True)
        raise RuntimeError(f"onnxruntime {version} at {source}: the XCR0 probe sequence "
                           f"{XGETBV_SEQUENCE.hex()} was not found, so it cannot be held to AVX2 here; "
                           f"report the AVX2 column as against onnxruntime's native kernels")
    with open(os.path.join(staging, "onnxruntime", MARKER), "w") as handle:
        handle.write(f"onnxruntime {version}: {sites} XCR0 probe(s) masked to bits 0-4\n")
    shutil.rmtree(root, ignore_errors=True)
    os.replace(staging, root)
    return root


def held_sites(package_dir: str) -> str | None:
    """The patch record of an imported onnxruntime package folder, or None if it is not a held copy."""
    try:
        with open(os.path.join(package_dir, MARKER)) as handle:
            return handle.read().strip()
    except OSError:
        return None
