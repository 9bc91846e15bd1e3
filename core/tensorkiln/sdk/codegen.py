"""What a target plugin provides to turn loop IR into something that runs.

Two roles, kept apart so a vendor can reuse one and replace the other:

- an `Emitter` turns PrimFuncs into an `Artifact` (source text and, where the
  target has one, a binary). The core calls it from `tensorkiln.build` and from the
  graph compiler, once per group of kernels.
- a `RuntimeLoader` turns an `Artifact` into a `LoadedModule` whose functions take
  numpy arrays (or the loader's device arrays), check them, and run.

Both are plain classes; a plugin hands instances to the core through its
`TargetSpec` (see `tensorkiln.sdk.target`).
"""
from __future__ import annotations

import abc
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

__all__ = ["ParamSpec", "KernelSignature", "Artifact", "Emitter", "RuntimeLoader", "LoadedModule",
           "KernelFunction", "signature_of"]


@dataclass(frozen=True)
class ParamSpec:
    """One kernel parameter as the runtime must check it."""

    name: str
    kind: str                     # "buffer" or "scalar"
    dtype: str
    shape: tuple[int, ...] = ()   # static shape of a buffer parameter


@dataclass(frozen=True)
class KernelSignature:
    name: str
    params: tuple[ParamSpec, ...]


@dataclass(frozen=True)
class Artifact:
    """The output of an emitter: everything needed to load and run the kernels again.

    `format` names the payload ("llvm-ir", "opencl-c", "c", ...). `source` is the
    human-readable text (`get_source()`); `binary` is optional compiled code;
    `sources` holds other views (e.g. {"asm": ...}). Everything here is plain data so
    it can be written into a model package without pickle.

    Kernels are named by their PrimFunc (`kernels[i].name`, what `get_function` takes).
    Where the code calls a kernel something else, the emitter records it as
    `metadata["kernels"][name]["symbol"]` (CSourceEmitter renames a kernel called
    `main` or `int` to `main_1`); a loader looks the function up by `kernel_symbol(name)`.
    A loader that adds entry points of its own (packed wrappers) records them as
    `metadata["symbols"][name]`, which `tensorkiln.sdk.native.NativeModule` looks up.
    """

    target: str
    format: str
    source: str
    kernels: tuple[KernelSignature, ...]
    binary: bytes | None = None
    sources: dict[str, str] = field(default_factory=dict)
    metadata: dict[str, Any] = field(default_factory=dict)

    def kernel(self, name: str) -> KernelSignature:
        for k in self.kernels:
            if k.name == name:
                return k
        raise KeyError(f"artifact has no kernel {name!r}; it has {[k.name for k in self.kernels]}")

    def kernel_symbol(self, name: str) -> str:
        """The name kernel `name` has in the emitted code: the emitter's record, else `name` itself.

            artifact = CSourceEmitter().emit([func_named_main])
            artifact.kernel_symbol("main")      # "main_1": the C function a loader must call
        """
        self.kernel(name)   # raises KeyError naming the kernels when there is none
        kernels = self.metadata.get("kernels")
        info = kernels.get(name) if isinstance(kernels, dict) else None
        symbol = info.get("symbol") if isinstance(info, dict) else None
        return symbol or name


class Emitter(abc.ABC):
    """Loop IR -> Artifact for one target. Called by the core's build driver."""

    @abc.abstractmethod
    def emit(self, funcs: Sequence[Any], target: Any) -> Artifact:
        """Compile `funcs` (tir.PrimFunc) for `target` (a resolved tensorkiln Target)."""

    def emit_stream(self, funcs: Iterable[Any], target: Any, count: int) -> Artifact:
        """Compile `count` kernels that arrive one at a time from `funcs`, as the driver lowers them.

        The driver calls this, not `emit`: an emitter that can start on the first kernels before the
        last is lowered (cpu_llvm optimises chunks of them in worker processes meanwhile) overrides
        it, and lowering then overlaps code generation. The artifact must run as `emit`'s of the same
        kernels does. The default collects every kernel and calls `emit`.
        """
        return self.emit(list(funcs), target)


class KernelFunction(abc.ABC):
    """A loaded kernel. Calling it checks every argument before any memory is touched."""

    signature: KernelSignature

    @abc.abstractmethod
    def __call__(self, *args: Any) -> None: ...

    def bind(self, *args: Any) -> Callable[[], None]:
        """A call of this kernel on `args` that can be made again and again.

        The executor binds each step once per execution state (its arguments are the same
        arrays every run), so a loader may check and pack the arguments here, once, instead
        of at every launch. The default binds nothing in advance.
        """
        return functools.partial(self, *args)


class LoadedModule(abc.ABC):
    """Kernels of one artifact, loaded on a device."""

    artifact: Artifact
    plan_entry_control_flow: bool = False
    """Whether `build_plan_entry` runs control-flow steps (`PlanEntryStep.control`: If, Loop, Scan);
    else the executor gives it none and runs them in Python between native calls."""
    plan_entry_index_checks: bool = False
    """Whether `build_plan_entry` checks gather indices (`PlanEntryStep.checks`) before a kernel; else
    the executor checks them in Python between native calls."""

    @abc.abstractmethod
    def get_function(self, name: str) -> KernelFunction: ...

    def export_library(self, path: str) -> None:
        """Write a file that `tensorkiln.runtime.load_module` can load again."""
        raise NotImplementedError(f"{type(self).__name__} cannot export a library")  # optional capability

    def build_plan_entry(self, spec: Any) -> Any:
        """A `tensorkiln.sdk.plan_entry.PlanEntry` running every step of `spec` (a `PlanEntrySpec`) in
        one native call, or None (the default: the executor calls each kernel from Python).

        Called by the graph executor once per model, when every step of its plan runs on this
        module's target (sdk_docs/native_abi.md, "Whole-plan entry"). Optional capability.
        """
        return None

    def time_function(self, name: str, args: Sequence[Any], number: int, repeat: int) -> list[float]:
        """Mean seconds per call of each of `repeat` batches of `number` calls.

        Loaders override this with device-side timing (events); the default uses the
        host clock around a synchronous call.
        """
        import time
        func = self.get_function(name)
        func(*args)  # warm up: first call may compile or page in
        results = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                func(*args)
            results.append((time.perf_counter() - start) / number)
        return results


class RuntimeLoader(abc.ABC):
    """Artifact -> LoadedModule. Also owns device memory (graph executor, conformance kit).

    Host-memory targets (CPUs) keep the defaults below: device arrays are numpy
    arrays and the graph executor places them in one planned arena. A device
    target overrides `uses_host_memory`, `empty`, `to_device` and `to_host`.
    """

    uses_host_memory: bool = True

    @abc.abstractmethod
    def load(self, artifact: Artifact, target: Any) -> LoadedModule: ...

    def empty(self, shape: tuple[int, ...], dtype: str, target: Any = None) -> Any:
        """Allocate an uninitialised array on the device (host memory: 64-byte aligned, sdk/host_arrays.py)."""
        from ..ir.dtypes import to_numpy
        from .host_arrays import aligned_empty
        return aligned_empty(shape, to_numpy(dtype))

    def to_device(self, array: Any, target: Any = None) -> Any:
        """Copy a numpy array to a new device array (host memory: 64-byte aligned)."""
        import numpy as np
        from .host_arrays import aligned_empty
        array = np.asarray(array)
        out = aligned_empty(array.shape, array.dtype)
        out[...] = array
        return out

    def availability_note(self) -> str:
        """One line on how this machine runs the target, shown by `tensorkiln targets` ("" = nothing to
        add): e.g. a GPU target that compiles here but, with no driver, runs kernels on a CPU shim."""
        return ""

    def describe_device(self, target: Any = None) -> str:
        """One line naming the device, for reports (conformance, benchmarks)."""
        import platform
        return f"host CPU {platform.machine()} {platform.processor() or ''}".strip()

    def copy_into(self, device_array: Any, array: Any) -> None:
        """Copy a numpy array into an existing device array of the same shape and dtype."""
        import numpy as np
        np.copyto(device_array, array)

    def view(self, storage: Any, offset: int, shape: tuple[int, ...], dtype: str) -> Any:
        """An array of `shape`/`dtype` over `storage` (a uint8 array from `empty`) at byte `offset`.

        The graph executor places planned values in shared storages this way.
        """
        import numpy as np
        from ..ir.dtypes import to_numpy
        np_dtype = to_numpy(dtype)
        count = int(np.prod(shape, dtype=np.int64))
        return storage[offset:offset + count * np_dtype.itemsize].view(np_dtype).reshape(shape)

    def to_host(self, device_array: Any) -> Any:
        """Copy a device array to a new numpy array."""
        import numpy as np
        return np.array(device_array, copy=True)


def signature_of(func: Any) -> KernelSignature:
    """The KernelSignature of a tir.PrimFunc (static shapes only)."""
    from ..tir import nodes as tir

    params = []
    for p in func.params:
        if isinstance(p, tir.Buffer):
            shape = []
            for dim in p.shape:
                if not isinstance(dim, tir.IntImm):
                    raise ValueError(f"kernel {func.name}: buffer {p.name} has a non-constant dimension {dim}")
                shape.append(dim.value)
            params.append(ParamSpec(p.name, "buffer", p.dtype, tuple(shape)))
        else:
            params.append(ParamSpec(p.name, "scalar", p.dtype))
    return KernelSignature(func.name, tuple(params))


