"""test_cuda_conformance.py: the conformance kit on cuda through the CPU shim, and every kit kernel
compiled by NVRTC for sm_80, sm_89 and sm_90 with its ptxas resources checked.

The manifest and runtime levels run in the default suite; te, intrinsics and ops build a
few hundred kernels (NVRTC + g++ each, about 3 s apiece cold on 2 cores) and are slow.
`tensorkiln conformance cuda` runs every level, models included.
"""
from __future__ import annotations

import pytest

import tensorkiln as tk
from tensorkiln.conformance.catalogue import CheckFailure, KitOptions, catalogue

from tensorkiln_cuda import compile as cuda_compile
from tensorkiln_cuda.arch import architecture
from tensorkiln_cuda.nvrtc import compile_cuda

_TARGET = tk.target("cuda -arch=sm_90 -device=cpu_shim")


def _checks(levels):
    return [c for c in catalogue(_TARGET, levels, KitOptions(shapes_per_op=1)) if not c.is_skipped]


_FAST = _checks(("manifest", "runtime"))


def _run(check):
    try:
        check.run(_TARGET)
    except CheckFailure as failure:
        pytest.fail(f"{check.id} ({failure.kind}): {failure.message}")


@pytest.mark.parametrize("check", _FAST, ids=[c.id for c in _FAST])
def test_conformance_check_passes_on_the_shim(check):
    _run(check)


@pytest.mark.slow
def test_kit_kernels_pass_on_the_shim_and_compile_for_every_architecture_without_spills(monkeypatch):
    """te, intrinsics and ops levels pass through the shim; each artifact the kit built for sm_90 has no
    spills, registers x threads within an SM and shared memory within the limit, and compiles for
    sm_80 and sm_89 with no spills either."""
    artifacts = []
    original = cuda_compile.compile_artifact

    def recording(artifact, target):
        compiled = original(artifact, target)
        artifacts.append(compiled)
        return compiled
    monkeypatch.setattr(cuda_compile, "compile_artifact", recording)
    failures = []
    for check in _checks(("te", "intrinsics", "ops")):
        try:
            check.run(_TARGET)
        except CheckFailure as failure:
            failures.append(f"{check.id}: {failure.message[:200]}")
    assert not failures, "\n".join(failures)
    assert len(artifacts) > 100
    sm90 = architecture("sm_90")
    for artifact in artifacts:
        for name, used in artifact.metadata["resources"].items():
            assert used["spill_stores"] == 0 and used["spill_loads"] == 0, (name, used)
            assert used["registers"] * used["threads_per_block"] <= sm90.registers_per_sm, (name, used)
            assert used["shared_bytes"] + used["dynamic_shared_bytes"] <= sm90.max_dynamic_shared_bytes
    for source in {a.source for a in artifacts}:
        for arch in ("sm_80", "sm_89"):
            for name, used in compile_cuda(source, arch).resources.items():
                assert used["spill_stores"] == 0, (arch, name, used)
