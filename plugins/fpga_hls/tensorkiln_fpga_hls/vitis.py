"""vitis.py: the project a user with the Xilinx tools builds: v++ Makefile and Vitis-HLS tcl.

    folder = write_project(artifact, "build/fpga", target)
    # then, where Vitis is installed:  make -C build/fpga PLATFORM=<platform>   -> kernels.xclbin
    #                                  vitis_hls -f build/fpga/csynth_<kernel>.tcl (reports only)

The folder holds kernels.cpp (the emitted HLS C++), include/ (tk_hls.h and tk_stream.h;
the tools bring their own ap_fixed.h and hls_stream.h), a Makefile that compiles each
kernel with `v++ -c -k <kernel>` and links them with `v++ -l` into kernels.xclbin, and
one csynth tcl per kernel whose csynth report hls4ml can read beside our estimates.
"""
from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from tensorkiln.sdk import Artifact

__all__ = ["write_project", "DEFAULT_PLATFORM", "XCLBIN_NAME"]

DEFAULT_PLATFORM = "xilinx_u250_gen3x16_xdma_4_1_202210_1"
XCLBIN_NAME = "kernels.xclbin"
_INCLUDE = Path(__file__).parent / "include"

_MAKEFILE = """\
# Written by tensorkiln's fpga_hls plugin: build {xclbin} with Vitis (v++).
#   make PLATFORM=<platform> [TARGET=hw|hw_emu|sw_emu]
PLATFORM ?= {platform}
TARGET ?= hw
CLOCK_HZ ?= {clock_hz}
KERNELS := {kernels}
XOS := $(KERNELS:%=%.xo)

all: {xclbin}

%.xo: kernels.cpp include/tk_hls.h include/tk_stream.h
\tv++ -c -t $(TARGET) --platform $(PLATFORM) -k $* -I include --hls.clock $(CLOCK_HZ):$* -o $@ kernels.cpp

{xclbin}: $(XOS)
\tv++ -l -t $(TARGET) --platform $(PLATFORM) --kernel_frequency $(shell expr $(CLOCK_HZ) / 1000000) -o $@ $(XOS)

clean:
\trm -rf *.xo {xclbin} _x .Xil *.log *.ltx *.info *.link_summary *.compile_summary

.PHONY: all clean
"""

_CSYNTH_TCL = """\
# Written by tensorkiln's fpga_hls plugin: C synthesis of kernel {kernel} (vitis_hls -f csynth_{kernel}.tcl)
open_project -reset tk_{kernel}
set_top {kernel}
add_files kernels.cpp -cflags "-Iinclude"
open_solution -reset solution1 -flow_target vitis
set_part {{{part}}}
create_clock -period {period_ns} -name default
csynth_design
exit
"""


def write_project(artifact: Artifact, folder, target: Any = None) -> Path:
    """Write the Vitis project of `artifact` into `folder` (created); returns the folder."""
    options = getattr(target, "options", {}) or {}
    clock_mhz = int(options.get("clock_mhz") or 300)
    part = options.get("part") or "xcu250-figd2104-2L-e"
    folder = Path(folder)
    (folder / "include").mkdir(parents=True, exist_ok=True)
    for header in ("tk_hls.h", "tk_stream.h"):
        shutil.copy(_INCLUDE / header, folder / "include" / header)
    (folder / "kernels.cpp").write_text(artifact.source)
    symbols = [artifact.kernel_symbol(k.name) for k in artifact.kernels]
    (folder / "Makefile").write_text(_MAKEFILE.format(
        xclbin=XCLBIN_NAME, platform=DEFAULT_PLATFORM, clock_hz=clock_mhz * 1_000_000, kernels=" ".join(symbols)))
    for symbol in symbols:
        (folder / f"csynth_{symbol}.tcl").write_text(_CSYNTH_TCL.format(
            kernel=symbol, part=part, period_ns=round(1000.0 / clock_mhz, 3)))
    return folder
