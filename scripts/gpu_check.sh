#!/usr/bin/env bash
# gpu_check.sh: the cuda plugin's checks on a machine with an NVIDIA GPU, in at most 6 minutes.
#
#   bash scripts/gpu_check.sh                 # on the GPU machine; results in $OUT (default ./gpu_check_out)
#
# Stages, each with its own timeout (seconds), each writing its log and JSON to $OUT:
#   probe 30 | gpu tests 35 | conformance 115 | light models 60 | GEMM vs cuBLAS 60 | compute-sanitizer 55
# A stage that fails or times out is recorded (rc in $OUT/stages.tsv) and the next one runs.
#
# Before lending the machine, prebuild the CUBINs here (no GPU needed) and carry the cache:
#   TENSORKILN_CUDA_CACHE=plugins/cuda/build/cubin_cache python3 -m tensorkiln_cuda.gpu_check prebuild
# then run with carry=["plugins/cuda/build"] (ignored by git; the cache is keyed by source, arch,
# NVRTC version and options, so the GPU run loads every CUBIN without compiling).
set -u
cd "$(dirname "$0")/.."
OUT="${OUT:-$PWD/gpu_check_out}"
mkdir -p "$OUT"
export TENSORKILN_CUDA_CACHE="${TENSORKILN_CUDA_CACHE:-$PWD/plugins/cuda/build/cubin_cache}"
export PYTHONUNBUFFERED=1
# the tensorkiln sources of this checkout, even where pip could not install them (no network there)
export PYTHONPATH="$PWD/core:$PWD/plugins/cuda:$PWD/plugins/cuda/build/pydeps:${PYTHONPATH:-}"
ARCH="${ARCH:-sm_90}"
TARGET="cuda -device=0 -arch=$ARCH"
printf 'stage\trc\tseconds\n' > "$OUT/stages.tsv"

stage() {   # stage NAME TIMEOUT COMMAND...
    local name=$1 limit=$2; shift 2
    local started=$SECONDS
    echo "=== $name (timeout ${limit}s) ==="
    timeout --kill-after=5 "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    printf '%s\t%s\t%s\n' "$name" "$rc" "$((SECONDS - started))" >> "$OUT/stages.tsv"
    tail -n 5 "$OUT/$name.log"
    echo "--- $name: rc=$rc in $((SECONDS - started))s"
}

stage probe 30 bash -c '
    nvidia-smi || echo "nvidia-smi: not found"
    python3 -c "import sys, importlib.metadata as m; print(sys.version.split()[0], *(f\"{d}={m.version(d)}\" for d in
        (\"numpy\", \"cuda-bindings\", \"nvidia-cuda-nvrtc\", \"torch\") if m.distributions(name=d)))" || true
    # the cuda plugin is found through its entry point: install the checkout (offline) only where it is missing
    python3 -c "import tensorkiln as tk; tk.target(\"cuda\")" 2>/dev/null || \
        pip install -q --no-deps --no-build-isolation -e . -e plugins/cuda 2>&1 | tail -n 2 || true
    python3 -m tensorkiln.cli targets
    python3 -m tensorkiln_cuda.gpu_check probe "'"$OUT"'"'
stage gpu_tests 35 python3 -m pytest -q -m gpu plugins/cuda/tests/test_cuda_driver.py -p no:cacheprovider --junitxml="$OUT/gpu_tests.xml"
stage conformance 115 python3 -m tensorkiln.cli conformance "$TARGET" --level manifest,runtime,te,intrinsics,ops \
    --shapes-per-op 1 --report "$OUT/conformance.json"
stage models 60 python3 -m tensorkiln_cuda.gpu_check models "$OUT"
stage gemm 60 python3 -m tensorkiln_cuda.gpu_check gemm "$OUT"
if command -v compute-sanitizer > /dev/null; then
    stage racecheck 30 env TK_SANITIZER_TOOL=racecheck compute-sanitizer --tool racecheck --error-exitcode 3 \
        python3 -m tensorkiln_cuda.gpu_check sanitize_kernels "$OUT"
    stage memcheck 25 env TK_SANITIZER_TOOL=memcheck compute-sanitizer --tool memcheck --error-exitcode 3 \
        python3 -m tensorkiln_cuda.gpu_check sanitize_kernels "$OUT"
else
    echo "compute-sanitizer: not on PATH (part of the CUDA toolkit); racecheck/memcheck skipped" | tee "$OUT/sanitizer.log"
fi
cat "$OUT/stages.tsv"
