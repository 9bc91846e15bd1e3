"""conformance/levels/runtime.py: the runtime loader's contract, on a trivial kernel.

Allocation, copies in and out for every claimed dtype, views into a storage (what
the graph executor uses), running a built kernel on device arrays and on numpy
arrays, timing, wrong-argument calls (count, shape, dtype -> RuntimeLaunchError)
and releasing modules and arrays.
"""
from __future__ import annotations

import gc
import math
from typing import Any

import numpy as np

from ..catalogue import Check, CheckFailure, KitOptions, stage
from ..compare import assert_close

__all__ = ["checks", "build_add_kernel", "random_array"]

_N = 64


def random_array(shape: tuple[int, ...], dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Random values representable in `dtype` (small integers, bools, normal floats)."""
    from ...ir.dtypes import to_numpy

    np_dtype = to_numpy(dtype)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if np.issubdtype(np_dtype, np.integer):
        low = 0 if dtype.startswith("uint") else -50
        return rng.integers(low, 50, size=shape).astype(np_dtype)
    return rng.standard_normal(shape).astype(np_dtype)


def build_add_kernel(target: Any, n: int = _N, name: str = "conformance_add"):
    """tk.build of C[i] = A[i] + B[i] (float32, n elements); bound to threads on GPU-like targets."""
    import tensorkiln as tk
    from ... import te

    a = te.placeholder((n,), "float32", name="A")
    b = te.placeholder((n,), "float32", name="B")
    c = te.compute((n,), lambda i: a[i] + b[i], name="C")
    s = te.create_schedule(c.op)
    bind_outer(s, c, target)
    return tk.build(s, [a, b, c], target=target, name=name)


def bind_outer(s: Any, tensor: Any, target: Any, factor: int = 16) -> None:
    """On a target with thread axes, split the first axis and bind it to blockIdx.x / threadIdx.x."""
    from ... import te

    axes = target.capabilities.thread_axes
    if "blockIdx.x" not in axes or "threadIdx.x" not in axes:
        return
    factor = max(1, min(factor, target.capabilities.max_threads_per_block or factor))
    outer, inner = s[tensor].split(s[tensor].op.axis[0], factor=factor)
    s[tensor].bind(outer, te.thread_axis("blockIdx.x"))
    s[tensor].bind(inner, te.thread_axis("threadIdx.x"))


def _inputs(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal(_N).astype("float32"), rng.standard_normal(_N).astype("float32")


def _alloc(dtype: str):
    def run(target: Any) -> None:
        loader = target.spec.loader
        with stage("run"):
            array = loader.empty((3, 5), dtype, target)
            host = loader.to_host(array)
        if tuple(host.shape) != (3, 5) or str(host.dtype) != str(np.dtype(_np(dtype))):
            raise CheckFailure("run", f"empty((3, 5), {dtype!r}) came back as {host.shape} {host.dtype}")
    return run


def _np(dtype: str):
    from ...ir.dtypes import to_numpy
    return to_numpy(dtype)


def _roundtrip(dtype: str, seed: int):
    def run(target: Any) -> None:
        loader = target.spec.loader
        rng = np.random.default_rng(seed)
        x, y = random_array((4, 7), dtype, rng), random_array((4, 7), dtype, rng)
        with stage("run"):
            device = loader.to_device(x, target)
            back = loader.to_host(device)
        assert_close(back, x, 0.0, 0.0, what=f"to_device/to_host of {dtype}")
        with stage("run"):
            loader.copy_into(device, y)
            back = loader.to_host(device)
        assert_close(back, y, 0.0, 0.0, what=f"copy_into/to_host of {dtype}")
    return run


def _view(target: Any) -> None:
    loader = target.spec.loader
    x = np.arange(6, dtype="float32").reshape(2, 3) + 0.5
    y = np.arange(4, dtype="int32") - 2
    with stage("run"):
        storage = loader.empty((128,), "uint8", target)
        first = loader.view(storage, 16, (2, 3), "float32")
        second = loader.view(storage, 64, (4,), "int32")
        loader.copy_into(first, x)
        loader.copy_into(second, y)
        got_x, got_y = loader.to_host(first), loader.to_host(second)
    assert_close(got_x, x, 0.0, 0.0, what="view at offset 16")
    assert_close(got_y, y, 0.0, 0.0, what="view at offset 64")


def _build(target: Any):
    with stage("compile"):
        return build_add_kernel(target)


def _source(target: Any) -> None:
    module = _build(target)
    artifact = module.artifact
    if not artifact.source and not artifact.binary:
        raise CheckFailure("compile", "the artifact has neither source text nor a binary")
    signature = artifact.kernel("conformance_add")
    names = [p.name for p in signature.params]
    if names != ["A", "B", "C"] or any(tuple(p.shape) != (_N,) for p in signature.params):
        raise CheckFailure("contract", f"kernel signature {signature} does not match the PrimFunc (A, B, C) of ({_N},)")


def _run_device_arrays(target: Any) -> None:
    module = _build(target)
    loader = target.spec.loader
    a, b = _inputs(1)
    with stage("run"):
        args = [loader.to_device(a, target), loader.to_device(b, target), loader.empty((_N,), "float32", target)]
        module(*args)
        out = loader.to_host(args[2])
    assert_close(out, a + b, 1e-6, 1e-6, what="A + B on device arrays")


def _run_numpy_arrays(target: Any) -> None:
    module = _build(target)
    a, b = _inputs(2)
    c = np.zeros(_N, "float32")
    with stage("run"):
        module(a, b, c)
    assert_close(c, a + b, 1e-6, 1e-6, what="A + B on numpy arrays")


def _timing(target: Any) -> None:
    module = _build(target)
    a, b = _inputs(3)
    with stage("run"):
        times = module.loaded.time_function("conformance_add", [a, b, np.zeros(_N, "float32")], number=3, repeat=2)
    times = list(times)
    if len(times) != 2 or not all(isinstance(t, (int, float)) and math.isfinite(t) and t > 0 for t in times):
        raise CheckFailure("run", f"time_function(number=3, repeat=2) returned {times!r}; expected 2 positive seconds")


def _expect_launch_error(target: Any, args: list, what: str) -> None:
    from ...ir.errors import RuntimeLaunchError

    module = _build(target)
    try:
        module(*args)
    except RuntimeLaunchError:
        return
    except Exception as error:
        raise CheckFailure("run", f"a call with {what} raised {type(error).__name__} ({error}), "
                           "expected tensorkiln RuntimeLaunchError") from error
    raise CheckFailure("run", f"a call with {what} returned normally; expected RuntimeLaunchError")


def _bad_count(target: Any) -> None:
    a, b = _inputs(4)
    _expect_launch_error(target, [a, b], "2 arguments instead of 3")


def _bad_shape(target: Any) -> None:
    a, b = _inputs(5)
    _expect_launch_error(target, [a, b, np.zeros(_N // 2, "float32")], f"an output of shape ({_N // 2},) "
                         f"instead of ({_N},)")


def _bad_dtype(target: Any) -> None:
    a, b = _inputs(6)
    _expect_launch_error(target, [a.astype("float64"), b, np.zeros(_N, "float32")], "a float64 input instead of float32")


def _release(target: Any) -> None:
    loader = target.spec.loader
    a, b = _inputs(7)
    for _ in range(3):
        module = _build(target)
        with stage("run"):
            args = [loader.to_device(a, target), loader.to_device(b, target), loader.empty((_N,), "float32", target)]
            module(*args)
            out = loader.to_host(args[2])
        del module, args
        gc.collect()
        assert_close(out, a + b, 1e-6, 1e-6, what="A + B after releasing earlier modules")


def checks(target: Any, options: KitOptions) -> list[Check]:
    dtypes = [d for d in target.capabilities.dtypes if options.dtypes is None or d in options.dtypes or d == "float32"]
    found = [Check(f"runtime/alloc/{d}", "runtime", True, f"loader.empty of {d} comes back with shape and dtype",
                   _alloc(d)) for d in dtypes]
    found += [Check(f"runtime/roundtrip/{d}", "runtime", True, f"to_device / copy_into / to_host of {d} round-trips",
                    _roundtrip(d, options.seed + i)) for i, d in enumerate(dtypes)]
    found += [
        Check("runtime/view", "runtime", True, "views into one storage at byte offsets (the graph executor's arena)",
              _view),
        Check("runtime/artifact", "runtime", True, "a built kernel has source or binary and the PrimFunc's signature",
              _source),
        Check("runtime/run_device_arrays", "runtime", True, "a trivial kernel runs on the loader's device arrays",
              _run_device_arrays),
        Check("runtime/run_numpy_arrays", "runtime", True, "a trivial kernel runs on numpy arrays", _run_numpy_arrays),
        Check("runtime/timing", "runtime", True, "time_function returns one positive time per repeat", _timing),
        Check("runtime/bad_argument_count", "runtime", True, "a wrong argument count raises RuntimeLaunchError",
              _bad_count),
        Check("runtime/bad_argument_shape", "runtime", True, "a wrong shape raises RuntimeLaunchError", _bad_shape),
        Check("runtime/bad_argument_dtype", "runtime", True, "a wrong dtype raises RuntimeLaunchError", _bad_dtype),
        Check("runtime/release", "runtime", False, "modules and arrays can be dropped and built again", _release),
    ]
    return found
