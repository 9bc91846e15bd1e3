"""cpu_llvm's parallel LLVM optimisation (parallel_compile.py): a large module optimised in chunks by
worker processes is linked back into one object that computes what the serial compile computes."""
from __future__ import annotations

import os
import re
import sys
import threading

import numpy as np
import onnx
import pytest

import tensorkiln as tk
from tensorkiln_cpu_llvm import emitter, parallel_compile
from tensorkiln_cpu_llvm.parallel_compile import JOBS_ENV, MIN_PARALLEL_KERNELS, compile_jobs

SQUEEZENET = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", "light_squeezenet.onnx")


def _compile_and_run(monkeypatch, jobs: str, x: np.ndarray):
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    monkeypatch.setenv(JOBS_ENV, jobs)
    lib = tk.compile(onnx.load(SQUEEZENET), target="cpu_llvm")
    return lib, lib.run(x)[0]


@pytest.fixture(scope="module")
def squeezenet_input():
    return np.random.default_rng(7).standard_normal((1, 3, 224, 224)).astype(np.float32)


@pytest.fixture(scope="module")
def serial(squeezenet_input):
    with pytest.MonkeyPatch.context() as monkeypatch:
        return _compile_and_run(monkeypatch, "1", squeezenet_input)[1]


def test_a_model_optimised_in_two_processes_computes_what_the_serial_compile_computes(monkeypatch, squeezenet_input,
                                                                                      serial):
    ort = pytest.importorskip("onnxruntime")
    calls, here = [], []
    real_optimize_chunks, real_optimize = emitter.optimize_chunks, parallel_compile.optimize_chunk

    def spy(jobs, *args, **kwargs):
        drawn = []
        calls.append((drawn, kwargs.get("workers")))
        return real_optimize_chunks((drawn.append(job) or job for job in jobs), *args, **kwargs)

    monkeypatch.setattr(emitter, "optimize_chunks", spy)
    monkeypatch.setattr(parallel_compile, "optimize_chunk",
                        lambda job, *a, **k: here.append(job) or real_optimize(job, *a, **k))
    _, parallel = _compile_and_run(monkeypatch, "2", squeezenet_input)
    ((drawn, workers),) = calls
    chunks = len(drawn)
    assert workers == 1 and chunks > 2
    assert len(here) < chunks           # the worker optimised some of the chunks
    np.testing.assert_array_equal(parallel, serial)
    session = ort.InferenceSession(SQUEEZENET, providers=["CPUExecutionProvider"])
    expected = session.run(None, {session.get_inputs()[0].name: squeezenet_input})[0]
    np.testing.assert_allclose(parallel, expected, rtol=1e-4, atol=1e-4)


def test_a_worker_that_cannot_start_leaves_its_chunk_to_the_parent(monkeypatch, squeezenet_input, serial):
    started, calls = [], []
    real_optimize, real_optimize_chunks = parallel_compile.optimize_chunk, emitter.optimize_chunks

    def counting(job, *args, **kwargs):
        started.append(job)
        return real_optimize(job, *args, **kwargs)

    monkeypatch.setattr(parallel_compile, "optimize_chunk", counting)
    monkeypatch.setattr(emitter, "optimize_chunks", lambda jobs, *a, **k: real_optimize_chunks(
        (calls.append(job) or job for job in jobs), *a, **k))
    monkeypatch.setattr(sys, "executable", os.path.join(os.sep, "nonexistent", "python3"))
    _, out = _compile_and_run(monkeypatch, "3", squeezenet_input)
    assert calls and len(started) == len(calls)          # every chunk here: neither worker started
    np.testing.assert_array_equal(out, serial)


def _tiny_job(index: int) -> "parallel_compile.ChunkJob":
    import llvmlite.binding as llvm

    from tensorkiln.sdk.plugin_manager import registry
    from tensorkiln_cpu_llvm.host import machine_config

    config = machine_config(registry().target("cpu_llvm"))
    llvm.initialize_native_target()
    text = (f'target triple = "{config.triple}"\n'
            f"define float @scale{index}(float %x) {{\n  %y = fmul float %x, {float(index + 2):e}\n"
            "  ret float %y\n}\n")
    return parallel_compile.ChunkJob(text, (), config.triple, config.cpu, config.features, 3, emit_object=True)


def _ir(bitcode: bytes) -> str:
    import llvmlite.binding as llvm
    return str(llvm.parse_bitcode(bitcode))


def test_chunks_are_shared_by_a_worker_and_the_parent_and_come_back_in_order():
    jobs = [_tiny_job(index) for index in range(6)]
    results = parallel_compile.optimize_chunks([lambda job=job: job for job in jobs], workers=1)
    serial = [parallel_compile.optimize_chunk(job) for job in jobs]
    assert [_ir(r.bitcode) for r in results] == [_ir(r.bitcode) for r in serial]
    assert all(r.object_code for r in results)


def test_a_worker_that_dies_leaves_its_chunks_to_the_parent(monkeypatch):
    import subprocess

    # a "worker" that exits at once: its first exchange fails, the parent does every chunk
    monkeypatch.setattr(parallel_compile, "_start_worker", lambda: subprocess.Popen(
        [sys.executable, "-c", "pass"], stdin=subprocess.PIPE, stdout=subprocess.PIPE))
    jobs = [_tiny_job(index) for index in range(4)]
    results = parallel_compile.optimize_chunks(jobs, workers=2)
    assert [_ir(r.bitcode) for r in results] == [_ir(parallel_compile.optimize_chunk(job).bitcode) for job in jobs]


def test_the_number_of_jobs_comes_from_the_environment_and_the_module_size(monkeypatch):
    monkeypatch.setenv(JOBS_ENV, "4")
    assert compile_jobs(MIN_PARALLEL_KERNELS - 1) == 1           # too small to repay a worker
    assert compile_jobs(200) == 4
    assert compile_jobs(MIN_PARALLEL_KERNELS) == 2                # at least half a dozen kernels per process
    monkeypatch.setenv(JOBS_ENV, "1")
    assert compile_jobs(200) == 1
    monkeypatch.setenv(JOBS_ENV, "two")
    with pytest.raises(ValueError, match=f"{JOBS_ENV}='two'.*whole number"):
        compile_jobs(200)
    monkeypatch.delenv(JOBS_ENV)
    assert compile_jobs(200) == min(len(os.sched_getaffinity(0)), 200 // (MIN_PARALLEL_KERNELS // 2))


def test_the_cutter_makes_chunks_of_one_kind_from_a_stream_and_covers_every_kernel():
    from tensorkiln_cpu_llvm.parallel_compile import CHUNKS_PER_JOB, MIN_CHUNK_KERNELS, ChunkCutter
    costs = {"light": 1.0, "vectorized": 2.0, "full": 5.0}
    rng = np.random.default_rng(0)
    for kernels, jobs in ((191, 2), (33, 2), (200, 4), (12, 2), (7, 3)):
        kinds = [str(kind) for kind in rng.choice(list(costs), size=kernels, p=[0.55, 0.4, 0.05])]
        cutter = ChunkCutter(kernels * 1.8, jobs)
        early = [chunk for index, kind in enumerate(kinds) if (chunk := cutter.add(index, kind, costs[kind]))]
        late = cutter.finish(lambda index: costs[kinds[index]])
        chunks = early + late
        assert sorted(k for c in chunks for k in c) == list(range(kernels))       # every kernel, once
        assert all(c and len({kinds[k] for k in c}) == 1 for c in chunks)        # one kind per chunk
        assert all(c == sorted(c) for c in chunks)                                # in arrival order
        assert all(len(c) >= MIN_CHUNK_KERNELS for c in early)
        chunk_cost = [sum(costs[kinds[k]] for k in c) for c in chunks]
        if early:   # the first chunk goes out at half a share, the next at a share
            assert chunk_cost[0] < cutter.share or len(early[0]) == MIN_CHUNK_KERNELS
        # the last ones are at most half a share (+ one kernel), costliest first
        late_cost = chunk_cost[len(early):]
        assert all(cost < cutter.share / 2 + 5.0 or len(c) <= MIN_CHUNK_KERNELS for cost, c in zip(late_cost, late))
        assert late_cost == sorted(late_cost, reverse=True)
        if kernels >= 100:
            assert jobs <= len(chunks) <= 3 * jobs * CHUNKS_PER_JOB
    # the cut depends on the kernels alone: the same stream is cut the same way (the cache keys chunks)
    def cut():
        cutter = ChunkCutter(100, 2)
        made = [c for index in range(60) if (c := cutter.add(index, "ab"[index % 3 == 0], 1.0 + index % 2))]
        return made + cutter.finish(lambda index: 1.0 + index % 2)
    assert cut() == cut()


def test_a_worker_optimises_the_first_chunks_before_the_last_kernel_is_lowered(monkeypatch):
    # the driver hands kernels over as it lowers them (Emitter.emit_stream): the stream below waits,
    # before its last kernel, until a worker has been handed a chunk
    import time

    from tensorkiln.sdk.plugin_manager import registry
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "0")
    monkeypatch.setenv(JOBS_ENV, "2")
    target = registry().target("cpu_llvm")
    exchanged, real_exchange = [], parallel_compile._exchange
    monkeypatch.setattr(parallel_compile, "_exchange", lambda process, job: exchanged.append(job.text)
                        or real_exchange(process, job))
    from tensorkiln import te

    def kernel(index: int):
        a = te.placeholder((64, 64), name="a")
        b = te.compute((64, 64), lambda i, j: a[i, j] * float(index + 1), name="b")
        return te.lower(te.create_schedule(b.op), [a, b], name=f"scale{index}")

    count, waited = 40, []

    def stream():
        for index in range(count):
            if index == count - 1:
                deadline = time.monotonic() + 60
                while not exchanged and time.monotonic() < deadline:
                    time.sleep(0.01)
                waited.append(bool(exchanged))
            yield kernel(index)

    artifact = emitter.LLVMEmitter().emit_stream(stream(), target, count)
    assert waited == [True]
    assert [k.name for k in artifact.kernels] == [f"scale{index}" for index in range(count)]
    module = registry().target("cpu_llvm").spec.loader.load(artifact, target)
    x, out = np.arange(64 * 64, dtype=np.float32).reshape(64, 64), np.zeros((64, 64), np.float32)
    for index in (0, 17, count - 1):
        module.get_function(f"scale{index}")(x, out)
        np.testing.assert_array_equal(out, x * np.float32(index + 1))


def test_a_module_compiled_in_chunks_is_cached_per_chunk(monkeypatch, tmp_path, squeezenet_input, serial):
    from tensorkiln_cpu_llvm.kernel_cache import kernel_cache
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv(JOBS_ENV, "2")
    optimised, real_optimize = [], parallel_compile.optimize_chunk
    real_exchange = parallel_compile._exchange
    monkeypatch.setattr(parallel_compile, "optimize_chunk", lambda job, *a, **k: optimised.append(job.text)
                        or real_optimize(job, *a, **k))
    monkeypatch.setattr(parallel_compile, "_exchange", lambda process, job: optimised.append(job.text)
                        or real_exchange(process, job))
    cache = kernel_cache()
    first = tk.compile(onnx.load(SQUEEZENET), target="cpu_llvm")
    chunks = len(optimised) - 1          # and the module of the globals, which is never cached
    assert chunks >= 2 and (cache.hits, cache.misses) == (0, chunks)
    optimised.clear()
    again = tk.compile(onnx.load(SQUEEZENET), target="cpu_llvm")
    assert (cache.hits, cache.misses) == (chunks, chunks)
    assert len(optimised) == 1 and "define i32 @" not in optimised[0]     # the globals alone were compiled
    np.testing.assert_array_equal(again.run(squeezenet_input)[0], serial)
    np.testing.assert_array_equal(first.run(squeezenet_input)[0], serial)
    assert len(list((tmp_path / "cpu_llvm").glob("*.o"))) == chunks


def test_without_a_linker_the_parent_emits_the_object_and_it_computes_the_same(monkeypatch, squeezenet_input,
                                                                                 serial):
    merged = []
    real_merge = emitter.merge_objects
    monkeypatch.setattr(emitter, "merge_objects", lambda objects: merged.append(len(objects)) or real_merge(objects))
    monkeypatch.setattr(emitter, "object_linker", lambda: None)
    _, out = _compile_and_run(monkeypatch, "2", squeezenet_input)
    assert merged == []
    np.testing.assert_array_equal(out, serial)


def test_chunk_objects_are_merged_when_a_linker_is_found(monkeypatch, squeezenet_input, serial):
    if parallel_compile.object_linker() is None:
        pytest.skip("no ld on PATH: the parent emits one object (tested above)")
    merged = []
    real_merge = emitter.merge_objects

    def spy(objects):
        result = real_merge(objects)
        merged.append((len(objects), result is not None))
        return result
    monkeypatch.setattr(emitter, "merge_objects", spy)
    _, out = _compile_and_run(monkeypatch, "2", squeezenet_input)
    assert len(merged) == 1 and merged[0][0] > 2 and merged[0][1]
    np.testing.assert_array_equal(out, serial)


def _constant_store_object(name: str, values: tuple[float, ...]) -> bytes:
    """Object code of `void name(float *out)` storing a constant vector: its constant pool label is
    .LCPI0_0 whatever the values, the same local name in every such object."""
    import llvmlite.binding as llvm

    from tensorkiln.sdk.plugin_manager import registry
    from tensorkiln_cpu_llvm.host import machine_config, target_machine

    config = machine_config(registry().target("cpu_llvm"))
    vector = ", ".join(f"float {v:e}" for v in values)
    text = (f'target triple = "{config.triple}"\n'
            f"define void @{name}(<{len(values)} x float>* %out) {{\n"
            f"  store <{len(values)} x float> <{vector}>, <{len(values)} x float>* %out, align 16\n"
            "  ret void\n}\n")
    module = llvm.parse_assembly(text)
    return bytes(target_machine(config).emit_object(module))


def test_merged_chunks_keep_their_own_local_constants():
    # MCJIT resolves relocations to local symbols by name: before the merge renamed them, two
    # chunks' .LCPI0_0 shared one address and a kernel read the other chunk's constants
    import ctypes

    import llvmlite.binding as llvm

    from tensorkiln.sdk.plugin_manager import registry
    from tensorkiln_cpu_llvm.host import machine_config, new_target_machine

    if parallel_compile.object_linker() is None:
        pytest.skip("no ld on PATH")
    first, second = (1.0, 2.0, 3.0, 4.0), (5.0, 6.0, 7.0, 8.0)
    merged = parallel_compile.merge_objects([_constant_store_object("store_first", first),
                                             _constant_store_object("store_second", second)])
    assert merged is not None
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""),
                                        new_target_machine(machine_config(registry().target("cpu_llvm"))))
    engine.add_object_file(llvm.ObjectFileRef.from_data(merged))
    engine.finalize_object()
    for name, expected in (("store_first", first), ("store_second", second)):
        out = np.zeros(4, dtype=np.float32)
        ctypes.CFUNCTYPE(None, ctypes.c_void_p)(engine.get_function_address(name))(out.ctypes.data)
        np.testing.assert_array_equal(out, np.array(expected, dtype=np.float32), err_msg=name)


def test_a_merged_module_exports_and_deploys_as_a_shared_library(monkeypatch, tmp_path, squeezenet_input, serial):
    # the exported package links the merged object with `cc -shared`: local names made unique by
    # the merge must not clash there either
    from tensorkiln.runtime import deploy
    lib, _ = _compile_and_run(monkeypatch, "2", squeezenet_input)
    path = tmp_path / "squeezenet.tkpkg"
    lib.export(path)
    np.testing.assert_array_equal(deploy.load(path)(squeezenet_input), serial)


def test_a_chunk_that_fails_to_build_leaves_no_worker_waiting(monkeypatch):
    started = []
    real_start = parallel_compile._start_worker

    def spy():
        process = real_start()
        started.append(process)
        return process

    def failing_build():
        raise ValueError("chunk 1 cannot be built")

    monkeypatch.setattr(parallel_compile, "_start_worker", spy)
    threads = threading.active_count()
    with pytest.raises(ValueError, match="chunk 1 cannot be built"):
        parallel_compile.optimize_chunks([lambda: None, failing_build])
    assert len(started) == 1
    assert threading.active_count() == threads     # the thread feeding the worker ended with the call
    assert started[0] is None or started[0].wait(timeout=30) is not None


def test_copies_and_elementwise_kernels_get_the_light_pipeline_and_compute_the_same(monkeypatch, squeezenet_input,
                                                                                    serial):
    # squeezenet's concatenations are plain copies (light); its convolutions accumulate and its input
    # layout transform stores 3 scalars per pixel (both full). The serial compile optimises all at O3.
    lights, levels = [], set()

    def seen(job):
        lights.append((job.light, job.text))
        if job.opt_level:   # (the globals' module is light at opt level 0)
            levels.add((job.light, job.codegen_level))
    real_exchange, real_optimize = parallel_compile._exchange, parallel_compile.optimize_chunk
    monkeypatch.setattr(parallel_compile, "_exchange", lambda process, job: seen(job) or real_exchange(process, job))
    monkeypatch.setattr(parallel_compile, "optimize_chunk", lambda job, *a, **k: seen(job)
                        or real_optimize(job, *a, **k))
    _, out = _compile_and_run(monkeypatch, "2", squeezenet_input)
    np.testing.assert_array_equal(out, serial)
    # the light chunks' objects come from O0 code generation (emitter.LIGHT_CODEGEN_LEVEL), the others' from
    # the compile's own level
    assert levels == {(True, 0), (False, None)}
    defined = {light: [name for flag, text in lights if flag == light
                       for name in re.findall(r'^define i32 @"(\w+)"\(', text, re.M)] for light in (False, True)}
    assert defined[True] and all(name.startswith(("fused_concatenate", "fused_layout_transform_reshape"))
                                 for name in defined[True])
    assert any(name.startswith("fused_nn_conv2d") for name in defined[False])
    assert "fused_layout_transform" in defined[False]


def test_which_kernels_need_the_full_pipeline():
    from tensorkiln import te
    from tensorkiln_cpu_llvm.emitter import needs_full_pipeline

    def lowered(*tensors, name):
        schedule = te.create_schedule([t.op for t in tensors[-1:]])
        return te.lower(schedule, list(tensors), name=name)

    a, b = te.placeholder((64, 32), name="a"), te.placeholder((64, 32), name="b")
    add = te.compute((64, 32), lambda i, j: a[i, j] + b[i, j], name="add")
    k = te.reduce_axis((0, 32), name="k")
    total = te.compute((64,), lambda i: te.sum(a[i, k], axis=k), name="total")
    narrow = te.placeholder((64, 3), name="narrow")
    transposed = te.compute((3, 64), lambda c, i: narrow[i, c], name="transposed")
    assert not needs_full_pipeline(lowered(a, b, add, name="add"))          # elementwise, 32-long rows
    assert needs_full_pipeline(lowered(a, total, name="total"))             # a reduction accumulates
    assert not needs_full_pipeline(lowered(narrow, transposed, name="transposed"))   # 64-long inner loop
    wide = te.compute((64, 3), lambda i, c: narrow[i, c] * 2.0, name="wide")
    assert needs_full_pipeline(lowered(narrow, wide, name="wide"))          # 3 scalars per row: unrolling pays


def test_a_light_chunk_generated_at_o0_keeps_its_loop_in_registers():
    """O0 code generation of a light chunk allocates registers as -O2 does (parallel_compile.
    _keep_register_allocation): the loop of an elementwise kernel (a * b + c, then max with 0) reads no
    value back from the stack, as the fast allocator's spills would, and the object computes the kernel."""
    import llvmlite.binding as llvm

    from tensorkiln import te
    from tensorkiln_cpu_llvm.host import machine_config

    n = 4096
    a, b, c = (te.placeholder((n,), name=name) for name in "abc")
    out = te.compute((n,), lambda i: te.max(a[i] * b[i] + c[i], te.const(0.0, "float32")), name="out")
    schedule = te.create_schedule([out.op])
    _, inner = schedule[out].split(out.op.axis[0], factor=8)
    schedule[out].vectorize(inner)
    func = te.lower(schedule, [a, b, c, out], name="bn_relu")
    assert emitter._pipeline_class(func) == "light"
    target = tk.target("llvm")
    config = machine_config(target)
    built = emitter.LLVMEmitter()._build_module([func], target, config, emitter.target_machine(config), kernels=[func])
    job = parallel_compile.ChunkJob(emitter._unoptimized_text(built.llvm_module), tuple(built.linker.sources.items()),
                                    config.triple, config.cpu, config.features, 3, emit_object=True, light=True,
                                    codegen_level=emitter.LIGHT_CODEGEN_LEVEL)
    result = parallel_compile.optimize_chunk(job)
    assert result.object_code
    module = llvm.parse_bitcode(result.bitcode)
    machine = llvm.Target.from_triple(config.triple).create_target_machine(
        cpu=config.cpu, features=config.features, opt=0, reloc="pic", codemodel="default")
    assembly = machine.emit_assembly(module)
    loops = []   # each block that a later jump goes back to, up to that jump
    for label in re.findall(r"^(\.LBB\w+):", assembly, re.M):
        start = assembly.index(f"{label}:")
        back = None
        for back in re.finditer(rf"^\s+j\w+\s+{re.escape(label)}$", assembly[start:], re.M):
            pass
        if back is not None:
            loops.append(assembly[start:start + back.end()])
    innermost = [loop for loop in loops if "vfmadd" in loop or "vmulps" in loop]
    assert innermost, assembly
    assert all("(%rsp)" not in loop for loop in innermost), innermost
