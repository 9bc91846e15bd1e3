"""runtime.py: the OpenCL loader: pick a device, build programs, allocate, launch, time.

    loader = OpenCLLoader()
    module = loader.load(artifact, target)          # builds the program; CompileError with the log
    module.get_function("add")(a, b, c)             # numpy in, numpy out (written buffers copied back)
    c_dev = DeviceArray.empty((1024,), "float32", module.device)
    module.get_function("add")(a_dev, b_dev, c_dev) # DeviceArrays: no copies
    module.time_function("add", [a, b, c], number=10, repeat=3)   # seconds, from profiling events

Driver errors become tensorkiln errors: a failed build raises CompileError
"OpenCL build failed for kernel 'add'" followed by the build log; wrong arguments raise
RuntimeLaunchError naming the argument before anything is copied or launched.
"""
from __future__ import annotations

import threading
import warnings
from typing import Any, Sequence

import numpy as np
import pyopencl as cl

from tensorkiln.ir.dtypes import to_numpy
from tensorkiln.ir.errors import CompileError, RuntimeLaunchError, TargetError
from tensorkiln.sdk import Artifact, KernelFunction, KernelSignature, LoadedModule, RuntimeLoader, launch_geometry

__all__ = ["OpenCLDevice", "DeviceArray", "OpenCLLoader", "OpenCLModule", "OpenCLKernel", "select_device"]


class OpenCLDevice:
    """One OpenCL device with its context and an in-order profiling queue."""

    def __init__(self, device: "cl.Device") -> None:
        self.cl_device = device
        self.context = cl.Context([device])
        self.queue = cl.CommandQueue(self.context, device,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)

    @property
    def name(self) -> str:
        return self.cl_device.name.strip()

    @property
    def max_work_group_size(self) -> int:
        return int(self.cl_device.max_work_group_size)

    @property
    def max_work_item_sizes(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.cl_device.max_work_item_sizes)

    @property
    def local_mem_size(self) -> int:
        return int(self.cl_device.local_mem_size)

    @property
    def extensions(self) -> frozenset[str]:
        return frozenset(self.cl_device.extensions.split())

    def synchronize(self) -> None:
        self.queue.finish()

    def __repr__(self) -> str:
        return f"OpenCLDevice({self.name!r} on {self.cl_device.platform.name.strip()!r})"


def select_device(platform: str | None = None, index: int = 0) -> OpenCLDevice:
    """The `index`-th device of the first platform whose name contains `platform` (any when None)."""
    platforms = cl.get_platforms()
    names = [p.name.strip() for p in platforms]
    chosen = [p for p in platforms if platform is None or platform.lower() in p.name.lower()]
    if not chosen:
        raise TargetError(f"opencl: no platform matches -platform={platform!r}; installed: {', '.join(names) or 'none'}")
    devices = chosen[0].get_devices()
    if not 0 <= index < len(devices):
        raise TargetError(f"opencl: platform {chosen[0].name.strip()!r} has {len(devices)} device(s); "
                          f"-device={index} is out of range")
    return OpenCLDevice(devices[index])


class DeviceArray:
    """A dense array in an OpenCL device's global memory, possibly a view at a byte offset.

    Pass it to a kernel instead of a numpy array to skip the copies. A view
    (`DeviceArray.view(storage, offset, shape, dtype)`) shares its storage's buffer;
    the graph executor places planned values in one storage this way.
    """

    def __init__(self, device: OpenCLDevice, shape: Sequence[int], dtype: str,
                 base: "DeviceArray | None" = None, offset: int = 0) -> None:
        self.device = device
        self.shape = tuple(int(d) for d in shape)
        self.dtype = str(dtype)
        self.numpy_dtype = to_numpy(self.dtype)
        self.nbytes = int(np.prod(self.shape, dtype=np.int64)) * self.numpy_dtype.itemsize
        self.base, self.offset = base, int(offset)
        # OpenCL refuses zero-sized buffers; an empty array still owns one byte.
        self._buffer: cl.Buffer | None = None if base is not None else \
            cl.Buffer(device.context, cl.mem_flags.READ_WRITE, max(self.nbytes, 1))
        self._sub_buffer: cl.Buffer | None = None
        self._view_released = False

    @classmethod
    def empty(cls, shape: Sequence[int], dtype: str, device: OpenCLDevice) -> "DeviceArray":
        return cls(device, shape, dtype)

    @classmethod
    def from_numpy(cls, array: np.ndarray, device: OpenCLDevice) -> "DeviceArray":
        from tensorkiln.ir.dtypes import from_numpy
        array = np.asarray(array)
        result = cls(device, array.shape, from_numpy(array.dtype))
        result.copy_from_numpy(array)
        return result

    @classmethod
    def view(cls, storage: "DeviceArray", offset: int, shape: Sequence[int], dtype: str) -> "DeviceArray":
        """An array of `shape`/`dtype` over `storage`'s memory starting at byte `offset`."""
        root = storage.base or storage
        view = cls(storage.device, shape, dtype, base=root, offset=storage.offset + int(offset))
        if view.offset < 0 or view.offset + view.nbytes > root.nbytes:
            raise RuntimeLaunchError(f"view of {view.nbytes} bytes at offset {view.offset} does not fit in a "
                                     f"storage of {root.nbytes} bytes")
        return view

    @property
    def buffer(self) -> "cl.Buffer | None":
        """The whole storage buffer (a view's `offset` says where it starts)."""
        if self._view_released:
            return None
        return self._buffer if self.base is None else self.base._buffer

    @property
    def is_released(self) -> bool:
        return self.buffer is None

    def _live_buffer(self) -> "cl.Buffer":
        if self.buffer is None:
            raise RuntimeLaunchError(f"DeviceArray {self.shape} {self.dtype} was released")
        return self.buffer

    def kernel_buffer(self) -> "cl.Buffer | None":
        """A buffer starting at this array's first element, or None when the offset is misaligned
        for a sub-buffer (the kernel then runs on a temporary copy)."""
        buffer = self._live_buffer()
        if self.offset == 0:
            return buffer
        if self.offset % (self.device.cl_device.mem_base_addr_align // 8):
            return None
        if self._sub_buffer is None:
            self._sub_buffer = buffer.get_sub_region(self.offset, max(self.nbytes, 1))
        return self._sub_buffer

    def copy_from_numpy(self, array: np.ndarray) -> None:
        """Copy `array` (same shape and dtype) to the device and wait."""
        array = np.asarray(array)
        array = np.ascontiguousarray(array).reshape(array.shape)  # ascontiguousarray turns () into (1,)
        if array.shape != self.shape or array.dtype != self.numpy_dtype:
            raise RuntimeLaunchError(f"cannot copy a {array.shape} {array.dtype} array into a DeviceArray of "
                                     f"{self.shape} {self.dtype}")
        if self.nbytes:
            cl.enqueue_copy(self.device.queue, self._live_buffer(), array, dst_offset=self.offset, is_blocking=True)

    def to_numpy(self) -> np.ndarray:
        """A new numpy array holding the device data (waits for pending kernels)."""
        result = np.empty(self.shape, self.numpy_dtype)
        if self.nbytes:
            cl.enqueue_copy(self.device.queue, result, self._live_buffer(), src_offset=self.offset, is_blocking=True)
        return result

    def release(self) -> None:
        """Free the device memory now (a view only forgets it); the array cannot be used afterwards."""
        if self._sub_buffer is not None:
            self._sub_buffer.release()
            self._sub_buffer = None
        if self._buffer is not None:
            self._buffer.release()
            self._buffer = None
        self._view_released = self.base is not None

    def __repr__(self) -> str:
        state = " released" if self.is_released else ""
        where = f" at +{self.offset}" if self.offset else ""
        return f"DeviceArray({self.shape}, {self.dtype!r}{where}{state} on {self.device.name!r})"


class OpenCLKernel(KernelFunction):
    """One kernel of a built program; checks its arguments before any copy or launch."""

    def __init__(self, module: "OpenCLModule", signature: KernelSignature, kernel: "cl.Kernel",
                 written: frozenset[str]) -> None:
        self.module, self.signature, self.kernel, self.written = module, signature, kernel, written
        self.geometry = launch_geometry(module.artifact, signature.name)
        # clSetKernelArg on one cl_kernel is not thread-safe, and the arguments belong to the
        # next enqueue: concurrent model runs (one execution state each) launch one at a time
        self._launch_lock = threading.Lock()

    def __call__(self, *args: Any) -> None:
        checked = self.check_arguments(args)
        device = self.module.device
        temporaries: list[tuple[int, DeviceArray]] = []
        launch_args = []
        for position, arg in enumerate(checked):
            if isinstance(arg, np.ndarray):
                arg = DeviceArray.from_numpy(arg, device)
                temporaries.append((position, arg))
            elif isinstance(arg, DeviceArray) and arg.kernel_buffer() is None:
                copy = DeviceArray.empty(arg.shape, arg.dtype, device)
                if arg.nbytes:  # OpenCL refuses a copy of 0 bytes (an empty view at an odd offset)
                    cl.enqueue_copy(device.queue, copy.buffer, arg.buffer, src_offset=arg.offset,
                                    byte_count=arg.nbytes)
                temporaries.append((position, copy))
                arg = copy
            launch_args.append(arg)
        try:
            self.launch(launch_args)
            for position, array in temporaries:
                if self.signature.params[position].name not in self.written or not array.nbytes:
                    continue
                target = checked[position]
                if isinstance(target, np.ndarray):
                    cl.enqueue_copy(device.queue, target, array.buffer, is_blocking=False)
                else:
                    cl.enqueue_copy(device.queue, target.buffer, array.buffer, dst_offset=target.offset,
                                    byte_count=array.nbytes)
            device.synchronize()
        finally:
            for _, array in temporaries:
                array.release()

    def launch(self, args: Sequence[Any]) -> "cl.Event":
        """Enqueue one launch on already checked device arguments; returns its event."""
        ndim = self.geometry.ndim
        with self._launch_lock:
            for position, arg in enumerate(args):
                self.kernel.set_arg(position, arg.kernel_buffer() if isinstance(arg, DeviceArray) else arg)
            return cl.enqueue_nd_range_kernel(self.module.device.queue, self.kernel,
                                              self.geometry.global_size[:ndim], self.geometry.block[:ndim])

    def check_arguments(self, args: Sequence[Any]) -> list[Any]:
        """Arguments converted for a launch; RuntimeLaunchError naming the first wrong one."""
        params = self.signature.params
        name = self.signature.name
        if len(args) != len(params):
            raise RuntimeLaunchError(f"kernel '{name}' takes {len(params)} arguments "
                                     f"({', '.join(p.name for p in params)}), got {len(args)}")
        return [self._check_one(position, param, arg) for position, (param, arg) in enumerate(zip(params, args))]

    def _check_one(self, position: int, param, arg: Any) -> Any:
        where = f"kernel '{self.signature.name}': argument {position} '{param.name}'"
        expected = to_numpy(param.dtype)
        if param.kind == "scalar":
            if isinstance(arg, (np.ndarray, DeviceArray)) or not isinstance(arg, (int, float, bool, np.generic)):
                raise RuntimeLaunchError(f"{where} is a {param.dtype} scalar, got {type(arg).__name__}")
            if expected.kind in "iub" and isinstance(arg, (float, np.floating)) and not float(arg).is_integer():
                raise RuntimeLaunchError(f"{where} is a {param.dtype} scalar, got the non-integer {arg!r}")
            return expected.type(arg)
        if isinstance(arg, DeviceArray):
            if arg.is_released:
                raise RuntimeLaunchError(f"{where} is a released DeviceArray")
            if arg.device.context != self.module.device.context:
                raise RuntimeLaunchError(f"{where} lives on {arg.device!r}, but the kernel runs on "
                                         f"{self.module.device!r}")
            shape, dtype = arg.shape, arg.numpy_dtype
        elif isinstance(arg, np.ndarray):
            shape, dtype = arg.shape, arg.dtype
            if not arg.flags.c_contiguous:
                raise RuntimeLaunchError(f"{where} is not C-contiguous; pass np.ascontiguousarray(...)")
            if param.name in self.written and not arg.flags.writeable:
                raise RuntimeLaunchError(f"{where} is written by the kernel but the numpy array is read-only")
        else:
            raise RuntimeLaunchError(f"{where} must be a numpy array or an opencl DeviceArray, "
                                     f"got {type(arg).__name__}")
        if tuple(shape) != tuple(param.shape):
            raise RuntimeLaunchError(f"{where} has shape {tuple(shape)}, expected {tuple(param.shape)}")
        if np.dtype(dtype) != expected:
            raise RuntimeLaunchError(f"{where} has dtype {np.dtype(dtype)}, expected {param.dtype}")
        return arg


class OpenCLModule(LoadedModule):
    """The kernels of one artifact, built for one device."""

    def __init__(self, artifact: Artifact, device: OpenCLDevice, program: "cl.Program") -> None:
        self.artifact, self.device, self.program = artifact, device, program
        self._functions: dict[str, OpenCLKernel] = {}
        for signature in artifact.kernels:
            info = artifact.metadata.get("kernels", {}).get(signature.name, {})
            kernel = cl.Kernel(program, info.get("symbol", signature.name))
            self._functions[signature.name] = OpenCLKernel(self, signature, kernel,
                                                           frozenset(info.get("written", [p.name for p in signature.params])))
            _check_kernel_fits(self._functions[signature.name], device, info)

    def get_function(self, name: str) -> OpenCLKernel:
        try:
            return self._functions[name]
        except KeyError:
            raise KeyError(f"module has no kernel {name!r}; it has {sorted(self._functions)}") from None

    def get_source(self) -> str:
        return self.artifact.source

    def time_function(self, name: str, args: Sequence[Any], number: int, repeat: int) -> list[float]:
        """Mean seconds per launch for each of `repeat` batches of `number`, from profiling events."""
        func = self.get_function(name)
        checked = func.check_arguments(args)
        device_args, temporaries = [], []
        for arg in checked:
            if isinstance(arg, np.ndarray) or (isinstance(arg, DeviceArray) and arg.kernel_buffer() is None):
                arg = DeviceArray.from_numpy(arg if isinstance(arg, np.ndarray) else arg.to_numpy(), self.device)
                temporaries.append(arg)
            device_args.append(arg)
        try:
            func.launch(device_args).wait()   # warm up
            results = []
            for _ in range(repeat):
                events = [func.launch(device_args) for _ in range(number)]
                cl.wait_for_events(events)
                results.append(sum(e.profile.end - e.profile.start for e in events) * 1e-9 / max(number, 1))
            return results
        finally:
            for array in temporaries:
                array.release()


def _check_kernel_fits(func: OpenCLKernel, device: OpenCLDevice, info: dict) -> None:
    geometry, name = func.geometry, func.signature.name
    limit = min(device.max_work_group_size,
                int(func.kernel.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, device.cl_device)))
    if geometry.threads_per_block > limit:
        raise CompileError(f"kernel '{name}' needs {geometry.threads_per_block} work-items per work-group "
                           f"(block {geometry.block}), but {device.name!r} allows {limit}; bind smaller "
                           "threadIdx extents")
    for axis, (size, most) in enumerate(zip(geometry.block, device.max_work_item_sizes)):
        if size > most:
            raise CompileError(f"kernel '{name}': threadIdx.{'xyz'[axis]} has {size} work-items, but "
                               f"{device.name!r} allows {most} in that dimension")
    shared = int(info.get("shared_bytes", 0))
    if shared > device.local_mem_size:
        raise CompileError(f"kernel '{name}' uses {shared} bytes of shared (__local) memory, but "
                           f"{device.name!r} has {device.local_mem_size}; use smaller cache_read tiles")


class OpenCLLoader(RuntimeLoader):
    """Artifact -> OpenCLModule; owns one OpenCLDevice per (platform, device) option pair.

    Called by tensorkiln.build and the graph runtime through the plugin's TargetSpec; the
    conformance kit also calls `empty` / `from_numpy` to test allocation and copies.
    """

    def __init__(self) -> None:
        self._devices: dict[tuple[str | None, int], OpenCLDevice] = {}

    def device(self, target: Any = None) -> OpenCLDevice:
        """The device a target's -platform / -device options name (first device by default)."""
        options = dict(getattr(target, "options", None) or {})
        key = (options.get("platform"), int(options.get("device", 0)))
        if key not in self._devices:
            self._devices[key] = select_device(*key)
        return self._devices[key]

    uses_host_memory = False

    def describe_device(self, target: Any = None) -> str:
        device = self.device(target)
        platform = device.cl_device.platform
        return f"OpenCL {platform.name.strip()} {platform.version.strip()}: {device.name}"

    def empty(self, shape: Sequence[int], dtype: str, target: Any = None) -> DeviceArray:
        return DeviceArray.empty(shape, dtype, self.device(target))

    def to_device(self, array: Any, target: Any = None) -> DeviceArray:
        return DeviceArray.from_numpy(np.asarray(array), self.device(target))

    from_numpy = to_device

    def copy_into(self, device_array: DeviceArray, array: Any) -> None:
        device_array.copy_from_numpy(np.asarray(array))

    def view(self, storage: DeviceArray, offset: int, shape: Sequence[int], dtype: str) -> DeviceArray:
        return DeviceArray.view(storage, offset, shape, dtype)

    def to_host(self, device_array: DeviceArray) -> np.ndarray:
        return device_array.to_numpy()

    def load(self, artifact: Artifact, target: Any = None) -> OpenCLModule:
        if artifact.format != "opencl-c":
            raise CompileError(f"the opencl loader runs 'opencl-c' artifacts, got {artifact.format!r}")
        device = self.device(target)
        names = ", ".join(f"'{k.name}'" for k in artifact.kernels) or "(none)"
        if "cl_khr_fp64" in artifact.source and "cl_khr_fp64" not in device.extensions:
            raise CompileError(f"kernel {names} uses float64, but {device.name!r} has no cl_khr_fp64")
        if "cl_khr_fp16" in artifact.source and "cl_khr_fp16" not in device.extensions:
            raise CompileError(f"kernel {names} uses float16, but {device.name!r} has no cl_khr_fp16")
        program = cl.Program(device.context, artifact.source)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", cl.CompilerWarning)
                program.build(options=["-cl-std=CL1.2"])
        except cl.Error as error:
            raise CompileError(f"OpenCL build failed for kernel {names} on {device.name!r}:\n"
                               f"{_build_log(program, device, error)}\n--- source ---\n"
                               f"{_numbered(artifact.source)}") from None
        return OpenCLModule(artifact, device, program)


def _build_log(program: "cl.Program", device: OpenCLDevice, error: Exception) -> str:
    try:
        log = program.get_build_info(device.cl_device, cl.program_build_info.LOG)
    except cl.Error:
        log = ""
    return (log or str(error)).strip()


def _numbered(source: str) -> str:
    return "\n".join(f"{number:4d}  {line}" for number, line in enumerate(source.splitlines(), 1))
