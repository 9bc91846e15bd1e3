"""xrt_device.py: the board device: kernels of an xclbin run through XRT's Python binding (pyxrt).

    lib = tk.build(s, args, target="fpga_hls -device=xrt -xclbin=build/kernels.xclbin")

device -> xclbin -> buffer objects -> kernel run, per call:
    device = pyxrt.device(0); uuid = device.load_xclbin(xclbin)
    kernel = pyxrt.kernel(device, uuid, symbol)
    bo = pyxrt.bo(device, nbytes, pyxrt.bo.normal, kernel.group_id(i)); bo.write(...); bo.sync(TO_DEVICE)
    run = kernel(bo0, bo1, ..., scalars); run.wait(); bo.sync(FROM_DEVICE); bo.read(...)
When the xclbin does not exist yet, loading writes the Vitis project (vitis.py) beside it
and raises TargetError saying to run `make` there. A tensor of an ap_fixed / ap_int type
travels as the kernel's words (types.to_bits: the smallest power-of-two-byte integer per
element, the W-bit value sign-extended), converted on the host exactly as the C-simulation
bridge converts it (rounding and overflow of the type), and read back with types.from_bits.
"""
from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import numpy as np

from tensorkiln.ir.dtypes import to_numpy
from tensorkiln.ir.errors import RuntimeLaunchError, TargetError
from tensorkiln.sdk import Artifact, KernelFunction, LoadedModule, RuntimeLoader
from tensorkiln.sdk.native import check_arguments

from .types import HLSType, from_bits, to_bits
from .vitis import write_project

__all__ = ["XRTLoader", "XRTModule", "XRTKernel"]


def _pyxrt():
    try:
        return importlib.import_module("pyxrt")
    except ImportError:
        raise TargetError("fpga_hls -device=xrt needs XRT's Python binding pyxrt (source "
                          "/opt/xilinx/xrt/setup.sh); use -device=csim for C-simulation") from None


class XRTKernel(KernelFunction):
    """One kernel of the xclbin: numpy arrays in, written buffers copied back."""

    def __init__(self, module: "XRTModule", name: str) -> None:
        self.module, self.name = module, name
        self.signature = module.artifact.kernel(name)
        self.symbol = module.artifact.kernel_symbol(name)
        self._kernel = module.pyxrt.kernel(module.device, module.uuid, self.symbol)
        info = module.artifact.metadata["kernels"][name]
        self._written = set(info.get("written", ()))
        self._types = {buffer: HLSType.parse(text) for buffer, text in info.get("hls_types", {}).items()}

    def __call__(self, *args: Any) -> None:
        check_arguments(self.signature, args)
        pyxrt = self.module.pyxrt
        values, buffers = [], []
        for index, (param, value) in enumerate(zip(self.signature.params, args)):
            if param.kind != "buffer":
                values.append(value.item() if isinstance(value, np.generic) else value)
                continue
            hls_type = self._types.get(param.name)
            array = np.ascontiguousarray(value, dtype=to_numpy(param.dtype)) if hls_type is None else \
                np.ascontiguousarray(to_bits(value, hls_type))
            bo = pyxrt.bo(self.module.device, max(array.nbytes, 1), pyxrt.bo.normal, self._kernel.group_id(index))
            bo.write(array.tobytes(), 0)
            bo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE)
            values.append(bo)
            buffers.append((param, value, bo, array.dtype, hls_type))
        run = self._kernel(*values)
        state = run.wait()
        if str(state).split(".")[-1].lower() not in ("ert_cmd_state_completed", "completed"):
            raise RuntimeLaunchError(f"fpga_hls board run of {self.name}: XRT reports {state}")
        for param, value, bo, words, hls_type in buffers:
            if param.name in self._written:
                bo.sync(pyxrt.xclBOSyncDirection.XCL_BO_SYNC_BO_FROM_DEVICE)
                data = np.frombuffer(bytes(bo.read(value.size * words.itemsize, 0)), dtype=words)
                if hls_type is not None:   # as the bridge: the type's value, cast to the tensor's C type
                    data = from_bits(data, hls_type).astype(to_numpy(param.dtype))
                np.copyto(value, data.reshape(value.shape))


class XRTModule(LoadedModule):
    def __init__(self, artifact: Artifact, xclbin: Path, device_index: int = 0) -> None:
        self.artifact = artifact
        self.pyxrt = _pyxrt()
        self.device = self.pyxrt.device(device_index)
        self.uuid = self.device.load_xclbin(str(xclbin))
        self._kernels: dict[str, XRTKernel] = {}

    def get_function(self, name: str) -> XRTKernel:
        if name not in self._kernels:
            self._kernels[name] = XRTKernel(self, name)
        return self._kernels[name]


class XRTLoader(RuntimeLoader):
    """Loads an artifact onto a board: the target's -xclbin must be the build of its Vitis project."""

    def load(self, artifact: Artifact, target: Any = None) -> XRTModule:
        options = getattr(target, "options", {}) or {}
        xclbin = Path(options.get("xclbin") or "")
        if not options.get("xclbin"):
            raise TargetError("fpga_hls -device=xrt needs -xclbin=PATH (the build of the Vitis project that "
                              "tensorkiln_fpga_hls.vitis.write_project writes)")
        if not xclbin.exists():
            folder = write_project(artifact, xclbin.parent, target)
            raise TargetError(f"fpga_hls: {xclbin} does not exist; the Vitis project is written to {folder}: run "
                              f"`make -C {folder}` where Vitis is installed, then load again")
        return XRTModule(artifact, xclbin)
