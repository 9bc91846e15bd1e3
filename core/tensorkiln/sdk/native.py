"""sdk/native.py: The native calling convention shared by every plugin that produces machine code.

Who uses it: a plugin whose emitter produces native code (cpu_llvm, a plain-C
plugin) makes each kernel a C-ABI *packed function*, and runs it through
`NativeKernel`; `tensorkiln.runtime.load_module` loads an exported shared library
through `load_native_library` without the plugin's compiler (no llvmlite).

The ABI, as C::

    typedef struct TKArg {
      void*          data;        // buffer base address; NULL for scalar parameters
      const int64_t* shape;       // ndim extents
      const int64_t* strides;     // element strides, or NULL when the array is C-contiguous
      int32_t        ndim;        // 0 for scalar parameters
      uint8_t        dtype_code;  // DTYPE_CODES: 0 int, 1 uint, 2 float, 3 bool, 4 handle, 5 bfloat
      uint8_t        dtype_bits;
      uint16_t       dtype_lanes;
      union { int64_t i; double f; } value;  // scalar parameters: ints in .i, floats in .f
    } TKArg;                       // 40 bytes

    int32_t NAME(TKArg* args, int32_t nargs);   // 0 on success, else an error code

Generated code checks nargs, then for every argument its ndim, dtype, data
pointer, shape and strides, *before* it touches memory, and returns the first
mismatch as `encode_error(argument_index, field, dim)`. The Python side checks the
same things first (a non-contiguous or wrong-dtype array never reaches native
code) and turns any code into a `RuntimeLaunchError` naming kernel, argument and
field.

An exported library also defines `char tensorkiln_metadata[]` (JSON: format
version, target, kernel signatures, and under "cpu_features" the instruction-set
features its code may use, checked against the running CPU before a kernel is
looked up: code for a CPU this one is not raises TargetError, never SIGILL) and may define `int32_t tensorkiln_num_threads`
(threads for parallel loops; 0 = all cores), which `set_num_threads` writes.

`TKARG_HEADER` is this ABI as a C header (the struct, the error codes, `TK_ERROR`)
for plugins that write C; `tensorkiln.sdk.native_c` generates the packed wrappers
from it and builds a loadable module (sdk_docs/native_abi.md).
"""
from __future__ import annotations

import ctypes
import functools
import json
import numbers
import struct
import weakref
from typing import Any, Iterable, Sequence

import numpy as np

from ..ir.dtypes import dtype_of, to_numpy, to_python
from ..ir.errors import ArtifactError, RuntimeLaunchError, TargetError
from .arg_checks import WriteCheckedKernel, written_params
from .codegen import Artifact, KernelFunction, KernelSignature, LoadedModule, ParamSpec

__all__ = [
    "TKArg", "TKARG_HEADER", "DTYPE_CODES", "ERROR_NARGS", "FIELD_NDIM", "FIELD_DTYPE", "FIELD_DATA", "FIELD_STRIDES",
    "FIELD_SHAPE", "encode_error", "describe_error", "check_arguments", "NativeKernel", "NativeModule",
    "METADATA_SYMBOL", "NUM_THREADS_SYMBOL", "METADATA_FORMAT_VERSION", "metadata_json", "read_metadata",
    "load_native_library", "set_num_threads", "get_num_threads", "CPU_FEATURES_METADATA_KEY", "host_cpu_features",
    "check_cpu_features",
]


class TKArg(ctypes.Structure):
    """One argument of a packed native kernel (see the module docstring for the C layout)."""

    class _Value(ctypes.Union):
        _fields_ = [("i", ctypes.c_int64), ("f", ctypes.c_double)]

    _fields_ = [
        ("data", ctypes.c_void_p),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("ndim", ctypes.c_int32),
        ("dtype_code", ctypes.c_uint8),
        ("dtype_bits", ctypes.c_uint8),
        ("dtype_lanes", ctypes.c_uint16),
        ("value", _Value),
    ]


DTYPE_CODES = {"int": 0, "uint": 1, "float": 2, "bool": 3, "handle": 4, "bfloat": 5}

ERROR_NARGS = 1
"""Returned when nargs differs from the kernel's parameter count."""
FIELD_NDIM, FIELD_DTYPE, FIELD_DATA, FIELD_STRIDES, FIELD_SHAPE = 1, 2, 3, 4, 16
"""Which field of argument i was wrong; FIELD_SHAPE + d names dimension d."""

METADATA_SYMBOL = "tensorkiln_metadata"
NUM_THREADS_SYMBOL = "tensorkiln_num_threads"
METADATA_FORMAT_VERSION = 1

TKARG_HEADER = f"""\
/* tensorkiln native ABI (tensorkiln.sdk.native): TKArg and the codes of a packed function.
   int32_t NAME(TKArg* args, int32_t nargs) returns 0, or TK_ERROR(argument index, TK_FIELD_...). */
#ifndef TENSORKILN_ABI_H
#define TENSORKILN_ABI_H
#include <stddef.h>
#include <stdint.h>

typedef struct TKArg {{
  void* data;               /* buffer base address; NULL for scalar parameters */
  const int64_t* shape;     /* ndim extents */
  const int64_t* strides;   /* element strides, or NULL when the array is C-contiguous */
  int32_t ndim;             /* 0 for scalar parameters */
  uint8_t dtype_code;       /* {", ".join(f"{code} {kind}" for kind, code in DTYPE_CODES.items())} */
  uint8_t dtype_bits;
  uint16_t dtype_lanes;
  union {{ int64_t i; double f; }} value;   /* scalar parameters: ints in .i, floats in .f */
}} TKArg;                    /* {ctypes.sizeof(TKArg)} bytes */

#define TK_ERROR_NARGS {ERROR_NARGS}
#define TK_FIELD_NDIM {FIELD_NDIM}
#define TK_FIELD_DTYPE {FIELD_DTYPE}
#define TK_FIELD_DATA {FIELD_DATA}
#define TK_FIELD_STRIDES {FIELD_STRIDES}
#define TK_FIELD_SHAPE {FIELD_SHAPE}   /* + the dimension */
#define TK_ERROR(index, field) ((int32_t)((((index) + 1) << 8) | (field)))

#endif
"""
"""The ABI as C text: paste it before C that reads TKArgs (tensorkiln.sdk.native_c does)."""


def encode_error(argument_index: int, field: int, dim: int = 0) -> int:
    """The error code generated code returns for argument `argument_index` (0-based)."""
    return ((argument_index + 1) << 8) | (field + dim if field == FIELD_SHAPE else field)


def dtype_fields(dtype: str) -> tuple[int, int, int]:
    """(code, bits, lanes) of a dtype as TKArg stores them."""
    parsed = dtype_of(dtype)
    return DTYPE_CODES[parsed.kind], parsed.bits, parsed.lanes


# -- checks on the Python side -------------------------------------------------------------


def _argument_label(signature: KernelSignature, index: int) -> str:
    return f"{signature.name}: argument {index} {signature.params[index].name!r}"


def _check_scalar(signature: KernelSignature, index: int, spec: ParamSpec, value: Any) -> None:
    label = _argument_label(signature, index)
    parsed = dtype_of(spec.dtype)
    if isinstance(value, np.ndarray) or not isinstance(value, (numbers.Number, np.generic)):
        raise RuntimeLaunchError(f"{label} must be a Python number of dtype {spec.dtype}, got {type(value).__name__}")
    if not parsed.is_float and not isinstance(value, (numbers.Integral, np.integer, np.bool_)):
        raise RuntimeLaunchError(f"{label} has dtype {spec.dtype} and must be an integer, got {to_python(value)!r}")


def _check_buffer(signature: KernelSignature, index: int, spec: ParamSpec, value: Any) -> None:
    label = _argument_label(signature, index)
    if not isinstance(value, np.ndarray):
        raise RuntimeLaunchError(
            f"{label} must be a numpy.ndarray of dtype {spec.dtype} and shape {spec.shape}, got {type(value).__name__}")
    expected = to_numpy(spec.dtype)
    if value.dtype != expected:
        raise RuntimeLaunchError(f"{label} has dtype {value.dtype}, expected {spec.dtype}; convert it with "
                                 f".astype(numpy.{expected.name})")
    if value.ndim != len(spec.shape):
        raise RuntimeLaunchError(f"{label} has {value.ndim} dimensions {value.shape}, expected "
                                 f"{len(spec.shape)} dimensions {spec.shape}")
    if tuple(value.shape) != tuple(spec.shape):
        raise RuntimeLaunchError(f"{label} has shape {tuple(value.shape)}, expected {tuple(spec.shape)}")
    if not value.flags.c_contiguous:
        raise RuntimeLaunchError(f"{label} is not C-contiguous (strides {value.strides}); pass "
                                 "numpy.ascontiguousarray(x)")


def check_arguments(signature: KernelSignature, args: Sequence[Any]) -> None:
    """Raise RuntimeLaunchError for the first argument that does not fit `signature`.

    Called by every native kernel before it builds TKArgs, so that a wrong array
    never reaches generated code (which checks again, for callers that bypass Python).
    """
    if len(args) != len(signature.params):
        names = ", ".join(p.name for p in signature.params)
        raise RuntimeLaunchError(f"{signature.name}: expected {len(signature.params)} arguments ({names}), "
                                 f"got {len(args)}")
    for index, (spec, value) in enumerate(zip(signature.params, args)):
        if spec.kind == "scalar":
            _check_scalar(signature, index, spec, value)
        else:
            _check_buffer(signature, index, spec, value)


def describe_error(signature: KernelSignature, code: int, args: Sequence[Any] | None = None) -> str:
    """Turn a nonzero code from generated code into a message naming argument and field."""
    if code == ERROR_NARGS:
        return f"{signature.name}: native code rejected the argument count (expected {len(signature.params)})"
    index, field = (code >> 8) - 1, code & 0xFF
    if not 0 <= index < len(signature.params):
        return f"{signature.name}: native code failed with error code {code}"
    spec = signature.params[index]
    label = _argument_label(signature, index)
    value = args[index] if args is not None and index < len(args) else None
    if field == FIELD_NDIM:
        return f"{label} has the wrong number of dimensions, expected {len(spec.shape)}"
    if field == FIELD_DTYPE:
        return f"{label} has the wrong dtype, expected {spec.dtype}"
    if field == FIELD_DATA:
        return f"{label} has a NULL data pointer"
    if field == FIELD_STRIDES:
        return f"{label} is not C-contiguous"
    if field >= FIELD_SHAPE:
        got = tuple(value.shape) if isinstance(value, np.ndarray) else f"dimension {field - FIELD_SHAPE} wrong"
        return f"{label} has shape {got}, expected {tuple(spec.shape)}"
    return f"{label} was rejected by native code (error code {code})"


# -- calling a packed function -------------------------------------------------------------

PACKED_FUNCTION = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(TKArg), ctypes.c_int32)


class NativeKernel(KernelFunction):
    """A packed native function at `address`; calls check arguments in Python, then in native code.

    `owner` keeps whatever holds the code (a JIT engine, a ctypes library) alive.
    Per call only data pointers and scalar values change: they are written into a
    copy of a TKArg template made once per kernel (a fast path of a few microseconds;
    anything unusual goes through `check_arguments`, which names the problem).
    """

    def __init__(self, signature: KernelSignature, address: int, owner: Any) -> None:
        self.signature = signature
        self._function = PACKED_FUNCTION(address)
        self._owner = owner
        count = len(signature.params)
        template = (TKArg * max(1, count))()
        self._keepalive: list = []
        self._plan: list[tuple] = []
        for slot, spec in zip(template, signature.params):
            slot.dtype_code, slot.dtype_bits, slot.dtype_lanes = dtype_fields(spec.dtype)
            if spec.kind == "scalar":
                self._plan.append(("scalar", "<d" if dtype_of(spec.dtype).is_float else "<q", None, None))
                continue
            shape = (ctypes.c_int64 * max(1, len(spec.shape)))(*spec.shape)
            self._keepalive.append(shape)
            slot.shape, slot.ndim = shape, len(spec.shape)
            np_dtype = to_numpy(spec.dtype)
            strides, step = [], np_dtype.itemsize
            for extent in reversed(spec.shape):
                strides.insert(0, step)
                step *= extent
            self._plan.append(("buffer", np_dtype, tuple(spec.shape), tuple(strides)))
        self._template = bytes(template)
        self._array_type = TKArg * max(1, count)
        self._value_offset = TKArg.value.offset

    def _is_plain_call(self, args: Sequence[Any]) -> bool:
        if len(args) != len(self._plan):
            return False
        for (kind, np_dtype, shape, strides), value in zip(self._plan, args):
            if kind == "scalar":
                if np_dtype == "<q" and not isinstance(value, (int, np.integer)) or isinstance(value, np.ndarray):
                    return False
                if not isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
                    return False
            elif type(value) is not np.ndarray or value.dtype != np_dtype or value.shape != shape \
                    or value.strides != strides:
                return False
        return True

    def __call__(self, *args: Any) -> None:
        self._call_packed(self._pack(args), args)

    def bind(self, *args: Any):
        """Check and pack `args` once; the returned call only enters native code (about a
        microsecond, against several for a call that packs its arguments)."""
        packed = self._pack(args)
        return lambda: self._call_packed(packed, args)

    def _call_packed(self, packed, args: Sequence[Any]) -> None:
        code = self._function(packed, len(args))
        if code != 0:
            raise RuntimeLaunchError(describe_error(self.signature, code, args))

    def _pack(self, args: Sequence[Any]):
        """The TKArg array for `args` (checked first: a bad argument raises, naming it)."""
        if not self._is_plain_call(args):
            check_arguments(self.signature, args)  # raises, naming the argument, unless the call is fine
        packed = bytearray(self._template)
        size = ctypes.sizeof(TKArg)
        for index, ((kind, np_dtype, _, _), value) in enumerate(zip(self._plan, args)):
            if kind == "scalar":
                number = float(value) if np_dtype == "<d" else int(value)
                struct.pack_into(np_dtype, packed, index * size + self._value_offset, number)
            else:
                struct.pack_into("<Q", packed, index * size, value.ctypes.data)
        return self._array_type.from_buffer(packed)

    def __repr__(self) -> str:
        params = ", ".join(f"{p.name}: {p.dtype}{list(p.shape) if p.kind == 'buffer' else ''}"
                           for p in self.signature.params)
        return f"<NativeKernel {self.signature.name}({params})>"


# -- the CPU that runs the code ---------------------------------------------------------------

CPU_FEATURES_METADATA_KEY = "cpu_features"
"""Artifact metadata: the instruction-set features (LLVM's names: avx2, fma, avx512f, f16c, ...) native code
may use. A plugin that emits machine code for a CPU records them; NativeModule refuses to run the code on a
CPU without them."""


@functools.cache
def host_cpu_features() -> frozenset[str] | None:
    """The running CPU's features as LLVM names them, or None when llvmlite is not installed to say."""
    try:
        import llvmlite.binding as llvm
    except ImportError:      # a bare runtime (load_module needs only ctypes and numpy): nothing is checked
        return None
    llvm.initialize_native_target()
    return frozenset(name for name, enabled in llvm.get_host_cpu_features().items() if enabled)


def check_cpu_features(required: Iterable[str], what: str) -> None:
    """Raise TargetError naming the features of `required` the running CPU lacks (`what`: the code's owner)."""
    host = host_cpu_features()
    if host is None:
        return
    missing = sorted(set(required) - host)
    if missing:
        import llvmlite.binding as llvm
        raise TargetError(
            f"{what} uses CPU features this machine lacks: {', '.join(missing)} (this CPU: "
            f"{llvm.get_host_cpu_name()}). Running it would stop the process with an illegal instruction. "
            "Compile for this machine (-mcpu=native, the default, or a -mcpu / -mattr it supports), "
            "or export the library and run it on a CPU that has them.")


# -- threads ------------------------------------------------------------------------------

_live_modules: "weakref.WeakSet[NativeModule]" = weakref.WeakSet()
_thread_override: int | None = None


def set_num_threads(count: int | None) -> None:
    """Threads for parallel loops of every loaded native module, now and later (0 = all cores).

    A runtime setting (like `omp_set_num_threads`), it overrides each module's
    `-num_threads` target option until called again; None drops the override for modules
    loaded from then on (they use their target option again; loaded ones keep the last count).
    """
    global _thread_override
    if count is None:
        _thread_override = None
        return
    if int(count) < 0:
        raise RuntimeLaunchError(f"set_num_threads: count must be >= 0 (0 = all cores), got {count}")
    _thread_override = int(count)
    for module in list(_live_modules):
        module.set_num_threads(_thread_override)


def get_num_threads() -> int | None:
    """The value last given to `set_num_threads`, or None when modules use their target option."""
    return _thread_override


class NativeModule(LoadedModule):
    """Kernels of native code whose packed functions and globals are found by `lookup(symbol)`.

    `lookup` returns an address or 0. Subclasses: the cpu_llvm JIT module (MCJIT) and
    the ctypes library module made by `load_native_library`.
    """

    plan_entry_index_checks = True   # an exported library's entry checks gather indices (cpu_llvm's does)

    def __init__(self, artifact: Artifact, lookup, owner: Any) -> None:
        self.artifact = artifact
        self._lookup = lookup
        self._owner = owner
        self._functions: dict[str, NativeKernel] = {}
        _live_modules.add(self)
        if _thread_override is not None:
            self.set_num_threads(_thread_override)

    def _check_cpu(self) -> None:
        """Refuse, once and naming them, to run code using CPU features the running CPU lacks."""
        if not getattr(self, "_cpu_checked", False):
            check_cpu_features(self.artifact.metadata.get(CPU_FEATURES_METADATA_KEY, ()),
                               f"the code for target {self.artifact.target!r}")
            self._cpu_checked = True

    def get_function(self, name: str) -> NativeKernel:
        if name not in self._functions:
            self._check_cpu()
            signature = self.artifact.kernel(name)
            symbol = self.artifact.metadata.get("symbols", {}).get(name, name)
            address = self._lookup(symbol)
            if not address:
                raise ArtifactError(f"kernel {name!r}: symbol {symbol!r} is missing from the loaded code")
            # refuses a read-only array for a buffer the kernel writes (JIT modules and exported libraries)
            # the kernel keeps this module alive (not only its code): a process-wide set_num_threads
            # must still reach the module's thread setting when the caller kept only the function
            self._functions[name] = WriteCheckedKernel(NativeKernel(signature, address, self),
                                                       written_params(self.artifact.metadata, name))
        return self._functions[name]

    def build_plan_entry(self, spec):
        """The whole-plan entry an exported library carries (sdk/plan_entry.py), when it was built for
        `spec` (same digest); else None."""
        from .plan_entry import ENTRY_SYMBOL, SPEC_SYMBOL, PlanEntry, spec_digest
        self._check_cpu()
        address, digest = self._lookup(ENTRY_SYMBOL), self._lookup(SPEC_SYMBOL)
        if not address or not digest or ctypes.string_at(digest).decode(errors="replace") != spec_digest(spec):
            return None
        return PlanEntry(spec, address, self._owner, self.artifact.kernel)

    def _thread_setting(self) -> ctypes.c_int32 | None:
        """The module's `tensorkiln_num_threads`, looked up once (the executor reads it at every run,
        and a JIT lookup takes llvmlite's global lock)."""
        try:
            return self._threads
        except AttributeError:
            address = self._lookup(NUM_THREADS_SYMBOL)
            self._threads = ctypes.c_int32.from_address(address) if address else None
            return self._threads

    def set_num_threads(self, count: int) -> None:
        """Threads for this module's parallel loops (0 = all cores)."""
        setting = self._thread_setting()
        if setting is not None:
            setting.value = int(count)

    def get_num_threads(self) -> int | None:
        setting = self._thread_setting()
        return setting.value if setting is not None else None


# -- metadata and shared libraries ---------------------------------------------------------


def metadata_json(artifact_target: str, kernels: Iterable[KernelSignature], extra: dict | None = None) -> str:
    """The JSON a native library embeds as `tensorkiln_metadata` (read back by `read_metadata`)."""
    record = {
        "format_version": METADATA_FORMAT_VERSION,
        "target": artifact_target,
        "kernels": [{"name": k.name,
                     "params": [{"name": p.name, "kind": p.kind, "dtype": p.dtype, "shape": list(p.shape)}
                                for p in k.params]}
                    for k in kernels],
        **(extra or {}),
    }
    return json.dumps(record, sort_keys=True)


def read_metadata(text: str, origin: str) -> dict:
    """Parse and validate embedded metadata; `origin` names the file in errors."""
    try:
        record = json.loads(text)
    except json.JSONDecodeError as error:
        raise ArtifactError(f"{origin}: {METADATA_SYMBOL} is not valid JSON ({error})") from None
    version = record.get("format_version")
    if version != METADATA_FORMAT_VERSION:
        raise ArtifactError(f"{origin}: metadata format version {version!r} is not supported "
                            f"(this tensorkiln reads version {METADATA_FORMAT_VERSION}); rebuild the library")
    return record


def _signatures(record: dict) -> tuple[KernelSignature, ...]:
    return tuple(
        KernelSignature(k["name"], tuple(ParamSpec(p["name"], p["kind"], p["dtype"], tuple(p["shape"]))
                                         for p in k["params"]))
        for k in record["kernels"])


def load_native_library(path: str) -> NativeModule:
    """Load a shared library exported by a native plugin; needs only ctypes and numpy."""
    try:
        library = ctypes.CDLL(str(path))
    except OSError as error:
        raise ArtifactError(f"cannot load native library {path!r}: {error}") from None
    try:
        first_char = ctypes.c_char.in_dll(library, METADATA_SYMBOL)
    except ValueError:
        raise ArtifactError(f"{path!r} has no {METADATA_SYMBOL} symbol; it was not exported by tensorkiln") from None
    record = read_metadata(ctypes.string_at(ctypes.addressof(first_char)).decode(), str(path))
    artifact = Artifact(target=record["target"], format="native-library", source="",
                        kernels=_signatures(record), metadata={**record, "path": str(path)})

    def lookup(symbol: str) -> int:
        try:
            return ctypes.addressof(ctypes.c_char.in_dll(library, symbol))
        except ValueError:
            return 0

    return NativeModule(artifact, lookup, library)
