#!/usr/bin/env bash
# scripts/setup.sh: install everything tensorkiln and its tests need on a fresh Debian machine
# that has only python3 and pip (run as root). Safe to run again: it skips what is installed.
set -euo pipefail
cd "$(dirname "$0")/.."

# System packages: PoCL gives the OpenCL plugin a real device on the CPU; graphviz draws
# graphs (`tensorkiln viz`); a C compiler links AOT libraries and builds C-source targets; g++ builds
# fpga_hls's C-simulation, iverilog/verilator/yosys simulate and synthesise its systolic-array RTL.
missing=()
for pkg in pocl-opencl-icd ocl-icd-opencl-dev graphviz gcc g++ libgomp1 iverilog verilator yosys; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

python3 -m pip install -q --disable-pip-version-check -U pip "setuptools>=70" wheel
# fpga_hls reads only the Apache-2.0 ap_int/ap_fixed headers of hls4ml: no-deps keeps its ML stack out.
python3 -m pip show -q hls4ml >/dev/null 2>&1 || python3 -m pip install -q --disable-pip-version-check --no-deps hls4ml
python3 -m pip install -q --disable-pip-version-check -e ".[test]" \
  -e plugins/cpu_llvm -e plugins/opencl -e plugins/cuda -e plugins/fpga_hls
