"""test_opencl_half.py: float16 on opencl, natively with cl_khr_fp16, else as storage with float arithmetic.

References are numpy: float32 computation rounded to float16 at the end, and numpy's astype for casts.
"""
from __future__ import annotations

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln import tir
from tensorkiln.passes import to_mixed_precision

from tensorkiln_opencl.half import FP16_EXTENSION


def _c(value):
    return tir.const(value)


def _buffer(name, n, dtype):
    return tir.Buffer(name, (_c(n),), dtype)


def _loop(var, extent, body, kind=tir.ForKind.SERIAL, tag=None):
    return tir.For(var, _c(0), _c(extent), kind, body, thread_tag=tag)


def _ulps(out, ref):
    """Distance in float16 ulps (of the reference's magnitude) between two float16 arrays."""
    ref32 = ref.astype(np.float32)
    ulp = np.spacing(np.abs(ref).astype(np.float16)).astype(np.float32)
    return np.abs(out.astype(np.float32) - ref32) / ulp


@pytest.fixture(scope="module")
def mode(opencl_target):
    return opencl_target.capabilities.float16_arithmetic


def test_the_capability_follows_the_device_extensions(opencl_target, mode):
    device = opencl_target.spec.loader.device(opencl_target)
    assert mode == ("native" if FP16_EXTENSION in device.extensions else "float32")
    assert "float16" in opencl_target.capabilities.dtypes


def test_storage_only_source_uses_vload_half_and_no_extension(opencl_target, build_and_load):
    n = 32
    A, B = _buffer("A", n, "float16"), _buffer("B", n, "float16")
    i = tir.Var("i")
    index = tir.Ramp(i * 4, _c(1), 4)
    value = tir.Load(A, index) * tir.Broadcast(tir.FloatImm("float16", 3.0), 4)
    func = tir.PrimFunc("scale4", (A, B), _loop(i, n // 4, tir.Store(B, value, index)))
    source = opencl_target.spec.emitter.emit([func], None).source   # no target: storage only, any device
    assert "vload_half4(0, A + (i * 4))" in source and "vstore_half4_rte(" in source
    assert FP16_EXTENSION not in source and "half4" not in source.replace("_half4", "")
    a = np.linspace(-3, 3, n).astype(np.float16)
    b = np.zeros(n, np.float16)
    build_and_load(func).get_function("scale4")(a, b)
    np.testing.assert_array_equal(b, (a.astype(np.float32) * 3).astype(np.float16))


def test_native_mode_source_uses_half_arithmetic_under_the_pragma(opencl_target, mode):
    A, B = _buffer("A", 8, "float16"), _buffer("B", 8, "float16")
    i = tir.Var("i")
    func = tir.PrimFunc("twice", (A, B), _loop(i, 8, tir.Store(B, tir.Load(A, i) + tir.Load(A, i), i)))

    class Native:   # what a device reporting cl_khr_fp16 refines to (emit only: PoCL here may lack it)
        capabilities = opencl_target.capabilities.model_copy(update={"float16_arithmetic": "native"})
        name = "opencl"
    source = opencl_target.spec.emitter.emit([func], Native()).source
    assert f"#pragma OPENCL EXTENSION {FP16_EXTENSION} : enable" in source
    assert "B[i] = A[i] + A[i];" in source and "vload_half" not in source


def _edge_float32():
    one = np.float32(1.0)
    values = [0.0, -0.0, 1.0, -1.0, 65504.0, 65519.0, 65520.0, -65520.0, 1e6, -1e6, np.inf, -np.inf, np.nan,
              one + np.float32(2.0 ** -11), one + np.float32(3 * 2.0 ** -11),   # ties: to even
              one + np.float32(2.0 ** -11) + np.float32(2.0 ** -23),           # just above a tie
              2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25, 2.0 ** -26, -(2.0 ** -25),  # subnormals, subnormal ties
              6.097555e-05, 6.1035156e-05, 1e-8, 0.1, 1 / 3, 2049.0, 2051.0, -4097.0]
    rng = np.random.default_rng(1)
    randoms = (rng.standard_normal(35) * 10.0 ** rng.integers(-8, 6, 35)).astype(np.float32)
    return np.concatenate([np.array(values, np.float32), randoms])


@pytest.fixture(autouse=True)
def _quiet_overflow():
    with np.errstate(over="ignore"):   # numpy warns on the float32 -> float16 overflows under test
        yield


def _assert_same_half(out, ref):
    nan = np.isnan(ref)
    np.testing.assert_array_equal(np.isnan(out), nan)
    np.testing.assert_array_equal(out[~nan].view(np.uint16), ref[~nan].view(np.uint16))


def test_casts_between_float32_and_float16_match_numpy_astype_bit_for_bit(build_and_load):
    values = _edge_float32()
    n = values.size
    A, H, R = _buffer("A", n, "float32"), _buffer("H", n, "float16"), _buffer("R", n, "float32")
    i = tir.Var("i")
    to_half = tir.Store(H, tir.Cast("float16", tir.Load(A, i)), i)
    # the in-register round trip (a cast inside an expression, not a store) rounds the same way
    round_trip = tir.Store(R, tir.Cast("float32", tir.Cast("float16", tir.Load(A, i))), i)
    func = tir.PrimFunc("casts", (A, H, R), _loop(i, n, tir.SeqStmt((to_half, round_trip))))
    h, r = np.zeros(n, np.float16), np.zeros(n, np.float32)
    build_and_load(func).get_function("casts")(values, h, r)
    _assert_same_half(h, values.astype(np.float16))
    _assert_same_half(r.astype(np.float16), values.astype(np.float16))
    np.testing.assert_array_equal(np.isnan(r), np.isnan(values))
    np.testing.assert_array_equal(r[~np.isnan(r)], values.astype(np.float16).astype(np.float32)[~np.isnan(r)])


def test_float16_arithmetic_stored_is_correctly_rounded_like_numpy(build_and_load):
    # float32 holds the exact sum / difference / product of two halves closely enough (24 >= 2 * 11 + 2
    # bits) that rounding it once to half is IEEE half arithmetic: numpy's float16 results, bit for bit
    rng = np.random.default_rng(2)
    n = 256
    a = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float16)
    b = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 4, n)).astype(np.float16)
    A, B = _buffer("A", n, "float16"), _buffer("B", n, "float16")
    S, P, Q = (_buffer(name, n, "float16") for name in "SPQ")
    i = tir.Var("i")
    x, y = tir.Load(A, i), tir.Load(B, i)
    body = tir.SeqStmt((tir.Store(S, x + y, i), tir.Store(P, x * y, i), tir.Store(Q, x - y, i)))
    s, p, q = (np.zeros(n, np.float16) for _ in range(3))
    build_and_load(tir.PrimFunc("arith", (A, B, S, P, Q), _loop(i, n, body))).get_function("arith")(a, b, s, p, q)
    _assert_same_half(s, a + b)
    _assert_same_half(p, a * b)
    _assert_same_half(q, a - b)   # not a quotient: OpenCL's float divide may be 2.5 ulps off


def test_float16_to_float32_and_int_casts_are_exact(build_and_load):
    bits = np.arange(0, 65536, 7, dtype=np.uint16)   # every exponent, subnormals, inf and NaN
    halves = bits.view(np.float16)
    n = halves.size
    H, F, I = _buffer("H", n, "float16"), _buffer("F", n, "float32"), _buffer("I", n, "int32")
    i = tir.Var("i")
    clipped = tir.Min(tir.Max(tir.Load(H, i), tir.FloatImm("float16", -1000.0)), tir.FloatImm("float16", 1000.0))
    body = tir.SeqStmt((tir.Store(F, tir.Cast("float32", tir.Load(H, i)), i),
                        tir.Store(I, tir.Cast("int32", clipped), i)))
    f, k = np.zeros(n, np.float32), np.zeros(n, np.int32)
    build_and_load(tir.PrimFunc("widen", (H, F, I), _loop(i, n, body))).get_function("widen")(halves, f, k)
    expected = halves.astype(np.float32)
    nan = np.isnan(expected)
    np.testing.assert_array_equal(np.isnan(f), nan)
    np.testing.assert_array_equal(f[~nan], expected[~nan])
    finite = ~nan
    clip = np.clip(expected[finite], -1000, 1000)
    np.testing.assert_array_equal(k[finite], clip.astype(np.int32))


def test_strided_and_predicated_vectors_go_lane_by_lane(build_and_load):
    n = 16
    A, B = _buffer("A", 2 * n, "float16"), _buffer("B", n, "float16")
    io = tir.Var("io")
    strided = tir.Ramp(io * 8, _c(2), 4)
    contiguous = tir.Ramp(io * 4, _c(1), 4)
    value = tir.Load(A, strided) + tir.Broadcast(tir.FloatImm("float16", 0.5), 4)
    store = tir.Store(B, value, contiguous, predicate=tir.LT(contiguous, tir.Broadcast(_c(14), 4)))
    a = np.linspace(-8, 8, 2 * n).astype(np.float16)
    b = np.full(n, 7, np.float16)
    build_and_load(tir.PrimFunc("gather", (A, B), _loop(io, n // 4, store))).get_function("gather")(a, b)
    expected = (a[::2].astype(np.float32) + 0.5).astype(np.float16)
    expected[14:] = 7
    np.testing.assert_array_equal(b, expected)


def _assert_on_opencl(lib):
    steps = lib.placement()
    assert steps and all(step["target"].startswith("opencl") for step in steps), steps


def _run(expr_fn, shapes, seed=0, scale=1.0):
    rng = np.random.default_rng(seed)
    names = [f"x{k}" for k in range(len(shapes))]
    inputs = [(rng.standard_normal(s) * scale).astype(np.float16) for s in shapes]
    params = [g.var(name, s, "float16") for name, s in zip(names, shapes)]
    lib = tk.compile(g.Module.from_expr(expr_fn(*params)), "opencl")
    _assert_on_opencl(lib)
    out = lib.run(inputs)[0]
    reference = g.evaluate(g.Module.from_expr(expr_fn(*[g.var(name, s, "float32") for name, s in zip(names, shapes)])),
                           {name: x.astype(np.float32) for name, x in zip(names, inputs)})
    assert out.dtype == np.float16
    return out, np.asarray(reference).astype(np.float16)


def test_elementwise_float16_matches_float32_rounded(opencl_target):
    out, ref = _run(lambda x, y: g.nn.relu(g.exp(x) * y + x) - g.sigmoid(y), [(3, 5, 17), (3, 5, 17)])
    assert _ulps(out, ref).max() <= 2


def test_reduction_float16_matches_float32_rounded(opencl_target):
    out, ref = _run(lambda x: g.sum(x, axis=1), [(6, 300)])
    # a float accumulator: float32-level error on 300 terms, a few half ulps of the (smaller) sum
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2e-3, atol=2e-2)


def test_conv2d_float16_matches_float32_rounded(opencl_target):
    out, ref = _run(lambda x, w: g.nn.conv2d(x, w, padding=(1, 1)), [(1, 4, 10, 10), (6, 4, 3, 3)])
    assert _ulps(out, ref).max() <= 4


def test_dense_float16_matches_float32_rounded(opencl_target):
    out, ref = _run(lambda x, w: g.nn.dense(x, w), [(5, 64), (7, 64)])
    assert _ulps(out, ref).max() <= 4


def test_the_seed_mixed_precision_example_runs_on_opencl():
    data = g.var("data", (1, 3, 16, 16))
    weight = g.var("weight", (8, 3, 3, 3))
    mod = g.Module.from_expr(g.nn.conv2d(data, weight))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 3, 16, 16)).astype(np.float32)
    w = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    lib = tk.compile(to_mixed_precision(mod, "float16", target=tk.target("opencl")), "opencl")
    _assert_on_opencl(lib)
    out = lib.run([x, w])[0]
    reference = g.evaluate(mod, {"data": x, "weight": w})
    assert out.dtype == np.float32
    # the same computation with numpy: inputs rounded to half, float32 conv, result rounded to half
    rounded = g.evaluate(mod, {"data": x.astype(np.float16).astype(np.float32),
                               "weight": w.astype(np.float16).astype(np.float32)})
    assert _ulps(out.astype(np.float16), np.asarray(rounded).astype(np.float16)).max() <= 4
    np.testing.assert_allclose(out, reference, rtol=1e-2, atol=1e-2 * np.abs(reference).max())
    assert not np.array_equal(out, reference)   # the conv really ran on rounded inputs


def test_bitcast_between_float16_and_int16_keeps_the_bits(opencl_target):
    bits = np.array([0, 1, 0x3C00, 0xBC00, 0x7BFF, 0x7C00, 0xFC00, 0x0400, 0x03FF, 0x8001, 0x3555, 0xC233],
                    np.uint16)
    x = g.var("x", (12,), "int16")
    halves = g.call("bitcast", x, dtype="float16")
    lib = tk.compile(g.Module.from_expr(g.call("bitcast", halves * g.const(np.float16(1)), dtype="int16")), "opencl")
    _assert_on_opencl(lib)
    np.testing.assert_array_equal(lib.run([bits.view(np.int16)])[0], bits.view(np.int16))


# ---- bfloat16: ushort storage and float arithmetic on every device ------------------------------

def test_casts_between_float32_and_bfloat16_match_ml_dtypes_bit_for_bit(opencl_target, build_and_load):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf16 = ml_dtypes.bfloat16
    tie = np.array([0x3F808000, 0x3F818000, 0x3F808001, 0x7F7FFFFF, 0x7F7F8000, 0x00008000, 0x00018000, 0x80000001],
                   np.uint32).view(np.float32)   # ties to even, just above a tie, overflow to inf, subnormals
    values = np.concatenate([tie, _edge_float32(), np.array([3.0e38, -3.4e38, 1e-39, 1e-45], np.float32)])
    n = values.size
    A, H, R = _buffer("A", n, "float32"), _buffer("H", n, "bfloat16"), _buffer("R", n, "float32")
    i = tir.Var("i")
    body = tir.SeqStmt((tir.Store(H, tir.Cast("bfloat16", tir.Load(A, i)), i),
                        tir.Store(R, tir.Cast("float32", tir.Cast("bfloat16", tir.Load(A, i))), i)))
    func = tir.PrimFunc("bcasts", (A, H, R), _loop(i, n, body))
    assert "cl_khr" not in opencl_target.spec.emitter.emit([func], opencl_target).source
    h, r = np.zeros(n, bf16), np.zeros(n, np.float32)
    build_and_load(func).get_function("bcasts")(values, h, r)
    expected = values.astype(bf16)
    _assert_same_half(h, expected)
    nan = np.isnan(values)
    np.testing.assert_array_equal(np.isnan(r), nan)
    np.testing.assert_array_equal(r[~nan], expected.astype(np.float32)[~nan])


def test_bfloat16_dense_and_elementwise_match_float32_rounded(opencl_target):
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(3)
    a = rng.standard_normal((5, 48)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((6, 48)).astype(ml_dtypes.bfloat16)
    x, y = g.var("x", (5, 48), "bfloat16"), g.var("w", (6, 48), "bfloat16")
    lib = tk.compile(g.Module.from_expr(g.nn.relu(g.nn.dense(x, y)) * g.const(ml_dtypes.bfloat16(0.5))), "opencl")
    _assert_on_opencl(lib)
    out = lib.run([a, w])[0]
    ref32 = np.maximum(a.astype(np.float32) @ w.astype(np.float32).T, 0) * 0.5
    assert out.dtype == ml_dtypes.bfloat16
    # float accumulation, one rounding to bfloat16 (8 bits): within 1 bfloat16 ulp of the float32 result
    np.testing.assert_allclose(out.astype(np.float32), ref32, rtol=2 ** -8, atol=1e-6)


def test_the_seed_example_in_bfloat16_runs_on_opencl():
    data, weight = g.var("data", (1, 3, 12, 12)), g.var("weight", (4, 3, 3, 3))
    mod = g.Module.from_expr(g.nn.conv2d(data, weight))
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 3, 12, 12)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    lib = tk.compile(to_mixed_precision(mod, "bfloat16", target=tk.target("opencl")), "opencl")
    _assert_on_opencl(lib)
    out = lib.run([x, w])[0]
    reference = np.asarray(g.evaluate(mod, {"data": x, "weight": w}))
    np.testing.assert_allclose(out, reference, rtol=5e-2, atol=3e-2 * np.abs(reference).max())
    assert not np.array_equal(out, reference)


_KIT_OPS = ("add", "exp", "sum", "nn.softmax", "nn.max_pool2d", "nn.conv2d", "nn.dense", "cast", "bitcast")


def _kit_checks():
    from tensorkiln.conformance.catalogue import KitOptions, catalogue
    target = tk.target("opencl")
    options = KitOptions(shapes_per_op=1, dtypes=("float16",), ops=_KIT_OPS)
    return [c for c in catalogue(target, ("ops",), options) if not c.is_skipped]


@pytest.mark.parametrize("check", _kit_checks(), ids=lambda c: c.id)
def test_conformance_kit_float16_ops(opencl_target, check):
    from tensorkiln.conformance.catalogue import CheckFailure
    try:
        check.run(opencl_target)
    except CheckFailure as failure:
        pytest.fail(f"{check.id} ({failure.kind}): {failure.message}")
