"""driver.py: the CUDA driver API loader (cuda.bindings.driver): context, modules, memory, launches.

    device = CUDADevice(0)                         # primary context of GPU 0
    module = DriverModule(artifact, device)        # cuModuleLoadData of the artifact's CUBIN
    module.get_function("add")(a, b, c)            # numpy or DeviceArray arguments
    module.time_function("add", [a, b, c], 10, 3)  # seconds per launch, from CUDA events

Every call goes through `api()`, the `cuda.bindings.driver` module unless a test installs
a fake with the same call surface (`use_driver_module`). Each call returns a tuple whose
first item is a CUresult; a failure raises RuntimeLaunchError naming the call and the
error. Without a driver, cuInit cannot load libcuda.so.1: `driver_status()` says so as the
target's reason ("no CUDA driver: ...") and compiling keeps working.
"""
from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tensorkiln.ir.dtypes import from_numpy, to_numpy
from tensorkiln.ir.errors import CompileError, RuntimeLaunchError, TargetError
from tensorkiln.sdk import Artifact, KernelFunction, LoadedModule, launch_geometry

from .prefix import STATIC_SHARED_LIMIT

__all__ = ["DriverUnavailable", "DriverStatus", "driver_status", "native_arch", "use_driver_module", "api",
           "CUDADevice", "DeviceArray", "DriverModule", "DriverKernel", "pack_parameters"]


class DriverUnavailable(TargetError):
    """No CUDA driver on this machine (or it failed to initialise)."""


@dataclass(frozen=True)
class DriverStatus:
    available: bool
    reason: str = ""
    devices: int = 0


_MODULE: list[Any] = []          # a fake driver module installed by tests, else empty
_STATUS: list[DriverStatus] = []
_LOCK = threading.Lock()


def use_driver_module(module: Any | None) -> None:
    """Route every driver call to `module` (a fake with cuda.bindings.driver's call surface); None
    goes back to the real one. Resets the cached driver status."""
    with _LOCK:
        _MODULE.clear()
        _STATUS.clear()
        if module is not None:
            _MODULE.append(module)


def api():
    if _MODULE:
        return _MODULE[0]
    from cuda.bindings import driver
    return driver


def _failed(result) -> bool:
    return int(result) != 0


def _error_name(result) -> str:
    try:
        error, name = api().cuGetErrorName(result)
        return name.decode() if isinstance(name, bytes) else str(name)
    except Exception:   # the error name is a courtesy; never hide the real failure behind it
        return str(result)


def call(name: str, *args):
    """api().name(*args) with its CUresult checked; returns the other results (one value or a tuple)."""
    results = getattr(api(), name)(*args)
    if not isinstance(results, tuple):
        results = (results,)
    if _failed(results[0]):
        raise RuntimeLaunchError(f"cuda: {name} failed with {_error_name(results[0])}")
    rest = results[1:]
    return rest[0] if len(rest) == 1 else (rest or None)


def driver_status() -> DriverStatus:
    """Whether a CUDA driver answers here; the reason ("no CUDA driver: ...") when not. Cached."""
    with _LOCK:
        if _STATUS:
            return _STATUS[0]
        _STATUS.append(_probe())
        return _STATUS[0]


def _probe() -> DriverStatus:
    try:
        (result,) = api().cuInit(0)
    except (RuntimeError, OSError, ImportError) as error:   # "Failed to dlopen libcuda.so.1" and kin
        return DriverStatus(False, f"no CUDA driver: {str(error).strip() or type(error).__name__} "
                                   "(compiling to CUBIN and the resource checks still work)")
    if _failed(result):
        return DriverStatus(False, f"no CUDA driver: cuInit failed with {_error_name(result)}")
    count = call("cuDeviceGetCount")
    if int(count) == 0:
        return DriverStatus(False, "no CUDA device: the driver reports 0 GPUs")
    return DriverStatus(True, "", int(count))


def native_arch() -> str | None:
    """"sm_90" for GPU 0 when a driver answers, else None."""
    if not driver_status().available:
        return None
    return CUDADevice(0).arch


_ATTRIBUTE = "CUdevice_attribute"


class CUDADevice:
    """One GPU with its primary context, made current on the calling thread before each use."""

    def __init__(self, index: int = 0) -> None:
        status = driver_status()
        if not status.available:
            raise DriverUnavailable(f"cuda: {status.reason}")
        if not 0 <= index < status.devices:
            raise TargetError(f"cuda: -device={index} is out of range; this machine has {status.devices} GPU(s)")
        self.index = index
        self.handle = call("cuDeviceGet", index)
        self.context = call("cuDevicePrimaryCtxRetain", self.handle)
        self.activate()
        self.name = call("cuDeviceGetName", 256, self.handle)
        if isinstance(self.name, bytes):
            self.name = self.name.split(b"\0")[0].decode()
        self.compute_capability = (self.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR"),
                                   self.attribute("CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR"))
        self.max_shared_optin = self.attribute("CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")

    def attribute(self, name: str) -> int:
        return int(call("cuDeviceGetAttribute", getattr(getattr(api(), _ATTRIBUTE), name), self.handle))

    @property
    def arch(self) -> str:
        major, minor = self.compute_capability
        return f"sm_{major}{minor}"

    def activate(self) -> None:
        call("cuCtxSetCurrent", self.context)

    def synchronize(self) -> None:
        self.activate()
        call("cuCtxSynchronize")

    def describe(self) -> str:
        return f"GPU {self.index} {self.name} ({self.arch}) through the CUDA driver API"

    def empty(self, shape, dtype) -> "DeviceArray":
        return DeviceArray(self, shape, dtype)

    def from_numpy(self, array) -> "DeviceArray":
        array = np.ascontiguousarray(array)
        result = DeviceArray(self, array.shape, from_numpy(array.dtype))
        result.copy_from_numpy(array)
        return result


class DeviceArray:
    """A dense array in GPU memory (cuMemAlloc), or a view into one at a byte offset."""

    def __init__(self, device: CUDADevice, shape: Sequence[int], dtype: str, base: "DeviceArray | None" = None,
                 offset: int = 0) -> None:
        self.device, self.shape, self.dtype = device, tuple(int(d) for d in shape), str(dtype)
        self.numpy_dtype = to_numpy(self.dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.numpy_dtype.itemsize
        self.base, self.offset = base, int(offset)
        if base is None:
            device.activate()
            self._pointer = int(call("cuMemAlloc", max(self.nbytes, 1)))
        else:
            self._pointer = base.pointer + self.offset
        self._released = False

    @property
    def pointer(self) -> int:
        if self.is_released:
            raise RuntimeLaunchError("cuda: use of a released DeviceArray")
        return self._pointer

    @property
    def is_released(self) -> bool:
        return self._released or (self.base is not None and self.base.is_released)

    def view(self, offset: int, shape, dtype) -> "DeviceArray":
        size = int(np.prod(shape, dtype=np.int64)) * to_numpy(dtype).itemsize
        if offset < 0 or offset + size > self.nbytes:
            raise RuntimeLaunchError(f"cuda: a view of {size} bytes at offset {offset} does not fit in "
                                     f"{self.nbytes} bytes")
        return DeviceArray(self.device, shape, dtype, base=self, offset=offset)

    def copy_from_numpy(self, array) -> None:
        host = np.ascontiguousarray(array, dtype=self.numpy_dtype)
        if host.shape != self.shape:
            raise RuntimeLaunchError(f"cuda: copy of shape {host.shape} into a DeviceArray of shape {self.shape}")
        if self.nbytes:
            self.device.activate()
            call("cuMemcpyHtoD", self.pointer, host.ctypes.data, self.nbytes)

    def to_numpy(self) -> np.ndarray:
        host = np.empty(self.shape, self.numpy_dtype)
        if self.nbytes:
            self.device.activate()
            call("cuMemcpyDtoH", host.ctypes.data, self.pointer, self.nbytes)
        return host

    def release(self) -> None:
        if self.base is None and not self._released:
            self.device.activate()
            call("cuMemFree", self._pointer)
        self._released = True

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:   # interpreter shutdown or a lost context: nothing to free any more
            pass

    def __repr__(self) -> str:
        return f"cuda.DeviceArray({self.shape}, {self.dtype!r} at 0x{self._pointer:x})"


_SCALAR_CTYPES = {"bool": ctypes.c_uint8, "int8": ctypes.c_int8, "int16": ctypes.c_int16, "int32": ctypes.c_int32,
                  "int64": ctypes.c_int64, "uint8": ctypes.c_uint8, "uint16": ctypes.c_uint16,
                  "uint32": ctypes.c_uint32, "uint64": ctypes.c_uint64, "float32": ctypes.c_float,
                  "float64": ctypes.c_double}


def pack_parameters(signature, values: Sequence[Any]) -> tuple[Any, list[Any]]:
    """cuLaunchKernel's `kernelParams`: a void*[] whose i-th entry points at the i-th argument's value
    (a CUdeviceptr for buffers, the C scalar otherwise). Returns (the array, the values it points at,
    which must stay alive until the launch is enqueued)."""
    holders = []
    for param, value in zip(signature.params, values):
        if param.kind == "buffer":
            holders.append(ctypes.c_uint64(int(value)))
        else:
            kind = _SCALAR_CTYPES.get(param.dtype)
            if kind is None:
                raise RuntimeLaunchError(f"cuda: scalar parameter {param.name} of dtype {param.dtype} cannot be passed")
            holders.append(kind(value))
    array = (ctypes.c_void_p * max(len(holders), 1))(*[ctypes.addressof(h) for h in holders])
    return array, holders


class DriverKernel(KernelFunction):
    """One kernel of a loaded module; checks arguments before any copy or launch."""

    def __init__(self, module: "DriverModule", signature, function, info: dict) -> None:
        self.module, self.signature, self.function = module, signature, function
        self.geometry = launch_geometry(module.artifact, signature.name)
        self.dynamic_shared = int(info.get("dynamic_shared_bytes", 0))
        self.written = frozenset(info.get("written", [p.name for p in signature.params]))
        if self.dynamic_shared > STATIC_SHARED_LIMIT:   # past 48 KB a kernel must opt in
            device = module.device
            if self.dynamic_shared > device.max_shared_optin:
                raise CompileError(f"cuda kernel '{signature.name}' needs {self.dynamic_shared} bytes of shared "
                                   f"memory; {device.name} allows {device.max_shared_optin} per block")
            call("cuFuncSetAttribute", function,
                 api().CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, self.dynamic_shared)

    def __call__(self, *args: Any) -> None:
        from tensorkiln.sdk.native import check_arguments
        device = self.module.device
        host_args = [a for a in args if not isinstance(a, DeviceArray)]
        if host_args or len(args) != len(self.signature.params):
            check_arguments(self.signature, [a.to_numpy() if isinstance(a, DeviceArray) else a for a in args])
        self._check_device_arrays(args)
        temporaries = []
        launch_args = []
        for param, arg in zip(self.signature.params, args):
            if param.kind == "buffer" and isinstance(arg, np.ndarray):
                copy = device.from_numpy(arg)
                temporaries.append((param, arg, copy))
                arg = copy
            launch_args.append(arg)
        try:
            self.launch(launch_args)
            device.synchronize()
            for param, host, copy in temporaries:
                if param.name in self.written:
                    host[...] = copy.to_numpy()
        finally:
            for _, _, copy in temporaries:
                copy.release()

    def _check_device_arrays(self, args) -> None:
        for position, (param, arg) in enumerate(zip(self.signature.params, args)):
            if isinstance(arg, DeviceArray):
                where = f"kernel '{self.signature.name}': argument {position} '{param.name}'"
                if tuple(arg.shape) != tuple(param.shape) or arg.dtype != param.dtype:
                    raise RuntimeLaunchError(f"{where} is a DeviceArray {arg.shape} {arg.dtype}, expected "
                                             f"{tuple(param.shape)} {param.dtype}")
                if arg.device is not self.module.device:
                    raise RuntimeLaunchError(f"{where} lives on another GPU")

    def launch(self, args: Sequence[Any], stream: int = 0) -> None:
        """cuLaunchKernel on checked device arguments (DeviceArrays and scalars)."""
        values = [a.pointer if isinstance(a, DeviceArray) else a for a in args]
        params, holders = pack_parameters(self.signature, values)
        grid, block = self.geometry.grid, self.geometry.block
        self.module.device.activate()
        call("cuLaunchKernel", self.function, *grid, *block, self.dynamic_shared, stream,
             ctypes.addressof(params), 0)
        del holders


class DriverModule(LoadedModule):
    """The kernels of one artifact loaded on one GPU (cuModuleLoadData)."""

    def __init__(self, artifact: Artifact, device: CUDADevice, emitter=None) -> None:
        self.artifact, self.device = artifact, device
        image = self._image(artifact, device)
        device.activate()
        self.handle = call("cuModuleLoadData", image)
        self._functions: dict[str, DriverKernel] = {}
        for signature in artifact.kernels:
            info = artifact.metadata.get("kernels", {}).get(signature.name, {})
            function = call("cuModuleGetFunction", self.handle, artifact.kernel_symbol(signature.name).encode())
            self._functions[signature.name] = DriverKernel(self, signature, function, info)

    @staticmethod
    def _image(artifact: Artifact, device: CUDADevice) -> bytes:
        """The artifact's CUBIN when it runs on `device`, else one compiled for the device's architecture."""
        from .arch import parse_arch
        built = parse_arch(str(artifact.metadata.get("arch", "")))
        major, minor = device.compute_capability
        if artifact.binary and artifact.metadata.get("binary_format") == "ptx":
            return artifact.binary + b"\0"
        if artifact.binary and built is not None and built[0] == major and built[1] <= minor and not built[2]:
            return artifact.binary        # SASS runs on later minor versions of its major
        if artifact.binary and built is not None and (built[0], built[1]) == (major, minor):
            return artifact.binary
        from .nvrtc import compile_cuda
        return compile_cuda(artifact.source, device.arch).binary

    def get_function(self, name: str) -> DriverKernel:
        self.artifact.kernel(name)   # KeyError listing the artifact's kernels
        return self._functions[name]

    def get_source(self) -> str:
        return self.artifact.source

    def time_function(self, name: str, args: Sequence[Any], number: int, repeat: int) -> list[float]:
        """Mean seconds per launch for each of `repeat` batches of `number`, from CUDA events."""
        func = self.get_function(name)
        device_args = [self.device.from_numpy(a) if isinstance(a, np.ndarray) else a for a in args]
        func._check_device_arrays(device_args)
        start, end = call("cuEventCreate", 0), call("cuEventCreate", 0)
        try:
            func.launch(device_args)
            self.device.synchronize()
            results = []
            for _ in range(repeat):
                call("cuEventRecord", start, 0)
                for _ in range(number):
                    func.launch(device_args)
                call("cuEventRecord", end, 0)
                call("cuEventSynchronize", end)
                milliseconds = call("cuEventElapsedTime", start, end)
                results.append(float(milliseconds) * 1e-3 / max(number, 1))
            return results
        finally:
            call("cuEventDestroy", start)
            call("cuEventDestroy", end)
