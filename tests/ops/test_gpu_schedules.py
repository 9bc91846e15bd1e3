"""The SDK's GPU schedule library (sdk/schedules/gpu.py) and how targets reach it (compiler/strategy.py).

- structure: the library binds blockIdx/threadIdx on a target whose capabilities list
  thread axes and declares nothing for one without; it reads capabilities, never the
  target name; the core applies it to no target on its own (a plugin opts in through
  `gpu_strategies`, as opencl does), so a target that declares nothing gets the naive default;
- knobs: `gpu_strategies` declares threads_per_block / matmul_tile / conv_channel_block with
  defaults from the capabilities, and the schedule honours the knob values;
- plugin rules: `tensorkiln_schedule_rules` wins over opencl's strategies, keyed by anchor tag
  or op name;
- every op with input cases (tests/ops/op_inputs.py) compiled for opencl with its
  strategy's schedule and compared with the registered numpy reference. All kernels go into ONE
  OpenCL program (PoCL builds a program in ~0.3 s, so one program per case would take minutes);
  a program that fails to build is rebuilt per kernel to name the culprit.
"""
from __future__ import annotations

import sys
import textwrap
from types import SimpleNamespace

import numpy as np
import pytest

import tensorkiln as tk
import tensorkiln.ops  # noqa: F401  (attaches computes to the registry)
from tensorkiln import te, tir
from tensorkiln.compiler.strategy import schedule_for, select_by_tag
from tensorkiln.graph import get_op, list_ops
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.dtypes import from_numpy, to_numpy
from tensorkiln.ops import tags
from tensorkiln.ops.nn.dense import matmul
from tensorkiln.sdk import Workload
from tensorkiln.sdk.schedules.gpu import gpu_strategies, has_threads, schedule_gpu

from .harness import assert_matches
from .op_inputs import CASES, cases_for

GPU_CAPABILITIES = SimpleNamespace(
    thread_axes=("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z"),
    max_threads_per_block=64, max_shared_memory_bytes=16384, memory_scopes=("global", "shared", "local"),
    vector_width_bits=128, max_threads=1, dtypes=("float32", "int32", "bool"))
GPU = SimpleNamespace(name="some_cpu_name", capabilities=GPU_CAPABILITIES)   # named like a CPU on purpose
CPU = SimpleNamespace(name="gpu", capabilities=SimpleNamespace(
    thread_axes=(), max_threads_per_block=0, vector_width_bits=128, max_threads=0, dtypes=("float32",)))


def _opencl():
    try:
        target = tk.target("opencl")
    except Exception:  # the plugin is not installed in this environment
        return None
    return target if target.spec.is_available else None


OPENCL = _opencl()
needs_opencl = pytest.mark.skipif(OPENCL is None, reason="the opencl target (pyopencl + a device) is not available")


def _thread_tags(s: te.Schedule) -> set[str]:
    return {attr.thread_tag for stage in s.stages for attr in stage.iter_attrs.values() if attr.thread_tag}


def _op_outputs(name: str, arrays, attrs):
    op = get_op(name)
    inputs = [te.placeholder(a.shape, from_numpy(a.dtype), name=f"input{i}") for i, a in enumerate(arrays)]
    out_type = op.type_rule(tuple(TensorType(a.shape, t.dtype) for a, t in zip(arrays, inputs)), attrs)
    outputs = op.compute(inputs, attrs, out_type)
    return inputs, list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]


def _interpret(s, inputs, outputs, arrays):
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=to_numpy(o.dtype)) for o in outputs]
    tir.interpret(te.lower(s, [*inputs, *outputs], name="kernel"), *arrays, *results)
    return results


# ---- dispatch by capabilities -----------------------------------------------------------------


def _implementation(target, key: str):
    (found,) = [impl for impl in gpu_strategies(target) if key in impl.keys]
    return found


def _default_config(implementation, target, outputs=()):
    return implementation.space(Workload(outputs=tuple(outputs)), target).default_config()


def test_gpu_library_reads_capabilities_not_the_name():
    assert has_threads(GPU) and not has_threads(CPU)
    assert gpu_strategies(CPU) == []
    x = te.placeholder((4, 33), "float32", name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 2.0, name="y", tag=tags.ELEMWISE)
    injective = _implementation(GPU, "injective")
    assert injective.name == "gpu.injective"
    s = injective.schedule([y], GPU, _default_config(injective, GPU, [y]))
    assert _thread_tags(s) == {"blockIdx.x", "threadIdx.x"}


def test_a_target_that_declares_no_strategies_gets_the_naive_default():
    """No plugin serves these capability-only targets: the GPU one gets no threads either."""
    x = te.placeholder((4, 33), "float32", name="x")
    y = te.compute(x.shape, lambda i, j: x[i, j] * 2.0, name="y", tag=tags.ELEMWISE)
    for target in (GPU, CPU):
        choice = select_by_tag([y], target)
        assert choice.name == "core.naive" and choice.implementation is None
        assert _thread_tags(schedule_for([y], target)) == set()


def test_gpu_knob_defaults_come_from_the_capabilities():
    x = te.placeholder((16, 24), "float32", name="x")
    w = te.placeholder((24, 12), "float32", name="w")
    out = matmul(x, w, (16, 12))
    dense = _implementation(GPU, tags.DENSE)
    space = dense.space(Workload(outputs=(out,)), GPU)
    config = space.default_config()
    # max_threads_per_block = 64: the block is min(256, 64), an 8x8 tile still fits, 16x16 does not
    assert config == {"threads_per_block": 64, "matmul_tile": 8}
    assert max(space.knobs[0].candidates) == 64
    assert 16 not in space.knobs[1].candidates
    big = SimpleNamespace(name="big_gpu", capabilities=SimpleNamespace(
        **{**vars(GPU_CAPABILITIES), "max_threads_per_block": 1024}))
    y = te.compute((4, 8), lambda i, j: x[i, j] * 2.0, name="y", tag=tags.ELEMWISE)
    assert _default_config(_implementation(big, "injective"), big, [y]) == {"threads_per_block": 256}


def test_gpu_schedules_honour_their_knob_values():
    """A 4x4 matmul tile instead of 8x8: shared tiles of 4 (not 8) rows of x and columns of w, same result."""
    x = te.placeholder((16, 24), "float32", name="x")
    w = te.placeholder((24, 12), "float32", name="w")
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((16, 24), "float32"), rng.standard_normal((24, 12), "float32")
    dense = _implementation(GPU, tags.DENSE)
    shared = {}
    for tile in (4, 8):
        out = matmul(x, w, (16, 12))
        s = dense.schedule([out], GPU, {"threads_per_block": 64, "matmul_tile": tile})
        shared[tile] = sorted(n for n, size in _allocations(s, [x, w, out]).items() if size == tile * 24)
        (got,) = _interpret(s, [x, w], [out], [a, b])
        np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)
    assert len(shared[4]) == 2 and len(shared[8]) == 2   # one row block of x and one column block of w each


@pytest.mark.parametrize("name, index", [("nn.conv2d", 0), ("nn.conv2d", 1), ("nn.dense", 0), ("nn.matmul", 1),
                                         ("nn.softmax", 0), ("nn.layer_norm", 1), ("nn.max_pool2d", 1),
                                         ("sum", 2), ("argmax", 0), ("cumsum", 1), ("add", 1)])
def test_gpu_schedules_bind_threads_and_match_the_reference(name, index):
    """Interpreted (the tir interpreter runs bound loops serially): the loop nest is right."""
    case = cases_for(name, "tiny")[index]
    inputs, outputs = _op_outputs(name, case.inputs, case.attrs)
    s = schedule_gpu(outputs, GPU)
    assert {"blockIdx.x", "threadIdx.x"} <= _thread_tags(s)
    assert_matches(get_op(name), _interpret(s, inputs, outputs, case.inputs), case.inputs, case.attrs, case.atol)


def test_dense_tiles_use_shared_memory_and_2d_blocks():
    x = te.placeholder((16, 24), "float32", name="x")
    w = te.placeholder((24, 12), "float32", name="w")
    out = matmul(x, w, (16, 12))
    s = schedule_gpu([out], GPU)
    assert {"blockIdx.x", "blockIdx.y", "threadIdx.x", "threadIdx.y"} <= _thread_tags(s)
    assert sorted(st.scope for st in s.stages if st.scope == "shared") == ["shared", "shared"]
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((16, 24), "float32"), rng.standard_normal((24, 12), "float32")
    (got,) = _interpret(s, [x, w], [out], [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-5, atol=1e-5)


def test_dense_without_room_in_shared_memory_falls_back_to_one_thread_per_output():
    small = SimpleNamespace(name="tiny_gpu", capabilities=SimpleNamespace(
        **{**vars(GPU_CAPABILITIES), "max_shared_memory_bytes": 64}))
    x = te.placeholder((16, 24), "float32", name="x")
    w = te.placeholder((24, 12), "float32", name="w")
    s = schedule_gpu([matmul(x, w, (16, 12))], small)
    assert not [st for st in s.stages if st.scope == "shared"]
    assert "threadIdx.y" in _thread_tags(s)


def _allocations(s, args) -> dict[str, int]:
    """{buffer name: elements} of the allocations in the lowered function."""
    import re
    text = str(te.lower(s, args, name="kernel"))
    found = re.findall(r"allocate ([\w.]+): \w+\[([\d, ]+)\]", text)
    return {name: int(np.prod([int(d) for d in dims.split(",")])) for name, dims in found}


def test_a_thread_computes_only_its_own_region_of_an_intermediate():
    """conv2d + relu: the conv accumulates one channel block per work-item (local scope: bound
    inference relaxes every thread index of a global stage), the block holds many threads."""
    from tensorkiln.graph.ops.nn import Conv2DAttrs
    x = te.placeholder((1, 3, 32, 32), "float32", name="x")
    w = te.placeholder((16, 3, 3, 3), "float32", name="w")
    conv = get_op("nn.conv2d").compute([x, w], Conv2DAttrs(padding=(1, 1, 1, 1)), TensorType((1, 16, 32, 32), "float32"))
    out = get_op("nn.relu").compute([conv], None, TensorType((1, 16, 32, 32), "float32"))
    s = schedule_gpu([out], GPU)
    assert _allocations(s, [x, w, out]) == {"T_conv2d": 4}   # padding inlined, 4 output channels
    threads = [iv for st in s.stages for iv, attr in st.iter_attrs.items() if attr.thread_tag == "threadIdx.x"]
    assert threads and all(iv.name.endswith("inner") for iv in threads)


def test_dense_weight_packing_is_inlined_on_gpus():
    x = te.placeholder((8, 16), "float32", name="x")
    w = te.placeholder((32, 16), "float32", name="w")
    out = get_op("nn.dense").compute([x, w], None, TensorType((8, 32), "float32"))
    s = schedule_gpu([out], GPU)
    assert "T_dense_pack" not in _allocations(s, [x, w, out])


def test_group_whose_outputs_read_each_other_runs_on_one_work_item():
    x = te.placeholder((8,), "float32", name="x")
    y = te.compute((8,), lambda i: x[i] + 1.0, name="y", tag=tags.ELEMWISE)
    z = te.compute((8,), lambda i: y[7 - i] * 2.0, name="z", tag=tags.ELEMWISE)
    s = schedule_gpu([y, z], GPU)
    assert _thread_tags(s) == set()
    a = np.arange(8, dtype="float32")
    got_y, got_z = _interpret(s, [x], [y, z], [a])
    np.testing.assert_array_equal(got_z, (a[::-1] + 1) * 2)


# ---- plugin rules ------------------------------------------------------------------------------


@needs_opencl
def test_dispatch_tries_the_anchor_tag_then_the_group_ops():
    case = cases_for("nn.conv2d", "tiny")[0]
    _, outputs = _op_outputs("nn.conv2d", case.inputs, case.attrs)
    choice = select_by_tag(outputs, OPENCL, ops=("nn.conv2d", "add", "nn.relu"))
    assert (choice.key, choice.name) == (tags.CONV2D_NCHW, "opencl.conv2d_nchw")
    assert choice.config == {"threads_per_block": 256, "conv_channel_block": 4}
    x = te.placeholder((4,), "float32", name="x")
    choice = select_by_tag([te.compute((4,), lambda i: x[i], tag=tags.ELEMWISE)], OPENCL, ops=("exp",))
    assert (choice.key, choice.name) == ("injective", "opencl.injective")


RULES_PLUGIN = '''
from tensorkiln.sdk import hookimpl

CALLS = []


def _serial(outputs, target):
    from tensorkiln import te
    CALLS.append(tuple(t.op.name for t in outputs))
    return te.create_schedule([t.op for t in outputs])


@hookimpl
def tensorkiln_schedule_rules(target):
    if target.name != "opencl":
        return {}
    return {"conv2d_nchw": _serial, "exp": _serial}
'''


@pytest.fixture
def rules_plugin(tmp_path, monkeypatch):
    """A throw-away plugin module registered on the live plugin manager for one test."""
    from tensorkiln.sdk.plugin_manager import registry
    (tmp_path / "tk_test_schedule_rules.py").write_text(textwrap.dedent(RULES_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    import importlib
    module = importlib.import_module("tk_test_schedule_rules")
    manager = registry().hooks
    manager.register(module, name="tk_test_schedule_rules")
    yield module
    manager.unregister(module)
    sys.modules.pop("tk_test_schedule_rules", None)


@needs_opencl
def test_plugin_rules_win_over_the_default_by_tag_and_by_op_name(rules_plugin):
    case = cases_for("nn.conv2d", "tiny")[0]
    _, outputs = _op_outputs("nn.conv2d", case.inputs, case.attrs)
    assert _thread_tags(schedule_for(outputs, OPENCL)) == set()           # by anchor tag
    x = te.placeholder((4,), "float32", name="x")
    y = te.compute((4,), lambda i: te.exp(x[i]), name="y", tag=tags.ELEMWISE)
    assert _thread_tags(schedule_for([y], OPENCL, ops=("exp",))) == set()  # by op name
    assert _thread_tags(schedule_for([y], OPENCL, ops=("tanh",))) == {"blockIdx.x", "threadIdx.x"}
    assert len(rules_plugin.CALLS) == 2


# ---- every op on opencl ------------------------------------------------------------------------


def _opencl_params():
    params = []
    for op in list_ops():
        if op.name not in CASES:
            continue
        for index, case in enumerate(cases_for(op.name, "tiny")):
            unsupported = sorted(d for d in _dtypes(op, case) if OPENCL is not None and
                                 d not in OPENCL.capabilities.dtypes)
            marks = [pytest.mark.skip(reason=f"opencl's manifest does not list {', '.join(unsupported)}; "
                                      "placement sends such ops to the CPU")] if unsupported else []
            if op.name == "image.grid_sample" and case.attrs.mode == "cubic":
                marks = [pytest.mark.skip(reason="opencl's supported_ops sends cubic grid_sample to the CPU "
                                                 "(the C-source emitter prints its 16 taps for minutes)")]
            params.append(pytest.param(op.name, index, id=f"{op.name}-{case.label or index}", marks=marks))
    return params


def _dtypes(op, case) -> set[str]:
    """Dtypes of the case's inputs and outputs (placement checks both against the manifest)."""
    types = tuple(TensorType(a.shape, from_numpy(a.dtype)) for a in case.inputs)
    result = op.type_rule(types, case.attrs)
    fields = getattr(result, "fields", (result,))
    return {t.dtype for t in types} | {t.dtype for t in fields}


_PARAMS = _opencl_params()


def _kernel_name(name: str, index: int) -> str:
    return "op_" + "".join(c if c.isalnum() else "_" for c in name) + f"_{index}"


@pytest.fixture(scope="module")
def opencl_program():
    """{(op name, case index): (kernel, inputs, outputs) or the exception that stopped it} in one program."""
    lowered, failures = {}, {}
    for param in _PARAMS:
        name, index = param.values
        if param.marks:
            continue
        case = cases_for(name, "tiny")[index]
        try:
            inputs, outputs = _op_outputs(name, case.inputs, case.attrs)
            s = schedule_for(outputs, OPENCL, ops=(name,))
            lowered[(name, index)] = (te.lower(s, [*inputs, *outputs], name=_kernel_name(name, index)), outputs)
        except Exception as error:  # reported by the test of that case
            failures[(name, index)] = error
    try:
        module = _load([func for func, _ in lowered.values()])
        modules = {key: module for key in lowered}
    except Exception:  # find the kernel that breaks the program
        modules = {}
        for key, (func, _) in lowered.items():
            try:
                modules[key] = _load([func])
            except Exception as error:
                failures[key] = error
    return {key: (modules[key].get_function(func.name), outputs) for key, (func, outputs) in lowered.items()
            if key in modules}, failures


def _load(funcs):
    artifact = OPENCL.spec.emitter.emit(funcs, OPENCL)
    return OPENCL.spec.loader.load(artifact, OPENCL)


@needs_opencl
@pytest.mark.parametrize("name, index", _PARAMS)
def test_every_op_runs_on_opencl_with_its_default_schedule(opencl_program, name, index):
    kernels, failures = opencl_program
    if (name, index) in failures:
        raise failures[(name, index)]
    kernel, outputs = kernels[(name, index)]
    case = cases_for(name, "tiny")[index]
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=to_numpy(o.dtype)) for o in outputs]
    kernel(*case.inputs, *results)
    assert_matches(get_op(name), results, case.inputs, case.attrs, case.atol)


@needs_opencl
def test_opencl_launches_full_work_groups():
    """Regression: split/fused loops have no extent before lowering, so the block size comes
    from the shapes; a block of 1 made every conv launch 1-item work-groups."""
    case = cases_for("nn.conv2d", "moderate")[0]
    inputs, outputs = _op_outputs("nn.conv2d", case.inputs, case.attrs)
    f = tk.build(schedule_for(outputs, OPENCL), [*inputs, *outputs], target=OPENCL, name="conv")
    block = f.artifact.metadata["kernels"]["conv"]["block"]
    assert block[0] * block[1] * block[2] >= 64
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=to_numpy(o.dtype)) for o in outputs]
    f(*case.inputs, *results)
    assert_matches(get_op("nn.conv2d"), results, case.inputs, case.attrs, case.atol)
