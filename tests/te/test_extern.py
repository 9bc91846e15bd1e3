"""te.extern: stages whose loop IR their author builds (te/extern.py), lowered among scheduled stages,
run on cpu_llvm and the tir interpreter against numpy; every schedule primitive on them is refused."""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import ScheduleError, TensorkilnError
from tensorkiln.ops import naive_schedule
from tensorkiln.sdk.schedules.generated import generated_space, schedule_generated
from tensorkiln.sdk.strategy import Workload
from tensorkiln.sdk.schedules.gpu import schedule_gpu
from tensorkiln.tir.visit import post_order_visit

ROWS, LENGTH = 3, 10


def _prefix_max_body(rows: int, length: int):
    """Running maximum along each row, a sequential algorithm no te.compute expresses."""
    def body(ins, outs):
        ib = te.IRBuilder()
        x, y = ib.buffer(ins[0]), ib.buffer(outs[0])
        with ib.for_range(0, rows, name="r", kind="parallel") as r:
            best = ib.scalar(x.dtype, "best", x[r * length])
            with ib.for_range(0, length, name="i") as i:
                best[0] = te.max(best[0], x[r * length + i])
                y[r * length + i] = best[0]
        return ib.get()
    return body


def _prefix_max(x, rows=ROWS, length=LENGTH, name="Y"):
    (y,) = te.extern([(rows, length)], [x], _prefix_max_body(rows, length), name=name)
    return y


def _run(s, args, arrays, backend):
    outs = [np.zeros(tuple(a.shape), dtype=str(a.dtype)) for a in args[len(arrays):]]
    if backend == "interpret":
        tir.interpret(te.lower(s, args), *arrays, *outs)
    else:
        tk.build(s, args, target="llvm")(*arrays, *outs)
    return outs


def _data(shape=(ROWS, LENGTH), seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


@pytest.mark.parametrize("backend", ["llvm", "interpret"])
def test_extern_prefix_max_between_scheduled_stages_matches_numpy(backend):
    X = te.placeholder((ROWS, LENGTH), name="X")
    P = te.compute((ROWS, LENGTH), lambda i, j: X[i, j] + 1.0, name="P")    # producer: a buffer at the root
    Y = _prefix_max(P)
    Z = te.compute((ROWS, LENGTH), lambda i, j: Y[i, j] * 2.0, name="Z")    # consumer, scheduled
    s = te.create_schedule(Z.op)
    outer, inner = s[Z].split(Z.op.axis[1], factor=4)
    s[Z].parallel(Z.op.axis[0])
    s[Z].unroll(inner)
    x = _data()
    (z,) = _run(s, [X, Z], [x], backend)
    np.testing.assert_allclose(z, 2 * np.maximum.accumulate(x + 1, axis=1), rtol=1e-6)


def test_extern_with_two_outputs_and_a_scalar_let():
    """Running max and its argmax (the first position of the max) from one body."""
    X = te.placeholder((LENGTH,), "int32", name="X")

    def body(ins, outs):
        ib = te.IRBuilder()
        x, best, where = ib.buffer(ins[0]), ib.buffer(outs[0]), ib.buffer(outs[1])
        best[0], where[0] = x[0], 0
        with ib.for_range(1, LENGTH, name="i") as i:
            value = ib.let("value", x[i])
            with ib.if_scope(value > best[i - 1]):
                best[i], where[i] = value, te.cast(i, "int64")
            with ib.else_scope():
                best[i], where[i] = best[i - 1], where[i - 1]
        return ib.get()
    best, where = te.extern([(LENGTH,), (LENGTH,)], [X], body, dtypes=["int32", "int64"], name="run",
                            output_names=["run_max", "run_argmax"])
    assert best.op is where.op and where.value_index == 1
    s = te.create_schedule([best.op])
    x = np.random.default_rng(1).integers(0, 5, LENGTH).astype("int32")
    for backend in ("llvm", "interpret"):
        got_best, got_where = _run(s, [X, best, where], [x], backend)
        np.testing.assert_array_equal(got_best, np.maximum.accumulate(x))
        np.testing.assert_array_equal(got_where, [int(np.argmax(x[:i + 1])) for i in range(LENGTH)])
    names = [p.name for p in te.lower(s, [X, best, where]).params]
    assert names == ["X", "run_max", "run_argmax"]


def test_large_extern_intermediate_is_heap_allocated_on_cpu_llvm():
    rows, length = 4, 1 << 13   # 128 KiB, past cpu_llvm's stack limit
    X = te.placeholder((rows, length), name="X")
    Y = _prefix_max(X, rows, length)
    Z = te.compute((rows, length), lambda i, j: Y[i, j] - X[i, j], name="Z")
    s = te.create_schedule(Z.op)
    x = _data((rows, length), seed=2)
    (z,) = _run(s, [X, Z], [x], "llvm")
    np.testing.assert_allclose(z, np.maximum.accumulate(x, axis=1) - x, rtol=1e-6)


def test_extern_reading_an_extern_output():
    X = te.placeholder((ROWS, LENGTH), name="X")
    Y = _prefix_max(X)
    W = te.extern([(ROWS, LENGTH)], [Y], _prefix_max_body(ROWS, LENGTH), name="W")[0]
    s = te.create_schedule(W.op)
    x = _data(seed=3)
    (w,) = _run(s, [X, W], [x], "llvm")
    np.testing.assert_allclose(w, np.maximum.accumulate(x, axis=1), rtol=1e-6)


def _group():
    X = te.placeholder((ROWS, LENGTH), name="X")
    P = te.compute((ROWS, LENGTH), lambda i, j: X[i, j] * 3.0, name="P", tag="elemwise")
    Y = _prefix_max(P)
    Z = te.compute((ROWS, LENGTH), lambda i, j: Y[i, j] + X[i, j], name="Z", tag="elemwise")
    return X, Z


@pytest.mark.parametrize("schedule", ["naive", "cpu_llvm", "generated", "opencl"])
def test_default_schedules_leave_an_extern_stage_and_its_producers_alone(schedule):
    X, Z = _group()
    if schedule == "naive":
        s = naive_schedule([Z])
    elif schedule == "cpu_llvm":
        from tensorkiln.compiler.strategy import schedule_for
        s = schedule_for([Z], tk.target("llvm"))
    elif schedule == "generated":
        space = generated_space(Workload(outputs=(Z,)), tk.target("llvm"))
        s = schedule_generated([Z], tk.target("llvm"), space.default_config())
    else:
        s = schedule_gpu([Z], tk.target("opencl"))
    assert s["P"].attach_type == "root" and s["Y"].attach_type == "root"
    x = _data(seed=4)
    (z,) = _run(s, [X, Z], [x], "interpret")
    np.testing.assert_allclose(z, np.maximum.accumulate(3 * x, axis=1) + x, rtol=1e-6)


@pytest.mark.parametrize("primitive, call", [
    ("split", lambda s, st: st.split("i", factor=2)),
    ("parallel", lambda s, st: st.parallel("r")),
    ("vectorize", lambda s, st: st.vectorize("i")),
    ("compute_inline", lambda s, st: st.compute_inline()),
    ("compute_at", lambda s, st: st.compute_at(s["Z"], "i")),
    ("set_scope", lambda s, st: st.set_scope("local")),
    ("pipeline", lambda s, st: st.pipeline("i")),
    ("cache_write", lambda s, st: s.cache_write(st.op.output(0), "local")),
])
def test_schedule_primitives_on_an_extern_stage_are_refused(primitive, call):
    X, Z = _group()
    s = te.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match=rf"{primitive} on stage Y: it is an extern stage \(te.extern\)"):
        call(s, s["Y"])


def test_attaching_into_or_inlining_a_producer_of_an_extern_stage_is_refused():
    X, Z = _group()
    s = te.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match=r"compute_at on stage Y: it is an extern stage"):
        s["P"].compute_at(s["Y"], "i")
    with pytest.raises(ScheduleError, match=r"compute_inline on stage P: extern stage Y reads it"):
        s["P"].compute_inline()
    with pytest.raises(ScheduleError, match=r"compute_at on stage P: extern stage Y reads it"):
        s["P"].compute_at(s["Z"], Z.op.axis[0])
    with pytest.raises(ScheduleError, match=r"cache_read of P: stage Y is an extern stage"):
        s.cache_read(s["P"].op.output(0), "local", [s["Y"]])


def test_extern_body_that_is_not_a_statement_is_refused_naming_the_stage():
    X = te.placeholder((4,), name="X")
    (Y,) = te.extern([(4,)], [X], lambda ins, outs: None, name="broken")
    with pytest.raises(ScheduleError, match=r"extern stage broken: its body function returned NoneType"):
        te.lower(te.create_schedule(Y.op), [X, Y])


def test_extern_placeholder_input_missing_from_args_is_refused():
    X = te.placeholder((ROWS, LENGTH), name="X")
    Y = _prefix_max(X)
    with pytest.raises(ScheduleError, match=r"placeholder X is read by extern stage Y but not in args"):
        te.lower(te.create_schedule(Y.op), [Y])


def test_extern_stage_keeps_its_loops_and_trace_replays_around_it():
    X, Z = _group()
    s = te.create_schedule(Z.op)
    s[Z].split(Z.op.axis[1], factor=5)
    s["P"].parallel("i")
    X2, Z2 = _group()
    s2 = te.replay(s.trace, te.create_schedule(Z2.op))
    assert str(te.lower(s, [X, Z])) == str(te.lower(s2, [X2, Z2]))
    loops = []
    post_order_visit(te.lower(s, [X, Z]).body, lambda x: loops.append(x) if isinstance(x, tir.For) else None)
    assert any(loop.loop_var.name == "r" and loop.kind is tir.ForKind.PARALLEL for loop in loops)


def test_ir_builder_else_scope_must_follow_an_if_scope():
    ib = te.IRBuilder()
    with pytest.raises(ScheduleError, match="else_scope must follow an if_scope"):
        with ib.else_scope():
            pass


@pytest.mark.parametrize("target", ["opencl", "cuda", "fpga_hls"])
def test_extern_group_runs_on_the_c_source_targets(target):
    """The shared C-source emitter lowers the extern body's loops, scalars and lets (one work-item on GPUs;
    cuda runs on its CPU shim when no GPU is present)."""
    resolved = tk.target(target)
    try:
        resolved.spec.require_available()
    except TensorkilnError as error:
        pytest.skip(f"{target} is not available here: {error}")
    X, Z = _group()
    s = schedule_gpu([Z], resolved) if target != "fpga_hls" else naive_schedule([Z])
    x = _data(seed=5)
    z = np.zeros_like(x)
    tk.build(s, [X, Z], target=resolved)(x, z)
    np.testing.assert_allclose(z, np.maximum.accumulate(3 * x, axis=1) + x, rtol=1e-6)


def test_gpu_schedule_binds_a_lone_extern_stage_parallel_loop_to_threads():
    rows, length = 300, 6   # two blocks of 256 threads, the second guarded
    X = te.placeholder((rows, length), name="X")
    Y = _prefix_max(X, rows, length)
    s = schedule_gpu([Y], tk.target("opencl"))
    assert [r.to_dict() for r in s.trace] == [{"primitive": "BindParallelLoops", "stage": "Y", "threads": 256}]
    func = te.lower(s, [X, Y])
    assert dict(func.attrs)["thread_extents"] == (("blockIdx.x", 2), ("threadIdx.x", 256))
    assert not [loop for loop in _loops_of(func) if loop.kind is tir.ForKind.PARALLEL]
    x = _data((rows, length), seed=6)
    for backend in ("interpret", "opencl"):
        y = np.zeros_like(x)
        if backend == "interpret":
            tir.interpret(func, x, y)
        else:
            tk.build(s, [X, Y], target="opencl")(x, y)
        np.testing.assert_allclose(y, np.maximum.accumulate(x, axis=1), rtol=1e-6, err_msg=backend)
    replayed = te.replay(te.trace.from_json(te.trace.to_json(s.trace)), te.create_schedule(Y.op))
    assert str(te.lower(replayed, [X, Y])) == str(func)


def _loops_of(func):
    found = []
    post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, tir.For) else None)
    return found


def test_bind_parallel_loops_refusals():
    X, Z = _group()
    s = te.create_schedule(Z.op)
    with pytest.raises(ScheduleError, match=r"bind_parallel_loops on stage Z: only an extern stage"):
        s["Z"].bind_parallel_loops(64)
    with pytest.raises(ScheduleError, match=r"bind_parallel_loops on stage Y: threads=0 must be a positive"):
        s["Y"].bind_parallel_loops(0)

    def nested(ins, outs):
        ib = te.IRBuilder()
        x, y = ib.buffer(ins[0]), ib.buffer(outs[0])
        with ib.for_range(0, 2, name="outer"):
            with ib.for_range(0, LENGTH, name="i", kind="parallel") as i:
                y[i] = x[i]
        return ib.get()
    A = te.placeholder((LENGTH,), name="A")
    (B,) = te.extern([(LENGTH,)], [A], nested, name="B")
    s = te.create_schedule(B.op)
    s[B].bind_parallel_loops(32)
    with pytest.raises(ScheduleError, match=r"bind_parallel_loops on stage B: its parallel loop i is not the body's "
                                            r"outermost statement"):
        te.lower(s, [A, B])


@pytest.mark.parametrize("call, message", [
    (lambda X: te.extern([(4,), (4,)], [X], _copy_body, dtypes=["float32"], name="E"),
     r"te.extern E: 2 output shapes but 1 dtypes"),
    (lambda X: te.extern([(4,), (4,)], [X], _copy_body, output_names=["a", "a"], name="E"),
     r"te.extern E: output_names \['a', 'a'\] must be 2 distinct names"),
    (lambda X: te.extern([(4,)], [], _copy_body, name="E"),
     r"te.extern E: give dtypes= \(there is no input to take the dtype from\)"),
    (lambda X: te.extern([(4,)], [X], None, name="E"), r"te.extern E: fbody must be a function"),
    (lambda X: te.extern([(-1,)], [X], _copy_body, name="E"), r"te.extern E: extent -1 is negative"),
    (lambda X: te.extern([(4,)], [X], _copy_body, dtypes="float13", name="E"), r"float13"),
])
def test_extern_arguments_are_checked(call, message):
    X = te.placeholder((4,), name="X")
    with pytest.raises(TensorkilnError, match=message):
        call(X)


def _copy_body(ins, outs):
    ib = te.IRBuilder()
    x, y = ib.buffer(ins[0]), ib.buffer(outs[0])
    with ib.for_range(0, 4) as i:
        y[i] = x[i]
    return ib.get()
