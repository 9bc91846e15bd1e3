"""tests/te/strategies.py: hypothesis strategies for random computes and legal schedules.

Target-independent: a drawn `Case` holds a te schedule, its argument tensors, numpy
inputs and the numpy-expected outputs. Run it through any backend:

    @given(case=scheduled_cases())
    def test_my_target(case):
        outputs = case.fresh_outputs()
        run_somehow(case.schedule, case.args, *case.inputs, *outputs)
        case.check(outputs)

`make_workload(kind, params, rng)` builds the compute alone (deterministic), and
`apply_random_schedule(draw, schedule, stage_names)` adds legal primitives to any
schedule; `Case.trace` replays the schedule on a fresh compute.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

from tensorkiln import te

__all__ = ["Case", "Workload", "make_workload", "scheduled_cases", "apply_random_schedule", "WORKLOAD_KINDS"]

WORKLOAD_KINDS = ("elementwise", "broadcast", "reduction", "matmul", "conv2d", "pool")


@dataclass
class Workload:
    """A compute: `args` tensors (inputs then outputs), numpy inputs and expected outputs."""

    kind: str
    params: dict
    args: list
    inputs: list
    expected: list
    intermediates: list = field(default_factory=list)   # names of non-output stages

    @property
    def outputs(self):
        return self.args[len(self.inputs):]


@dataclass
class Case:
    """A scheduled workload, ready to lower and run on any target."""

    workload: Workload
    schedule: object
    rtol: float = 1e-5
    atol: float = 1e-5

    @property
    def args(self):
        return self.workload.args

    @property
    def inputs(self):
        return self.workload.inputs

    @property
    def expected(self):
        return self.workload.expected

    @property
    def trace(self):
        return self.schedule.trace

    def fresh_outputs(self) -> list[np.ndarray]:
        return [np.zeros(e.shape, e.dtype) for e in self.expected]

    def check(self, outputs) -> None:
        for got, want in zip(outputs, self.expected):
            np.testing.assert_allclose(got, want, rtol=self.rtol, atol=self.atol)

    def __repr__(self) -> str:
        return f"Case({self.workload.kind}, {self.workload.params}, trace={list(self.trace)})"


def _rand(rng, shape, dtype="float32"):
    return rng.uniform(-1.0, 1.0, size=shape).astype(dtype)


def make_workload(kind: str, params: dict, seed: int = 0) -> Workload:
    """Build the compute of `kind` with `params` and its numpy reference."""
    rng = np.random.default_rng(seed)
    if kind == "elementwise":
        shape = tuple(params["shape"])
        A = te.placeholder(shape, name="A")
        B = te.compute(shape, lambda *i: A[i] * 2.0 + 1.0, name="B")
        C = te.compute(shape, lambda *i: te.exp(B[i]) - A[i], name="C")
        a = _rand(rng, shape)
        return Workload(kind, params, [A, C], [a], [np.exp(a * 2 + 1).astype("float32") - a], ["B"])
    if kind == "broadcast":
        m, n_ = params["m"], params["n"]
        A = te.placeholder((m, n_), name="A")
        B = te.placeholder((n_,), name="B")
        C = te.compute((m, n_), lambda i, j: te.max(A[i, j] + B[j], te.const(0.0)), name="C")
        a, b = _rand(rng, (m, n_)), _rand(rng, (n_,))
        return Workload(kind, params, [A, B, C], [a, b], [np.maximum(a + b, 0)])
    if kind == "reduction":
        m, n_ = params["m"], params["n"]
        A = te.placeholder((m, n_), name="A")
        k = te.reduce_axis((0, n_), name="k")
        reducer = params.get("reducer", "sum")
        fn = te.sum if reducer == "sum" else te.max
        C = te.compute((m,), lambda i: fn(A[i, k], axis=k), name="C")
        a = _rand(rng, (m, n_))
        ref = a.sum(axis=1) if reducer == "sum" else a.max(axis=1)
        return Workload(kind, params, [A, C], [a], [ref.astype("float32")])
    if kind == "matmul":
        m, n_, kk = params["m"], params["n"], params["k"]
        A = te.placeholder((m, kk), name="A")
        B = te.placeholder((kk, n_), name="B")
        k = te.reduce_axis((0, kk), name="k")
        C = te.compute((m, n_), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        a, b = _rand(rng, (m, kk)), _rand(rng, (kk, n_))
        return Workload(kind, params, [A, B, C], [a, b], [a @ b])
    if kind == "conv2d":
        n_, c, h, w, o = params["n"], params["c"], params["h"], params["w"], params["o"]
        kh, stride, pad = params["kernel"], params["stride"], params["pad"]
        X = te.placeholder((n_, c, h, w), name="X")
        W = te.placeholder((o, c, kh, kh), name="W")
        hp, wp = h + 2 * pad, w + 2 * pad
        P = te.compute((n_, c, hp, wp), lambda b, ch, y, x: te.if_then_else(
            _and(y >= pad, y < h + pad, x >= pad, x < w + pad), X[b, ch, y - pad, x - pad], 0.0), name="P")
        oh, ow = (hp - kh) // stride + 1, (wp - kh) // stride + 1
        rc = te.reduce_axis((0, c), name="rc")
        ry = te.reduce_axis((0, kh), name="ry")
        rx = te.reduce_axis((0, kh), name="rx")
        Y = te.compute((n_, o, oh, ow), lambda b, f, y, x: te.sum(
            P[b, rc, y * stride + ry, x * stride + rx] * W[f, rc, ry, rx], axis=[rc, ry, rx]), name="Y")
        xv, wv = _rand(rng, (n_, c, h, w)), _rand(rng, (o, c, kh, kh))
        xp = np.pad(xv, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
        ref = np.zeros((n_, o, oh, ow), "float32")
        for y in range(oh):
            for x in range(ow):
                patch = xp[:, :, y * stride:y * stride + kh, x * stride:x * stride + kh]
                ref[:, :, y, x] = np.einsum("bcij,fcij->bf", patch, wv)
        return Workload(kind, params, [X, W, Y], [xv, wv], [ref], ["P"])
    if kind == "pool":
        n_, c, h = params["n"], params["c"], params["h"]
        X = te.placeholder((n_, c, h, h), name="X")
        oh = h // 2
        ry, rx = te.reduce_axis((0, 2), name="ry"), te.reduce_axis((0, 2), name="rx")
        Y = te.compute((n_, c, oh, oh), lambda b, ch, y, x: te.max(X[b, ch, y * 2 + ry, x * 2 + rx],
                                                                  axis=[ry, rx]), name="Y")
        xv = _rand(rng, (n_, c, h, h))
        ref = xv[:, :, :oh * 2, :oh * 2].reshape(n_, c, oh, 2, oh, 2).max(axis=(3, 5))
        return Workload(kind, params, [X, Y], [xv], [ref])
    raise ValueError(f"unknown workload kind {kind!r}")


def _and(*conds):
    from tensorkiln import tir
    out = conds[0]
    for c in conds[1:]:
        out = tir.And(out, c)
    return out


@st.composite
def workload_params(draw, kind: str) -> dict:
    small = st.integers(1, 6)
    if kind == "elementwise":
        return {"shape": draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))}
    if kind == "broadcast":
        return {"m": draw(small), "n": draw(st.integers(1, 9))}
    if kind == "reduction":
        return {"m": draw(small), "n": draw(st.integers(1, 9)), "reducer": draw(st.sampled_from(["sum", "max"]))}
    if kind == "matmul":
        return {"m": draw(small), "n": draw(st.integers(1, 8)), "k": draw(st.integers(1, 8))}
    if kind == "conv2d":
        return {"n": 1, "c": draw(st.integers(1, 2)), "h": draw(st.integers(3, 6)), "w": draw(st.integers(3, 6)),
                "o": draw(st.integers(1, 3)), "kernel": draw(st.sampled_from([1, 3])),
                "stride": draw(st.sampled_from([1, 2])), "pad": draw(st.sampled_from([0, 1]))}
    if kind == "pool":
        return {"n": 1, "c": draw(st.integers(1, 2)), "h": draw(st.integers(2, 7))}
    raise ValueError(kind)


LOOP_PRIMITIVES = ("split", "split_nparts", "fuse", "reorder", "unroll", "vectorize", "parallel", "tile")


def apply_random_schedule(draw, schedule, stage_names, *, steps: int | None = None,
                          primitives=LOOP_PRIMITIVES, place_intermediates: bool = True):
    """Draw a legal sequence of loop primitives on the named stages (in place)."""
    steps = draw(st.integers(0, 4)) if steps is None else steps
    for _ in range(steps):
        stage = schedule[draw(st.sampled_from(list(stage_names)))]
        leaves = list(stage.leaf_iter_vars)
        data = [iv for iv in leaves if iv.kind != "reduce"]
        choice = draw(st.sampled_from(primitives))
        if choice == "split":
            stage.split(draw(st.sampled_from(leaves)), factor=draw(st.integers(1, 5)))
        elif choice == "split_nparts":
            stage.split(draw(st.sampled_from(leaves)), nparts=draw(st.integers(1, 4)))
        elif choice == "fuse" and len(leaves) >= 2:
            p = draw(st.integers(0, len(leaves) - 2))
            if leaves[p].kind == leaves[p + 1].kind:
                stage.fuse(leaves[p], leaves[p + 1])
        elif choice == "reorder" and len(leaves) >= 2:
            stage.reorder(*draw(st.permutations(leaves)))
        elif choice == "tile" and len(data) >= 2:
            p = draw(st.integers(0, len(data) - 2))
            stage.tile(data[p], data[p + 1], draw(st.integers(1, 4)), draw(st.integers(1, 4)))
        elif choice == "unroll":
            stage.unroll(draw(st.sampled_from(leaves)))
        elif choice in ("vectorize", "parallel") and data:
            getattr(stage, choice)(draw(st.sampled_from(data)))
    return schedule


@st.composite
def scheduled_cases(draw, kinds=WORKLOAD_KINDS, primitives=LOOP_PRIMITIVES, caches: bool = False):
    """A random workload with a random legal schedule (see the module docstring).

    With `caches=True`, matmul/reduction/broadcast also get cache_write and cache_read
    stages computed at random loops of their consumers.
    """
    kind = draw(st.sampled_from(list(kinds)))
    params = draw(workload_params(kind))
    workload = make_workload(kind, params, seed=draw(st.integers(0, 2 ** 16)))
    outputs = workload.outputs
    s = te.create_schedule([t.op for t in outputs])
    out_names = [t.op.name for t in outputs]
    if caches and kind in ("matmul", "reduction", "broadcast"):
        return _cached_case(draw, workload, s, out_names[0], primitives)
    for name in workload.intermediates:
        placement = draw(st.sampled_from(["root", "inline", "compute_at"]))
        if placement == "inline":
            s[name].compute_inline()
        elif placement == "compute_at":
            consumer = s[out_names[0]]
            # place first, then schedule the consumer: compute_at follows the leaf it names
            apply_random_schedule(draw, s, out_names, primitives=primitives)
            consumer_leaves = list(consumer.leaf_iter_vars)
            s[name].compute_at(consumer, draw(st.sampled_from(consumer_leaves)))
            apply_random_schedule(draw, s, [name], primitives=primitives)
            return Case(workload, s, rtol=1e-4, atol=1e-4)
    apply_random_schedule(draw, s, out_names + [n for n in workload.intermediates
                                                if s[n].attach_type != "inline"], primitives=primitives)
    return Case(workload, s, rtol=1e-4, atol=1e-4)


def _cached_case(draw, workload, s, out_name, primitives):
    out = s[out_name]
    compute_stage = out
    if draw(st.booleans()):
        cached = s.cache_write(workload.outputs[0], draw(st.sampled_from(["local", "global"])))
        compute_stage = s[cached]
        apply_random_schedule(draw, s, [out_name], primitives=primitives)
        compute_stage.compute_at(out, draw(st.sampled_from(list(out.leaf_iter_vars))))
    reader = workload.inputs and workload.args[0]
    read = s.cache_read(reader, draw(st.sampled_from(["shared", "local", "global"])), [compute_stage])
    apply_random_schedule(draw, s, [compute_stage.name], primitives=primitives)
    if draw(st.booleans()):
        s[read].compute_at(compute_stage, draw(st.sampled_from(list(compute_stage.leaf_iter_vars))))
    apply_random_schedule(draw, s, [s[read].name], primitives=primitives)
    return Case(workload, s, rtol=1e-4, atol=1e-4)
