"""tensorkiln target plugin `opencl`: OpenCL C from the SDK's C-source emitter, run through pyopencl."""
from .emitter import OpenCLEmitter
from .runtime import DeviceArray, OpenCLDevice, OpenCLKernel, OpenCLLoader, OpenCLModule, select_device

__all__ = ["OpenCLEmitter", "OpenCLLoader", "OpenCLModule", "OpenCLKernel", "OpenCLDevice", "DeviceArray",
           "select_device"]
