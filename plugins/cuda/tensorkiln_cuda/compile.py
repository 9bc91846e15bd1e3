"""compile.py: an emitted cuda-c Artifact -> the same Artifact with its CUBIN and resources.

Called by `CUDAEmitter.emit`. The architecture comes from the target's -arch option:
a known record (sm_80, sm_89, sm_90, sm_90a) gives a CUBIN for exactly that architecture
and the limits checked below; -arch=native asks the driver for the device's
architecture; anything unknown (no driver for native, an architecture without a
record) gives PTX for the oldest record's virtual architecture, which a driver JITs.

Checks, each naming the kernel and the limit: threads per block, static and dynamic
shared memory and dtypes against the record before compiling; registers x threads
against the SM's register file after (from ptxas). The resources land in
`artifact.metadata["resources"][kernel]` and, as each kernel's "estimate",
in `lib.summary()["estimates"]`.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.sdk import Artifact

from .arch import architecture, check_kernel, check_resources
from .nvrtc import cached_nvrtc_version, compile_cuda

__all__ = ["compile_artifact", "resolve_arch", "FALLBACK_PTX_ARCH"]

FALLBACK_PTX_ARCH = "compute_80"
"""PTX target when the architecture is unknown: every record's device can JIT it."""


def _options(target: Any) -> dict:
    return dict(getattr(target, "options", None) or {})


def resolve_arch(target: Any) -> str:
    """The --gpu-architecture to compile for: "sm_XX[a]" with a record, else FALLBACK_PTX_ARCH."""
    arch = str(_options(target).get("arch") or "sm_80")
    if arch == "native":
        from .driver import native_arch
        arch = native_arch() or ""
    return arch if architecture(arch) is not None else FALLBACK_PTX_ARCH


def compile_artifact(artifact: Artifact, target: Any) -> Artifact:
    options = _options(target)
    arch_name = resolve_arch(target)
    record = architecture(arch_name)
    kernels = artifact.metadata.get("kernels", {})
    dtypes_by_kernel = {k.name: {dtype_of(p.dtype).element for p in k.params} for k in artifact.kernels}
    if record is not None:
        for name, info in kernels.items():
            threads = _threads(info)
            dynamic = int(info.get("dynamic_shared_bytes", 0))
            static = 0 if dynamic else int(info.get("shared_bytes", 0))
            check_kernel(record, name, threads, static, dynamic, dtypes_by_kernel.get(name, set()))
    compile_options = {"fast_math": bool(options.get("fast_math", False)), "compiler": str(options.get("compiler", "nvrtc"))}
    result = compile_cuda(artifact.source, arch_name, **compile_options)
    source = _without_spills(artifact.source, result.resources)
    if source != artifact.source:
        artifact = dataclasses.replace(artifact, source=source)
        result = compile_cuda(source, arch_name, **compile_options)
    resources, kernels = {}, {name: dict(info) for name, info in kernels.items()}
    for name, info in kernels.items():
        reported = dict(result.resources.get(info.get("symbol", name), {}))
        if reported:
            reported["dynamic_shared_bytes"] = int(info.get("dynamic_shared_bytes", 0))
            reported["threads_per_block"] = _threads(info)
            if record is not None:
                check_resources(record, name, _threads(info), reported)
            resources[name] = reported
            info["estimate"] = {"arch": arch_name, **reported}   # lib.summary()["estimates"] lists it per kernel
    metadata = {**artifact.metadata, "kernels": kernels, "arch": arch_name, "binary_format": result.format,
                "nvrtc_version": cached_nvrtc_version(), "resources": resources}
    return dataclasses.replace(artifact, binary=result.binary, metadata=metadata,
                               sources={**artifact.sources, "ptxas_log": result.log})


def _without_spills(source: str, resources: dict[str, dict]) -> str:
    """`source` with `__launch_bounds__(N, 1)` for every kernel ptxas spilled. With the thread bound alone
    ptxas keeps registers low for occupancy, and for some small-block kernels on sm_90 (the kit's
    60-element uint8 max on one thread: 79 registers, 64 bytes spilled) it spills; saying one block per
    SM is enough lets it use the registers instead (124, no spill). Kernels that did not spill keep the
    occupancy-friendly bound."""
    for kernel, used in resources.items():
        if used.get("spill_stores") or used.get("spill_loads"):
            source = re.sub(rf"__launch_bounds__\((\d+)\) {re.escape(kernel)}\(", rf"__launch_bounds__(\1, 1) {kernel}(",
                            source, count=1)
    return source


def _threads(info: dict) -> int:
    block = info.get("block", [1, 1, 1])
    return int(block[0]) * int(block[1]) * int(block[2])
