"""runtime.py: CUDALoader, which runs cuda-c artifacts on a GPU (driver API) or on the CPU shim.

    loader = CUDALoader()
    loader.mode(tk.target("cuda"))                     # "gpu" with a CUDA driver, else "cpu_shim"
    module = loader.load(artifact, tk.target("cuda -device=cpu_shim"))
    module.get_function("add")(a, b, c)                # numpy in, numpy out, on either

The -device option picks: "auto" (the default: GPU 0 when a driver answers cuInit, else
the shim), "cpu_shim", or a GPU index. The graph executor asks the loader for memory
without a target, so arrays follow the process-wide choice (`default_mode`): numpy arrays
under the shim, driver DeviceArrays on a GPU. TENSORKILN_CUDA_DEVICE=cpu_shim forces the shim.
"""
from __future__ import annotations

import os
import platform
from typing import Any, Sequence

from tensorkiln.ir.errors import TargetError
from tensorkiln.sdk import Artifact, RuntimeLoader

from .driver import DriverUnavailable, driver_status

__all__ = ["CUDALoader", "CPU_SHIM"]

CPU_SHIM = "cpu_shim"


class CUDALoader(RuntimeLoader):
    def __init__(self, emitter=None) -> None:
        self.emitter = emitter
        self._devices: dict[int, Any] = {}

    # ---- where kernels run -------------------------------------------------------------------

    def default_mode(self) -> str:
        forced = os.environ.get("TENSORKILN_CUDA_DEVICE", "auto")
        if forced == CPU_SHIM:
            return CPU_SHIM
        return "gpu" if driver_status().available else CPU_SHIM

    def mode(self, target: Any = None) -> str:
        """"gpu" or "cpu_shim" for the target's -device option."""
        device = str(dict(getattr(target, "options", None) or {}).get("device", "auto"))
        if device == CPU_SHIM:
            return CPU_SHIM
        if device == "auto":
            return self.default_mode()
        if not device.isdigit():
            raise TargetError(f"cuda: -device={device!r} is not auto, cpu_shim or a GPU index")
        status = driver_status()
        if not status.available:
            raise DriverUnavailable(f"cuda -device={device}: {status.reason}; use -device=cpu_shim to run on the CPU")
        return "gpu"

    def gpu(self, target: Any = None):
        from .driver import CUDADevice
        device = str(dict(getattr(target, "options", None) or {}).get("device", "auto"))
        index = int(device) if device.isdigit() else 0
        if index not in self._devices:
            self._devices[index] = CUDADevice(index)
        return self._devices[index]

    @property
    def uses_host_memory(self) -> bool:   # read by the graph executor, which passes no target
        return self.default_mode() == CPU_SHIM

    def availability_note(self) -> str:
        status = driver_status()
        if status.available:
            return f"available for compile (NVRTC) and run on {status.devices} GPU(s) through the CUDA driver"
        return ("available for compile (NVRTC -> CUBIN, resource checks) and for run through the CPU shim "
                f"(-device=cpu_shim, the default here); GPU runs need a driver: {status.reason}")

    def describe_device(self, target: Any = None) -> str:
        from tensorkiln.ir.errors import CompileError

        from .nvrtc import nvrtc_version
        try:
            compile_part = f"compile: NVRTC {nvrtc_version()} -> CUBIN (sm_80, sm_89, sm_90, sm_90a)"
        except CompileError:
            compile_part = "compile: no NVRTC here (CUBINs from the cache only)"
        mode = self.mode(target)
        if mode == CPU_SHIM:
            status = driver_status()
            why = f"; {status.reason}" if not status.available else ""
            return f"{compile_part}; run: CPU shim (g++, one thread per CUDA thread) on {platform.machine()}{why}"
        return f"{compile_part}; run: {self.gpu(target).describe()}"

    # ---- memory: numpy under the shim, DeviceArrays on a GPU -----------------------------------

    def empty(self, shape, dtype, target=None):
        if self._shim(target):
            return super().empty(shape, dtype, target)
        return self.gpu(target).empty(shape, dtype)

    def to_device(self, array, target=None):
        if self._shim(target):
            return super().to_device(array, target)
        return self.gpu(target).from_numpy(array)

    from_numpy = to_device

    def copy_into(self, device_array, array) -> None:
        if isinstance(device_array, _ndarray_type()):
            return super().copy_into(device_array, array)
        device_array.copy_from_numpy(array)

    def view(self, storage, offset: int, shape: Sequence[int], dtype: str):
        if isinstance(storage, _ndarray_type()):
            return super().view(storage, offset, shape, dtype)
        return storage.view(offset, shape, dtype)

    def to_host(self, device_array):
        if isinstance(device_array, _ndarray_type()):
            return super().to_host(device_array)
        return device_array.to_numpy()

    def _shim(self, target) -> bool:
        return (self.mode(target) if target is not None else self.default_mode()) == CPU_SHIM

    # ---- kernels ------------------------------------------------------------------------------

    def load(self, artifact: Artifact, target: Any = None):
        if artifact.format != "cuda-c":
            raise TargetError(f"the cuda loader runs 'cuda-c' artifacts, got {artifact.format!r}")
        if self._shim(target):
            from .shim import build_shim_module
            return build_shim_module(artifact, self.emitter)
        from .driver import DriverModule
        return DriverModule(artifact, self.gpu(target), self.emitter)


def _ndarray_type():
    import numpy as np
    return np.ndarray
