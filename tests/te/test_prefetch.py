"""Stage.prefetch: the region each iteration asks for is what the loops inside read `offset` iterations
later (checked address by address against the lowered loop nest itself), results never change, the hint
reaches cpu_llvm's LLVM and OpenCL C, and targets that do not claim it build the schedule without it."""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import te, tir
from tensorkiln.ir.errors import ScheduleError
from tensorkiln.tir.visit import post_order_visit

M, N, K = 24, 10, 36


def _gemm():
    a = te.placeholder((M, K), name="A")
    b = te.placeholder((K, N), name="B")
    k = te.reduce_axis((0, K), name="k")
    c = te.compute((M, N), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return a, b, c


_BINARY = {tir.Add: lambda a, b: a + b, tir.Sub: lambda a, b: a - b, tir.Mul: lambda a, b: a * b,
           tir.FloorDiv: lambda a, b: a // b, tir.FloorMod: lambda a, b: a % b, tir.Min: min, tir.Max: max,
           tir.LT: lambda a, b: a < b, tir.LE: lambda a, b: a <= b, tir.GT: lambda a, b: a > b,
           tir.GE: lambda a, b: a >= b, tir.EQ: lambda a, b: a == b, tir.NE: lambda a, b: a != b,
           tir.And: lambda a, b: a and b, tir.Or: lambda a, b: a or b}


def _value(expr, env) -> int:
    """An integer index expression of the loop nest at the loop values `env` (the test's own evaluator)."""
    if isinstance(expr, tir.IntImm):
        return expr.value
    if isinstance(expr, tir.Var):
        return env[expr]
    if type(expr) in _BINARY:
        return int(_BINARY[type(expr)](_value(expr.a, env), _value(expr.b, env)))
    if isinstance(expr, tir.Cast):
        return _value(expr.value, env)
    if isinstance(expr, tir.Select):
        return _value(expr.true_value if _value(expr.condition, env) else expr.false_value, env)
    raise AssertionError(f"the test's evaluator does not know {type(expr).__name__}: {expr}")


def _walk(stmt, env, seen):
    """Run the loop nest's control flow, recording prefetched and loaded addresses with the loop values."""
    if isinstance(stmt, tir.For):
        start = _value(stmt.min, env)
        for v in range(start, start + _value(stmt.extent, env)):
            _walk(stmt.body, {**env, stmt.loop_var: v}, seen)
    elif isinstance(stmt, tir.SeqStmt):
        for child in stmt.stmts:
            _walk(child, env, seen)
    elif isinstance(stmt, tir.IfThenElse):
        if _value(stmt.condition, env):
            _walk(stmt.then_case, env, seen)
        elif stmt.else_case is not None:
            _walk(stmt.else_case, env, seen)
    elif isinstance(stmt, tir.Evaluate) and isinstance(stmt.value, tir.Call) \
            and stmt.value.name == tir.PREFETCH_CALL:
        pointer, count = stmt.value.args
        first = _value(pointer.index, env)
        seen.append(("prefetch", pointer.buffer.name, dict(env), range(first, first + _value(count, env))))
    elif isinstance(stmt, tir.Store):
        loads = []
        post_order_visit(stmt.value, lambda node: loads.append(node) if isinstance(node, tir.Load) else None)
        for load in loads:
            seen.append(("load", load.buffer.name, dict(env), range(_value(load.index, env),
                                                                    _value(load.index, env) + 1)))
    else:
        raise AssertionError(f"unexpected statement {type(stmt).__name__} in the test's loop nests")


def _check_regions(func, stage, axis, tensor_name, offset, shape):
    """Each prefetch at loop `axis` covers exactly the per-dimension box of what the loops inside read in
    iteration axis + offset (the loops outside at the same values); past the loop, only addresses inside
    the tensor."""
    seen = []
    _walk(func.body, {}, seen)
    names = [leaf.var for leaf in stage.leaf_iter_vars]
    outer = names[:names.index(axis.var) + 1]
    reads: dict = {}
    for kind, buffer, env, span in seen:
        if kind == "load" and buffer == tensor_name:
            reads.setdefault(tuple(env[v] for v in outer), set()).update(span)
    prefetched: dict = {}
    for kind, buffer, env, span in seen:
        if kind == "prefetch" and buffer == tensor_name:
            prefetched.setdefault(tuple(env[v] for v in outer), set()).update(span)
    assert prefetched, "no prefetch ran"
    size, columns = int(np.prod(shape)), shape[-1]
    for key, addresses in prefetched.items():
        assert all(0 <= a < size for a in addresses), f"prefetch outside {tensor_name} at {key}"
        ahead = (*key[:-1], key[-1] + offset)
        if ahead not in reads:
            continue
        read = reads[ahead]
        rows = [a // columns for a in read]
        cols = [a % columns for a in read]
        box = {r * columns + c for r in range(min(rows), max(rows) + 1) for c in range(min(cols), max(cols) + 1)}
        assert addresses == box, f"iteration {key}: prefetched {sorted(addresses)[:8]}..., reads of {ahead} span " \
                                 f"{sorted(box)[:8]}..."
    assert any((*key[:-1], key[-1] + offset) in reads for key in prefetched), "no iteration had a next one"


@settings(max_examples=8, deadline=None)
@given(i_factor=st.sampled_from([4, 5, 8]), k_factor=st.sampled_from([6, 9, 12]), which=st.sampled_from("AB"),
       level=st.integers(0, 3), offset=st.sampled_from([1, 2, -1]))
def test_random_prefetches_ask_for_what_a_later_iteration_reads(i_factor, k_factor, which, level, offset):
    """A random split GEMM with a prefetch of A or B at a random loop and offset: the regions match the reads
    of the lowered nest, and the built kernel still matches numpy."""
    a, b, c = _gemm()
    s = te.create_schedule(c.op)
    i, j = c.op.axis
    io, ii = s[c].split(i, factor=i_factor)
    ko, ki = s[c].split(c.op.reduce_axis[0], factor=k_factor)
    s[c].reorder(io, ko, j, ii, ki)
    axis = (io, ko, j, ii)[level]
    tensor = a if which == "A" else b
    s[c].prefetch(tensor, axis, offset)
    func = te.lower(s, [a, b, c])
    _check_regions(func, s[c], axis, which, offset, (M, K) if which == "A" else (K, N))
    module = tk.build(s, [a, b, c], target="llvm")
    x = np.random.default_rng(0).standard_normal((M, K)).astype("float32")
    y = np.random.default_rng(1).standard_normal((K, N)).astype("float32")
    out = np.zeros((M, N), "float32")
    module(x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-4)


def _prefetching_schedule():
    a, b, c = _gemm()
    s = te.create_schedule(c.op)
    io, ii = s[c].split(c.op.axis[0], factor=8)
    s[c].prefetch(a, io, 1)
    return s, [a, b, c]


def test_the_hint_reaches_llvm_and_opencl_c_and_is_left_out_elsewhere():
    """cpu_llvm emits llvm.prefetch and OpenCL C its prefetch() built-in; cuda and fpga_hls, which do not
    claim the primitive, build the same schedule without it. Every one matches numpy, and the prefetched
    input is not reported as written (the executor may pass it in place)."""
    s, tensors = _prefetching_schedule()
    assert "prefetch(&A[" in str(te.lower(s, tensors))
    x = np.random.default_rng(2).standard_normal((M, K)).astype("float32")
    y = np.random.default_rng(3).standard_normal((K, N)).astype("float32")
    for target, marker in (("llvm", "@llvm.prefetch"), ("opencl", "prefetch(A + "), ("cuda", None),
                           ("fpga_hls", None)):
        module = tk.build(s, tensors, target=target)
        source = module.get_source()
        if marker is None:
            assert "prefetch" not in source, target
        else:
            assert marker in source, target
        out = np.zeros((M, N), "float32")
        module(x, y, out)
        np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-4, err_msg=target)
    from tensorkiln.sdk.arg_checks import written_buffers
    assert written_buffers(te.lower(s, tensors)) == ("C",)


def test_prefetch_is_a_replayable_trace_record_and_the_interpreter_skips_it():
    s, tensors = _prefetching_schedule()
    text = te.trace.to_json(s.trace)
    assert '"primitive": "Prefetch"' in text
    a, b, c = _gemm()
    s2 = te.create_schedule(c.op)
    te.replay(te.trace.from_json(text), s2)
    assert tir.structural_equal(te.lower(s, tensors), te.lower(s2, [a, b, c]))
    x = np.random.default_rng(4).standard_normal((M, K)).astype("float32")
    y = np.random.default_rng(5).standard_normal((K, N)).astype("float32")
    out = np.zeros((M, N), "float32")
    tir.interpret(te.lower(s2, [a, b, c]), x, y, out)
    np.testing.assert_allclose(out, x @ y, rtol=1e-5, atol=1e-4)


def test_bad_prefetches_are_clear_errors():
    a, b, c = _gemm()
    s = te.create_schedule(c.op)
    i, j = c.op.axis
    with pytest.raises(ScheduleError, match="prefetch on stage C.*is not an input tensor of the stage.*A, B"):
        s[c].prefetch(c, i, 1)
    with pytest.raises(ScheduleError, match="offset=0 must be a nonzero integer"):
        s[c].prefetch(a, i, 0)
    s[c].vectorize(j)
    s[c].prefetch(b, j, 1)
    with pytest.raises(ScheduleError, match="prefetch on stage C, axis j: the axis is vectorized; prefetch at a loop outside"):
        te.lower(s, [a, b, c])
    x = te.placeholder((M, N), name="X")
    doubled = te.compute((M, N), lambda i, j: x[i, j] * 2.0, name="D")
    out = te.compute((M, N), lambda i, j: doubled[i, j] + 1.0, name="E")
    s = te.create_schedule(out.op)
    s[doubled].compute_inline()
    s[out].prefetch(doubled, out.op.axis[0], 1)
    with pytest.raises(ScheduleError, match="prefetch on stage E, axis i: D is computed inlined; prefetch a "
                                            "placeholder or a stage computed at the root"):
        te.lower(s, [x, out])
