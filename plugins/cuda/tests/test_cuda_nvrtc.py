"""test_cuda_nvrtc.py: NVRTC compilation: CUBIN per architecture, PTX when unknown, ptxas resources,
errors with numbered source lines, the on-disk cache, and the architecture limits."""
from __future__ import annotations

import os
import re
import subprocess

import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import CompileError

from cuda_helpers import bind_1d
from tensorkiln_cuda.gemm import tiled_gemm
from tensorkiln_cuda.arch import ARCHITECTURES, architecture, check_resources
from tensorkiln_cuda.nvrtc import compile_cuda, include_dirs, parse_ptxas_log


def _cuobjdump() -> str:
    for folder in include_dirs():
        candidate = os.path.join(os.path.dirname(folder), "bin", "cuobjdump")
        if os.path.exists(candidate):
            return candidate
    pytest.skip("cuobjdump (nvidia-cuda-cuobjdump wheel) is not installed")


def _gemm_func(n=64, tile=8):
    s, args = tiled_gemm(n, block=tile, per_thread=1, k_step=16)
    return te.lower(s, list(args), name="gemm")


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_cubin_for_the_exact_architecture_with_resources(emitter, arch, tmp_path):
    artifact = emitter.emit([_gemm_func()], tk.target(f"cuda -arch={arch}"))
    assert artifact.metadata["binary_format"] == "cubin" and artifact.binary[:4] == b"\x7fELF"
    path = tmp_path / f"{arch}.cubin"
    path.write_bytes(artifact.binary)
    header = subprocess.run([_cuobjdump(), "-elf", str(path)], capture_output=True, text=True).stdout
    assert re.search(rf"\bsm={arch[3:]}\b", header)   # "64-bit ELF: type=ET_EXEC, ABI=8, sm=90a, ..."
    resources = artifact.metadata["resources"]["gemm"]
    assert resources["shared_bytes"] == 2 * 8 * 16 * 4          # the two operand tiles, as ptxas counts them
    assert resources["spill_stores"] == 0 and resources["spill_loads"] == 0
    assert 0 < resources["registers"] * resources["threads_per_block"] <= architecture(arch).registers_per_sm
    assert "ptxas info" in artifact.sources["ptxas_log"]


def test_unknown_architecture_gives_ptx(emitter):
    artifact = emitter.emit([_gemm_func()], tk.target("cuda -arch=sm_75"))
    assert artifact.metadata["binary_format"] == "ptx" and artifact.metadata["arch"] == "compute_80"
    assert b".entry gemm(" in artifact.binary and b".target sm_80" in artifact.binary


def test_compile_error_shows_the_log_and_numbered_source_lines():
    source = 'extern "C" __global__ void broken(float* a) {\n    a[0] = 1.0f;\n    a[1] = undefined_name;\n}\n'
    with pytest.raises(CompileError) as error:
        compile_cuda(source, "sm_80", use_cache=False)
    text = str(error.value)
    assert 'identifier "undefined_name" is undefined' in text
    assert "    3      a[1] = undefined_name;" in text and "    2      a[0] = 1.0f;" in text


def test_cache_keyed_by_source_arch_and_options(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CUDA_CACHE", str(tmp_path))
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] = expf(a[threadIdx.x]); }\n'
    first = compile_cuda(source, "sm_80")
    again = compile_cuda(source, "sm_80")
    assert not first.cached and again.cached and again.binary == first.binary
    assert again.resources == first.resources and again.resources["k"]["registers"] > 0
    assert not compile_cuda(source, "sm_90").cached
    assert not compile_cuda(source, "sm_80", fast_math=True).cached
    (entry,) = [p for p in tmp_path.rglob("*.bin") if p.read_bytes() == first.binary]
    entry.write_bytes(b"torn")              # a damaged entry is compiled again, never used
    assert not compile_cuda(source, "sm_80").cached


def test_ptxas_report_parsing_skips_device_functions():
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper
ptxas         .     16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'main_kernel' for 'sm_90'
ptxas info    : Function properties for main_kernel
ptxas         .     8 bytes stack frame, 4 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 40 registers, used 1 barriers, 2048 bytes smem, 380 bytes cmem[0]
"""
    assert parse_ptxas_log(log) == {"main_kernel": {"registers": 40, "shared_bytes": 2048, "stack_bytes": 8,
                                                    "spill_stores": 4, "spill_loads": 12, "barriers": 1}}


def test_kernels_over_the_limits_are_refused_naming_kernel_and_limit(emitter):
    n = 2048
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    bind_1d(s, B, 2048)
    func = te.lower(s, [A, B], name="too_wide")
    with pytest.raises(CompileError, match="'too_wide' for sm_80 needs 2048 threads per block; the limit is 1024"):
        emitter.emit([func], tk.target("cuda"))
    with pytest.raises(CompileError, match="'k' for sm_90 uses 128 registers per thread x 1024 threads"):
        check_resources(architecture("sm_90"), "k", 1024, {"registers": 128})
    check_resources(architecture("sm_90"), "k", 512, {"registers": 128})


def test_records_differ_where_the_hardware_does():
    assert architecture("sm_89").max_dynamic_shared_bytes < architecture("sm_80").max_dynamic_shared_bytes \
        < architecture("sm_90").max_dynamic_shared_bytes
    assert "wgmma" in architecture("sm_90a").intrinsics and "wgmma" not in architecture("sm_90").intrinsics
    assert "float8_e4m3fn" in architecture("sm_89").dtypes and "float8_e4m3fn" not in architecture("sm_80").dtypes


def test_a_prebuilt_cache_serves_a_machine_without_nvrtc(tmp_path, monkeypatch):
    """scripts/gpu_check.sh carries the cache to a GPU host that may lack the NVRTC wheel."""
    from tensorkiln_cuda import nvrtc
    monkeypatch.setenv("TENSORKILN_CUDA_CACHE", str(tmp_path))
    source = 'extern "C" __global__ void k(float* a) { a[threadIdx.x] += 1.0f; }\n'
    built = compile_cuda(source, "sm_90")
    assert (tmp_path / "nvrtc_version.txt").read_text() == nvrtc.nvrtc_version()

    def missing():
        raise CompileError("cuda: NVRTC is not importable (test)")
    monkeypatch.setattr(nvrtc, "_nvrtc", missing)
    again = compile_cuda(source, "sm_90")
    assert again.cached and again.binary == built.binary
    with pytest.raises(CompileError, match="NVRTC is not importable"):
        compile_cuda(source.replace("1.0f", "2.0f"), "sm_90")


def test_a_kernel_that_spills_is_compiled_again_with_one_block_per_sm():
    """sm_90's ptxas spills the kit's 60-element uint8 max (one thread) under __launch_bounds__(1); the
    compile retries that kernel with __launch_bounds__(1, 1) and no spill is left. sm_80 needs no retry."""
    from tensorkiln import graph
    x = graph.var("x", shape=(3, 4, 5), dtype="uint8")
    module = graph.Module.from_expr(graph.max(x))
    for arch, bound in (("sm_90", "__launch_bounds__(1, 1) "), ("sm_80", "__launch_bounds__(1) ")):
        (artifact,) = tk.compile(module, f"cuda -arch={arch} -device=cpu_shim").artifacts.values()
        (used,) = artifact.metadata["resources"].values()
        assert used["spill_stores"] == 0 and f"{bound}fused_max(" in artifact.source, (arch, used)
