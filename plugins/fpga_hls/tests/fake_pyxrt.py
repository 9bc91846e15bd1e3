"""fake_pyxrt.py: a stand-in for XRT's pyxrt with the same call surface, running C-simulation.

The "xclbin" it loads is the C-simulation library of the kernels (built by the plugin's
csim.build_library); a kernel run calls the kernel's own top function `<symbol>` (not the
float bridge) on the *device* copies of its buffer objects, so a missing bo.sync in either
direction gives wrong results, as on a board, and an ap_fixed / ap_int tensor must arrive as
the type's words (sizeof(ap_fixed<16,6>) is 2 bytes holding the value times 2**10), which
the host converts. Records what was called in `CALLS`.
"""
from __future__ import annotations

import ctypes
import enum

CALLS: list[tuple] = []


class xclBOSyncDirection(enum.Enum):
    XCL_BO_SYNC_BO_TO_DEVICE = 0
    XCL_BO_SYNC_BO_FROM_DEVICE = 1


class ert_cmd_state(enum.Enum):
    ERT_CMD_STATE_COMPLETED = 4
    ERT_CMD_STATE_ERROR = 5


class uuid:
    def __init__(self, path: str) -> None:
        self.path = path


class device:
    def __init__(self, index: int) -> None:
        CALLS.append(("device", index))
        self.library = None

    def load_xclbin(self, path: str) -> uuid:
        CALLS.append(("load_xclbin", path))
        self.library = ctypes.CDLL(path)
        return uuid(path)


class bo:
    normal = 0

    def __init__(self, dev: device, size: int, flags: int, group: int) -> None:
        CALLS.append(("bo", size, group))
        self.host = bytearray(size)
        self.device_memory = bytearray(size)

    def write(self, data: bytes, offset: int) -> None:
        self.host[offset:offset + len(data)] = data

    def read(self, size: int, offset: int) -> bytes:
        return bytes(self.host[offset:offset + size])

    def sync(self, direction: xclBOSyncDirection) -> None:
        CALLS.append(("sync", direction.name))
        if direction is xclBOSyncDirection.XCL_BO_SYNC_BO_TO_DEVICE:
            self.device_memory[:] = self.host
        else:
            self.host[:] = self.device_memory


class run:
    def __init__(self, state: ert_cmd_state) -> None:
        self.state = state

    def wait(self) -> ert_cmd_state:
        return self.state


class kernel:
    class cu_access_mode(enum.Enum):
        shared = 0
        exclusive = 1

    def __init__(self, dev: device, xclbin_uuid: uuid, name: str, mode=None) -> None:
        CALLS.append(("kernel", name))
        self.function = getattr(dev.library, name)

    def group_id(self, index: int) -> int:
        return index

    def __call__(self, *args) -> run:
        values = []
        for value in args:
            if isinstance(value, bo):
                values.append(ctypes.cast((ctypes.c_char * len(value.device_memory)).from_buffer(value.device_memory),
                                          ctypes.c_void_p))
            elif isinstance(value, float):
                values.append(ctypes.c_float(value))
            else:
                values.append(ctypes.c_int32(value))
        self.function(*values)
        CALLS.append(("run",))
        return run(ert_cmd_state.ERT_CMD_STATE_COMPLETED)
