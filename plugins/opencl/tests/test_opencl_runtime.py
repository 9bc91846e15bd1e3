"""test_opencl_runtime.py: the pyopencl loader: device memory, argument checks, build errors, timing."""
from __future__ import annotations

import numpy as np
import pytest

from tensorkiln import tir
from tensorkiln.ir.errors import CompileError, RuntimeLaunchError, TargetError
from tensorkiln_opencl import DeviceArray, OpenCLLoader


def _buffer(name, shape, dtype="float32"):
    return tir.Buffer(name, tuple(tir.const(d) for d in shape), dtype)


def _add_func(n=256):
    A, B, C = _buffer("A", (n,)), _buffer("B", (n,)), _buffer("C", (n,))
    alpha = tir.Var("alpha", "float32")
    bx, tx = tir.Var("bx"), tir.Var("tx")
    index = bx * 64 + tx
    store = tir.Store(C, tir.Load(A, index) + tir.Load(B, index) * alpha, index)
    body = tir.For(bx, tir.const(0), tir.const(n // 64), tir.ForKind.THREAD_BINDING,
                   tir.For(tx, tir.const(0), tir.const(64), tir.ForKind.THREAD_BINDING, store, "threadIdx.x"),
                   "blockIdx.x")
    return tir.PrimFunc("add", (A, B, C, alpha), body)


@pytest.fixture(scope="module")
def add_module(build_and_load):
    return build_and_load(_add_func())


def test_device_arrays_allocate_copy_and_release(opencl_target):
    loader = opencl_target.spec.loader
    host = np.arange(12, dtype="float32").reshape(3, 4)
    array = loader.from_numpy(host, opencl_target)
    assert array.shape == (3, 4) and array.dtype == "float32" and array.nbytes == 48
    np.testing.assert_array_equal(array.to_numpy(), host)
    empty = loader.empty((0,), "int32", opencl_target)
    assert empty.to_numpy().shape == (0,)
    array.release()
    assert array.is_released
    with pytest.raises(RuntimeLaunchError, match=r"was released"):
        array.to_numpy()
    with pytest.raises(RuntimeLaunchError, match=r"cannot copy a \(2,\) float64 array into a DeviceArray"):
        DeviceArray.empty((3,), "float32", loader.device(opencl_target)).copy_from_numpy(np.zeros(2))


def test_numpy_and_device_arguments_give_the_same_result(add_module):
    func = add_module.get_function("add")
    a, b = np.arange(256, dtype="float32"), np.ones(256, "float32")
    c = np.zeros(256, "float32")
    func(a, b, c, 3.0)
    np.testing.assert_array_equal(c, a + 3)
    device = add_module.device
    a_dev, b_dev, c_dev = (DeviceArray.from_numpy(x, device) for x in (a, b, np.zeros(256, "float32")))
    func(a_dev, b_dev, c_dev, np.float32(0.5))
    np.testing.assert_array_equal(c_dev.to_numpy(), a + 0.5)


def test_read_only_inputs_are_not_copied_back(add_module):
    a = np.arange(256, dtype="float32")
    a.flags.writeable = False
    c = np.zeros(256, "float32")
    add_module.get_function("add")(a, a, c, 1)
    np.testing.assert_array_equal(c, 2 * a)


@pytest.mark.parametrize("args, message", [
    (lambda a, c: (a, a, c), r"kernel 'add' takes 4 arguments \(A, B, C, alpha\), got 3"),
    (lambda a, c: (a, a[:128], c, 1.0), r"argument 1 'B' has shape \(128,\), expected \(256,\)"),
    (lambda a, c: (a, a.astype("float64"), c, 1.0), r"argument 1 'B' has dtype float64, expected float32"),
    (lambda a, c: (np.zeros(512, "float32")[::2], a, c, 1.0), r"argument 0 'A' is not C-contiguous"),
    (lambda a, c: (a, a, [0.0] * 256, 1.0), r"argument 2 'C' must be a numpy array or an opencl DeviceArray"),
    (lambda a, c: (a, a, c, a), r"argument 3 'alpha' is a float32 scalar, got ndarray"),
])
def test_wrong_arguments_are_refused_before_any_copy(add_module, args, message):
    a, c = np.ones(256, "float32"), np.full(256, 7.0, "float32")
    with pytest.raises(RuntimeLaunchError, match=message):
        add_module.get_function("add")(*args(a, c))
    np.testing.assert_array_equal(c, 7.0)


def test_device_launch_with_wrong_sizes_is_refused(add_module):
    device = add_module.device
    a = DeviceArray.empty((256,), "float32", device)
    short = DeviceArray.empty((255,), "float32", device)
    with pytest.raises(RuntimeLaunchError, match=r"argument 2 'C' has shape \(255,\), expected \(256,\)"):
        add_module.get_function("add")(a, a, short, 1.0)
    wrong_dtype = DeviceArray.empty((256,), "int32", device)
    with pytest.raises(RuntimeLaunchError, match=r"argument 0 'A' has dtype int32, expected float32"):
        add_module.get_function("add")(wrong_dtype, a, a, 1.0)


def test_time_function_uses_profiling_events(add_module):
    a = np.ones(256, "float32")
    times = add_module.time_function("add", [a, a, np.zeros(256, "float32"), 1.0], number=3, repeat=2)
    assert len(times) == 2 and all(0 < t < 1 for t in times)


class _Impl:
    def __init__(self, language, symbol, code):
        self.language, self.symbol, self.code = language, symbol, code


class _Intrin:
    def __init__(self, name, implementations):
        self.name, self.implementations = name, implementations


def _intrinsic_func(intrin):
    X, Y = _buffer("X", (16,)), _buffer("Y", (16,))
    io = tir.Var("io")
    call = tir.Call("void", intrin.name, (tir.BufferPointer(Y, io * 4), tir.BufferPointer(X, io * 4)))
    body = tir.For(io, tir.const(0), tir.const(4), tir.ForKind.THREAD_BINDING, tir.Evaluate(call), "threadIdx.x")
    return tir.PrimFunc("with_intrin", (X, Y), body, attrs=((tir.TENSOR_INTRINSICS_ATTR, (intrin,)),))


def test_intrinsic_calls_use_the_opencl_implementation(build_and_load):
    code = ("inline void tk_axpy4(__global float* y, const __global float* x) "
            "{ vstore4(vload4(0, y) + 2.0f * vload4(0, x), 0, y); }")
    intrin = _Intrin("axpy4", {"llvm": _Impl("llvm", "x", "x"), "opencl": _Impl("opencl", "tk_axpy4", code)})
    module = build_and_load(_intrinsic_func(intrin))
    x, y = np.arange(16, dtype="float32"), np.ones(16, "float32")
    module.get_function("with_intrin")(x, y)
    np.testing.assert_array_equal(y, 1 + 2 * np.arange(16))


def test_broken_intrinsic_fails_the_build_with_the_log(build_and_load):
    broken = "inline void tk_broken(__global float* y, const __global float* x) { y[0] = no_such_name; }"
    intrin = _Intrin("broken", {"opencl": _Impl("opencl", "tk_broken", broken)})
    with pytest.raises(CompileError, match=r"(?s)OpenCL build failed for kernel 'with_intrin'.*no_such_name") as info:
        build_and_load(_intrinsic_func(intrin))
    assert "error" in str(info.value)


def test_intrinsic_without_opencl_implementation_is_refused(build_and_load):
    intrin = _Intrin("cpu_only", {"llvm": _Impl("llvm", "x", "x")})
    with pytest.raises(CompileError, match=r"intrinsic 'cpu_only' has no implementation in opencl .* llvm"):
        build_and_load(_intrinsic_func(intrin))


def test_too_many_work_items_per_group_are_refused_at_load(opencl_target, build_and_load):
    A = _buffer("A", (1 << 16,))
    tx = tir.Var("tx")
    limit = opencl_target.spec.loader.device(opencl_target).max_work_group_size
    threads = limit * 2
    body = tir.For(tx, tir.const(0), tir.const(threads), tir.ForKind.THREAD_BINDING,
                   tir.Store(A, tir.const(1.0), tx), "threadIdx.x")
    with pytest.raises(CompileError, match=rf"kernel 'wide' needs {threads} work-items per work-group"):
        build_and_load(tir.PrimFunc("wide", (A,), body))


def test_unknown_platform_and_device_are_target_errors():
    from tensorkiln_opencl.runtime import select_device
    with pytest.raises(TargetError, match=r"no platform matches -platform='nonexistent'"):
        select_device("nonexistent")
    with pytest.raises(TargetError, match=r"-device=99 is out of range"):
        select_device(None, 99)


def test_loader_refuses_other_artifact_formats(opencl_target):
    from tensorkiln.sdk import Artifact
    with pytest.raises(CompileError, match=r"runs 'opencl-c' artifacts, got 'c'"):
        OpenCLLoader().load(Artifact("c", "c", "", ()), opencl_target)


@pytest.mark.parametrize("offset", [0, 256, 16])   # 16 bytes is below the sub-buffer alignment: a copy runs
def test_kernels_read_and_write_views_into_one_storage(opencl_target, add_module, offset):
    loader = opencl_target.spec.loader
    storage = loader.empty((4096,), "uint8", opencl_target)
    a_view = loader.view(storage, offset, (256,), "float32")
    c_view = loader.view(storage, offset + 2048, (256,), "float32")
    a = np.arange(256, dtype="float32")
    loader.copy_into(a_view, a)
    loader.copy_into(c_view, np.zeros(256, "float32"))
    add_module.get_function("add")(a_view, a_view, c_view, 2.0)
    np.testing.assert_array_equal(loader.to_host(c_view), 3 * a)
    np.testing.assert_array_equal(loader.to_host(a_view), a)
    storage.release()
    assert a_view.is_released and c_view.is_released


def test_a_view_past_its_storage_is_refused(opencl_target):
    loader = opencl_target.spec.loader
    storage = loader.empty((64,), "uint8", opencl_target)
    with pytest.raises(RuntimeLaunchError, match=r"view of 64 bytes at offset 16 does not fit in a storage of 64"):
        loader.view(storage, 16, (16,), "float32")


def test_zero_dimensional_arrays_copy_both_ways(opencl_target):
    """Regression: np.ascontiguousarray turns a () array into (1,), which the copy refused."""
    loader = opencl_target.spec.loader
    scalar = loader.to_device(np.array(2.5, "float32"), opencl_target)
    assert scalar.shape == () and loader.to_host(scalar) == np.float32(2.5)
    loader.copy_into(scalar, np.array(-1.0, "float32"))
    assert loader.to_host(scalar).shape == () and loader.to_host(scalar) == np.float32(-1.0)


def test_one_compiled_model_runs_from_several_threads_at_once(opencl_target):
    """Each concurrent call gets its own device arena (the executor's pool of execution
    states) and launches hold the kernel's lock between set_arg and enqueue."""
    from concurrent.futures import ThreadPoolExecutor

    import tensorkiln as tk
    from tensorkiln import graph

    rng = np.random.default_rng(0)
    x = graph.var("x", shape=(64, 64))
    weight = graph.const(rng.standard_normal((64, 64)).astype("float32"))
    hidden = graph.nn.relu(graph.nn.dense(graph.nn.relu(x + graph.const(1.0)), weight))
    lib = tk.compile(graph.Module.from_expr(graph.nn.softmax(hidden, axis=-1)), target=opencl_target)
    inputs = [rng.standard_normal((64, 64)).astype("float32") for _ in range(8)]
    expected = [lib(a) for a in inputs]

    def worker(thread: int) -> int:
        return sum(not np.array_equal(lib(inputs[(thread + run) % 8]), expected[(thread + run) % 8])
                   for run in range(10))

    with ThreadPoolExecutor(8) as pool:
        assert sum(pool.map(worker, range(8))) == 0
