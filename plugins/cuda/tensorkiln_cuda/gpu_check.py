"""gpu_check.py: the stages of scripts/gpu_check.sh, each writing JSON (and a log line) to $OUT.

    python3 -m tensorkiln_cuda.gpu_check prebuild          # here: NVRTC-compile the check's kernels for sm_90
    python3 -m tensorkiln_cuda.gpu_check probe|models|gemm|sanitize_kernels OUT_DIR

The prebuild fills TENSORKILN_CUDA_CACHE (plugins/cuda/build/cubin_cache, carried to the GPU
machine), so the GPU run finds every CUBIN of the models and GEMMs without compiling.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

__all__ = ["main"]

ARCH = "sm_90"
MODELS = ("squeezenet", "resnet50", "inception_v1", "shufflenet", "bvlc_alexnet")
GEMM_SIZES = (2048, 4096, 8192)


def _write(out: Path, name: str, record: dict) -> None:
    (out / f"{name}.json").write_text(json.dumps(record, indent=1, default=str))
    print(json.dumps({name: record}, default=str)[:2000], flush=True)


def probe(out: Path) -> None:
    from .driver import CUDADevice, driver_status
    from .nvrtc import cache_dir
    status = driver_status()
    record = {"driver": status.available, "reason": status.reason, "devices": status.devices,
              "cache": str(cache_dir()), "cached_entries": len(list(cache_dir().rglob("*.bin")))}
    if status.available:
        device = CUDADevice(0)
        record.update(name=device.name, arch=device.arch, shared_optin=device.max_shared_optin)
    try:
        from .nvrtc import nvrtc_version
        record["nvrtc"] = nvrtc_version()
    except Exception as error:   # the GPU host may lack the NVRTC wheel: cached CUBINs still load
        record["nvrtc"] = f"unavailable: {error}"
    _write(out, "probe", record)


def _light_model(name: str, target: str):
    import onnx
    from onnx import numpy_helper

    import tensorkiln as tk
    from tensorkiln.frontend import from_onnx
    light = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light")
    mod = from_onnx(os.path.join(light, f"light_{name}.onnx"))
    lib = tk.compile(mod, target, opt_level=2)
    (param,) = mod.main.params
    size = int(np.prod(param.shape))
    data = (np.arange(size).reshape(param.shape) / size).astype(np.float32)
    expected = numpy_helper.to_array(onnx.load_tensor(os.path.join(light, f"light_{name}_output_0.pb")))
    return lib, data, expected


def models(out: Path, target: str = f"cuda -device=0 -arch={ARCH}") -> None:
    results = {}
    for name in MODELS:
        started = time.perf_counter()
        try:
            lib, data, expected = _light_model(name, target)
            got = lib(data)
            lib(data)
            run_started = time.perf_counter()
            for _ in range(5):
                lib(data)
            results[name] = {"max_abs_error": float(np.abs(got - expected).max()),
                             "matches": bool(np.allclose(got, expected, rtol=2e-3, atol=1e-5)),
                             "ms_per_run": (time.perf_counter() - run_started) / 5 * 1e3,
                             "seconds": time.perf_counter() - started}
        except Exception as error:   # one model's failure must not hide the others' results
            results[name] = {"error": f"{type(error).__name__}: {error}"[:1500]}
        _write(out, "models", results)


def _gemm_functions(n: int, target: str):
    import tensorkiln as tk
    from .gemm import tiled_gemm, wmma_gemm
    s, args = tiled_gemm(n)
    f32 = tk.build(s, list(args), target=target, name=f"gemm_f32_{n}")
    s, args = wmma_gemm(n)
    f16 = tk.build(s, list(args), target=target, name=f"gemm_wmma_{n}")
    return f32, f16


def gemm(out: Path, target: str = f"cuda -device=0 -arch={ARCH}") -> None:
    try:
        import torch
    except ImportError:
        torch = None
    results = {}
    for n in GEMM_SIZES:
        f32, f16 = _gemm_functions(n, target)
        rng = np.random.default_rng(n)
        for label, function, dtype in (("fp32", f32, "float32"), ("fp16", f16, "float16")):
            a, b = (rng.standard_normal((n, n)).astype(dtype) for _ in range(2))
            c = np.zeros((n, n), "float32")
            seconds = function.time_evaluator(function.entry_name, number=3, repeat=3)(a, b, c).min
            row = {"ours_tflops": 2 * n ** 3 / seconds / 1e12, "ours_seconds": seconds}
            if n == 2048:   # numerics once per dtype, on the smallest size
                function(a, b, c)
                reference = a.astype("float32") @ b.astype("float32")
                row["max_rel_error"] = float(np.abs(c - reference).max() / np.abs(reference).max())
            if torch is not None and torch.cuda.is_available():
                ta = torch.from_numpy(a).cuda()
                tb = torch.from_numpy(b).cuda()
                torch.matmul(ta, tb)
                torch.cuda.synchronize()
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(5):
                    torch.matmul(ta, tb)
                end.record()
                torch.cuda.synchronize()
                cublas = start.elapsed_time(end) / 5 * 1e-3
                row.update(cublas_seconds=cublas, ratio_vs_cublas=cublas / seconds)
            else:
                row["cublas"] = "torch with CUDA is not installed here: no cuBLAS reference"
            results[f"{label}_{n}"] = row
            _write(out, "gemm", results)


def sanitize_kernels(out: Path, target: str = f"cuda -device=0 -arch={ARCH}") -> None:
    """Runs two kernels with barriers and shared memory once (compute-sanitizer wraps this process)."""
    import tensorkiln as tk
    from .gemm import tiled_gemm, wmma_gemm
    n = 256
    rng = np.random.default_rng(0)
    s, args = tiled_gemm(n)
    f = tk.build(s, list(args), target=target, name="sanitize_f32")
    a, b = rng.standard_normal((n, n), "float32"), rng.standard_normal((n, n), "float32")
    c = np.zeros((n, n), "float32")
    f(a, b, c)
    s, args = wmma_gemm(n)
    g = tk.build(s, list(args), target=target, name="sanitize_wmma")
    h = np.zeros((n, n), "float32")
    g(a.astype("float16"), b.astype("float16"), h)
    _write(out, f"sanitize_{os.environ.get('TK_SANITIZER_TOOL', 'run')}", {
        "f32_error": float(np.abs(c - a @ b).max()),
        "wmma_error": float(np.abs(h - a.astype("float16").astype("float32") @ b.astype("float16").astype("float32")).max())})


def prebuild(out: Path | None = None) -> None:
    """Compile (NVRTC, no GPU) every kernel of the GPU stages for sm_90 into the cache: the models
    through tk.compile on the shim target, the GEMMs through tk.build."""
    import tensorkiln as tk
    from .emitter import CUDAEmitter
    shim = f"cuda -device=cpu_shim -arch={ARCH}"
    for name in MODELS:
        started = time.perf_counter()
        _light_model(name, shim)
        print(f"prebuilt {name} in {time.perf_counter() - started:.1f} s", flush=True)
    emitter = CUDAEmitter()
    from .gemm import tiled_gemm, wmma_gemm
    from tensorkiln import te
    for n in (*GEMM_SIZES, 256):
        for maker, name in ((tiled_gemm, f"gemm_f32_{n}"), (wmma_gemm, f"gemm_wmma_{n}")):
            s, args = maker(n)
            emitter.emit([te.lower(s, list(args), name=name)], tk.target(f"cuda -arch={ARCH}"))
    for name, maker in (("sanitize_f32", tiled_gemm), ("sanitize_wmma", wmma_gemm)):
        s, args = maker(256)
        emitter.emit([te.lower(s, list(args), name=name)], tk.target(f"cuda -arch={ARCH}"))
    print("prebuilt the GEMMs", flush=True)


STAGES = {"probe": probe, "models": models, "gemm": gemm, "sanitize_kernels": sanitize_kernels, "prebuild": prebuild}


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in STAGES:
        print(f"usage: python3 -m tensorkiln_cuda.gpu_check {{{'|'.join(STAGES)}}} [OUT_DIR]", file=sys.stderr)
        return 2
    out = Path(argv[1] if len(argv) > 1 else os.environ.get("OUT", "."))
    out.mkdir(parents=True, exist_ok=True)
    STAGES[argv[0]](out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
