"""test_cuda_driver.py: the driver-API loader against a fake `cuda.bindings.driver` with the same call surface.

The fake keeps "device memory" in host bytearrays, decodes cuLaunchKernel's packed
kernelParams (a void*[] of pointers to each argument) and runs the kernel's meaning with
numpy, so a wrong argument order, a wrong pointer or a wrong copy shows up as a wrong
result. Without a real driver the target says "no CUDA driver" and compiling still works.
"""
from __future__ import annotations

import ctypes
import struct
import types

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te
from tensorkiln.ir.errors import RuntimeLaunchError
from tensorkiln.sdk.codegen import KernelSignature, ParamSpec

from cuda_helpers import bind_1d
from tensorkiln_cuda import driver
from tensorkiln_cuda.driver import CUDADevice, DriverModule, DriverUnavailable, driver_status, pack_parameters

_ATTRIBUTES = {"CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR": "major",
               "CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR": "minor",
               "CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": "optin"}


class FakeDriver:
    """cuda.bindings.driver's calls used by the loader; every call returns (CUresult, values...)."""

    CUdevice_attribute = types.SimpleNamespace(**{name: name for name in _ATTRIBUTES})
    CUfunction_attribute = types.SimpleNamespace(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES="max_dynamic_smem")

    def __init__(self, capability=(9, 0), kernels=None):
        self.capability = capability
        self.kernels = kernels or {}       # symbol -> fn(fake, pointers) run at launch
        self.memory: dict[int, bytearray] = {}
        self.next_address = 0x7000_0000
        self.launches, self.attributes, self.images, self.current = [], [], [], None

    # -- device and context
    def cuInit(self, flags):
        return (0,)

    def cuDeviceGetCount(self):
        return 0, 1

    def cuDeviceGet(self, index):
        return 0, index

    def cuDevicePrimaryCtxRetain(self, device):
        return 0, f"context{device}"

    def cuCtxSetCurrent(self, context):
        self.current = context
        return (0,)

    def cuCtxSynchronize(self):
        return (0,)

    def cuDeviceGetName(self, length, device):
        return 0, b"Fake H200\0\0"

    def cuDeviceGetAttribute(self, attribute, device):
        values = {"major": self.capability[0], "minor": self.capability[1], "optin": 232448}
        return 0, values[_ATTRIBUTES[attribute]]

    def cuGetErrorName(self, error):
        return 0, b"CUDA_ERROR_FAKE"

    # -- memory
    def cuMemAlloc(self, size):
        address = self.next_address
        self.memory[address] = bytearray(size)
        self.next_address += (size + 255) // 256 * 256 + 256
        return 0, address

    def cuMemFree(self, address):
        del self.memory[int(address)]
        return (0,)

    def _find(self, address, size):
        for base, data in self.memory.items():
            if base <= address and address + size <= base + len(data):
                return data, address - base
        raise AssertionError(f"fake driver: {size} bytes at 0x{address:x} are outside every allocation")

    def cuMemcpyHtoD(self, device, host, size):
        data, offset = self._find(int(device), size)
        data[offset:offset + size] = ctypes.string_at(host, size)
        return (0,)

    def cuMemcpyDtoH(self, host, device, size):
        data, offset = self._find(int(device), size)
        ctypes.memmove(host, bytes(data[offset:offset + size]), size)
        return (0,)

    def array(self, address, shape, dtype):
        size = int(np.prod(shape)) * np.dtype(dtype).itemsize
        data, offset = self._find(address, size)
        return np.frombuffer(data, dtype, count=int(np.prod(shape)), offset=offset).reshape(shape)

    # -- modules and launches
    def cuModuleLoadData(self, image):
        self.images.append(bytes(image))
        return 0, "module"

    def cuModuleGetFunction(self, module, name):
        return 0, name.decode()

    def cuFuncSetAttribute(self, function, attribute, value):
        self.attributes.append((function, attribute, value))
        return (0,)

    def cuLaunchKernel(self, function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
        count = self.kernels[function][0]
        slots = (ctypes.c_void_p * count).from_address(params)
        pointers = [ctypes.c_uint64.from_address(slot).value for slot in slots]
        self.launches.append({"function": function, "grid": (gx, gy, gz), "block": (bx, by, bz),
                              "shared": shared, "pointers": pointers, "context": self.current})
        self.kernels[function][1](self, pointers)
        return (0,)

    # -- events
    def cuEventCreate(self, flags):
        return 0, object()

    def cuEventRecord(self, event, stream):
        return (0,)

    def cuEventSynchronize(self, event):
        return (0,)

    def cuEventElapsedTime(self, start, end):
        return 0, 0.5

    def cuEventDestroy(self, event):
        return (0,)


@pytest.fixture
def fake():
    created = []

    def install(**kwargs):
        fake_driver = FakeDriver(**kwargs)
        driver.use_driver_module(fake_driver)
        created.append(fake_driver)
        return fake_driver
    yield install
    driver.use_driver_module(None)


def _add_artifact(emitter, n=1000, arch="sm_90"):
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    s = te.create_schedule(C.op)
    bind_1d(s, C, 128)
    return emitter.emit([te.lower(s, [A, B, C], name="axpy")], tk.target(f"cuda -arch={arch}"))


def _axpy(fake_driver, pointers):
    a, b, c = (fake_driver.array(p, (1000,), "float32") for p in pointers)
    c[...] = a + b * 2.0


def test_launch_packs_pointers_in_order_and_uses_the_recorded_geometry(fake, emitter):
    fake_driver = fake(kernels={"axpy": (3, _axpy)})
    artifact = _add_artifact(emitter)
    module = DriverModule(artifact, CUDADevice(0))
    a, b = np.arange(1000, dtype="float32"), np.full(1000, 0.25, "float32")
    c = np.zeros(1000, "float32")
    module.get_function("axpy")(a, b, c)
    np.testing.assert_array_equal(c, a + 0.5)
    (launch,) = fake_driver.launches
    assert launch["grid"] == (8, 1, 1) and launch["block"] == (128, 1, 1) and launch["shared"] == 0
    assert launch["context"] == "context0"
    assert fake_driver.images == [artifact.binary]               # the sm_90 CUBIN, as compiled
    assert not fake_driver.memory                                 # the temporaries were freed
    assert module.time_function("axpy", [a, b, c], number=4, repeat=2) == [0.5e-3 / 4] * 2


def test_device_arrays_skip_copies_and_views_offset_the_pointer(fake, emitter):
    fake_driver = fake(kernels={"axpy": (3, _axpy)})
    device = CUDADevice(0)
    module = DriverModule(_add_artifact(emitter), device)
    storage = device.empty((3 * 4096,), "uint8")
    a, b, c = (storage.view(offset, (1000,), "float32") for offset in (0, 4096, 8192))
    a.copy_from_numpy(np.ones(1000, "float32"))
    b.copy_from_numpy(np.arange(1000, dtype="float32"))
    module.get_function("axpy")(a, b, c)
    assert fake_driver.launches[0]["pointers"] == [storage.pointer, storage.pointer + 4096, storage.pointer + 8192]
    np.testing.assert_array_equal(c.to_numpy(), 1 + 2 * np.arange(1000, dtype="float32"))
    with pytest.raises(RuntimeLaunchError, match="argument 2 'C' is a DeviceArray \\(999,\\)"):
        module.get_function("axpy")(a, b, storage.view(0, (999,), "float32"))


def test_a_cubin_for_another_architecture_is_compiled_again_for_the_device(fake, emitter):
    fake_driver = fake(capability=(8, 9), kernels={"axpy": (3, _axpy)})
    DriverModule(_add_artifact(emitter, arch="sm_90"), CUDADevice(0))
    (image,) = fake_driver.images
    e_flags = struct.unpack_from("<I", image, 0x30)[0]
    assert image[:4] == b"\x7fELF" and (e_flags >> 8) & 0xFF == 0x59   # sm_89, as cuobjdump reads "sm=89"


def test_dynamic_shared_memory_past_48kb_sets_the_attribute(fake, emitter):
    n = 16384
    A, B = te.placeholder((n,), name="A"), te.placeholder((n,), name="B")
    C = te.compute((n,), lambda i: A[i] + B[i], name="C")
    s = te.create_schedule(C.op)
    caches = [s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])]
    bx, _ = s[C].split(C.op.axis[0], factor=n)
    s[C].bind(bx, te.thread_axis("blockIdx.x"))
    for cache in caches:
        s[cache].compute_at(s[C], bx)
        s[cache].bind(s[cache].split(s[cache].op.axis[0], factor=256)[1], te.thread_axis("threadIdx.x"))
    artifact = emitter.emit([te.lower(s, [A, B, C], name="wide")], tk.target("cuda -arch=sm_90"))
    fake_driver = fake(kernels={"wide": (3, lambda f, p: None)})
    module = DriverModule(artifact, CUDADevice(0))
    assert fake_driver.attributes == [("wide", "max_dynamic_smem", 2 * n * 4)]
    module.get_function("wide")(*(np.zeros(n, "float32") for _ in range(3)))
    assert fake_driver.launches[0]["shared"] == 2 * n * 4 and fake_driver.launches[0]["block"] == (256, 1, 1)


def test_scalars_are_packed_as_their_c_types():
    signature = KernelSignature("k", (ParamSpec("x", "buffer", "float32", (4,)), ParamSpec("n", "scalar", "int32"),
                                      ParamSpec("alpha", "scalar", "float32"), ParamSpec("m", "scalar", "int64")))
    array, holders = pack_parameters(signature, [0xDEAD_BEEF_0000, 7, 1.5, -3])
    slots = [array[i] for i in range(4)]
    assert ctypes.c_uint64.from_address(slots[0]).value == 0xDEAD_BEEF_0000
    assert ctypes.c_int32.from_address(slots[1]).value == 7
    assert ctypes.c_float.from_address(slots[2]).value == 1.5
    assert ctypes.c_int64.from_address(slots[3]).value == -3


def test_failed_dlopen_becomes_the_no_driver_reason(fake, emitter):
    fake_driver = fake()
    fake_driver.cuInit = lambda flags: (_ for _ in ()).throw(RuntimeError("Failed to dlopen libcuda.so.1"))
    status = driver_status()
    assert not status.available and status.reason.startswith("no CUDA driver: Failed to dlopen libcuda.so.1")
    with pytest.raises(DriverUnavailable, match="cuda -device=0: no CUDA driver: Failed to dlopen libcuda.so.1"):
        tk.build(*_axpy_schedule(), target="cuda -device=0")
    # compiling and the resource checks keep working, and auto runs on the shim
    assert _add_artifact(emitter).metadata["resources"]["axpy"]["registers"] > 0
    assert tk.target("cuda").spec.loader.mode(tk.target("cuda")) == "cpu_shim"


def _axpy_schedule():
    A = te.placeholder((64,), name="A")
    C = te.compute((64,), lambda i: A[i] + 1.0, name="C")
    s = te.create_schedule(C.op)
    bind_1d(s, C, 32)
    return s, [A, C]


def test_launch_error_names_the_call(fake, emitter):
    fake_driver = fake(kernels={"axpy": (3, _axpy)})
    module = DriverModule(_add_artifact(emitter), CUDADevice(0))
    fake_driver.cuLaunchKernel = lambda *args: (700,)
    with pytest.raises(RuntimeLaunchError, match="cuLaunchKernel failed with CUDA_ERROR_FAKE"):
        module.get_function("axpy")(*(np.zeros(1000, "float32") for _ in range(3)))


@pytest.mark.gpu
def test_axpy_on_a_real_gpu_matches_numpy():
    status = driver_status()
    if not status.available:
        pytest.skip(f"cuda: {status.reason}")
    f = tk.build(*_axpy_schedule(), target="cuda -device=0 -arch=native")
    a = np.arange(64, dtype="float32")
    c = np.zeros(64, "float32")
    f(a, c)
    np.testing.assert_array_equal(c, a + 1)
