"""cpu_llvm half / bfloat16 storage: conversions follow the target's CPU features and round like numpy."""
import ml_dtypes
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln import te
from tensorkiln.ir.errors import TargetError
from tensorkiln.passes import to_mixed_precision
from tensorkiln_cpu_llvm.host import host_features
from tensorkiln_cpu_llvm.lowp import conversions

BF16 = ml_dtypes.bfloat16
NO_F16C = "llvm -mcpu=x86-64"
F16C = "llvm -mcpu=x86-64 -mattr=+avx,+f16c"
AVX512_BF16 = "llvm -mcpu=x86-64 -mattr=+avx512f,+avx512vl,+avx512bf16"


def _convert(source: str, dest: str, target: str):
    a = te.placeholder((64,), name="A", dtype=source)
    b = te.compute((64,), lambda i: te.cast(a[i], dest), name="B")
    s = te.create_schedule(b.op)
    _, inner = s[b].split(b.op.axis[0], factor=16)
    s[b].vectorize(inner)
    return tk.build(s, [a, b], target=target, name="convert")


def _values():
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(64) * 10.0 ** rng.integers(-3, 4, 64)).astype(np.float32)
    x[:4] = [np.nan, np.inf, -np.inf, 0.0]
    x[4] = np.float32(1.0) + np.float32(2.0 ** -8)   # a bfloat16 tie: rounds to even (1.0)
    return x


@pytest.mark.parametrize("low, target, instruction", [
    ("float16", NO_F16C, "__truncsfhf2"), ("float16", F16C, "vcvtps2ph"), ("float16", AVX512_BF16, "vcvtps2ph"),
    ("bfloat16", NO_F16C, "__truncsfbf2"), ("bfloat16", F16C, "__truncsfbf2"),
    ("bfloat16", AVX512_BF16, "vcvtneps2bf16")])
def test_conversions_follow_the_cpu_features_and_round_like_numpy(low, target, instruction):
    """float32 -> low rounds to nearest even (NaN, infinities and a bfloat16 tie included); back is exact."""
    x = _values()
    numpy_low = np.float16 if low == "float16" else BF16
    down = _convert("float32", low, target)
    assert instruction in down.get_source("asm")
    packed = np.zeros(64, numpy_low)
    if target == AVX512_BF16 and not {"avx512f", "avx512vl", "avx512bf16"} <= host_features():
        # compiled here, it cannot run here: a clear error naming the features, never an illegal instruction
        with pytest.raises(TargetError, match="avx512bf16"):
            down(x, packed)
        return
    down(x, packed)
    np.testing.assert_array_equal(packed, x.astype(numpy_low))   # NaN compares equal in assert_array_equal
    assert packed[4] == (1.0 if low == "bfloat16" else x[4])   # a bfloat16 tie, exact in float16
    up = _convert(low, "float32", target)
    back = np.zeros(64, np.float32)
    up(packed, back)
    np.testing.assert_array_equal(back, packed.astype(np.float32))


def test_conversions_report_reads_the_target():
    assert conversions(tk.target(NO_F16C))["float16"].startswith("software")
    assert conversions(tk.target(F16C))["float16"].startswith("f16c")
    assert conversions(tk.target(AVX512_BF16))["bfloat16"].startswith("avx512bf16")


@pytest.mark.parametrize("dtype, target", [
    ("bfloat16", "cpu_llvm"), pytest.param("bfloat16", F16C, marks=pytest.mark.slow),
    pytest.param("float16", NO_F16C, marks=pytest.mark.slow)])
def test_mixed_precision_conv_block_compiles_and_matches_float32(dtype, target):
    rng = np.random.default_rng(4)
    x = g.var("x", (1, 16, 12, 12))
    w1 = g.const(rng.standard_normal((16, 16, 3, 3)).astype(np.float32) * 0.2)
    w2 = g.const(rng.standard_normal((8, 16, 1, 1)).astype(np.float32) * 0.2)
    y = g.nn.conv2d(g.nn.max_pool2d(g.nn.relu(g.nn.conv2d(x, w1, padding=1)), (2, 2), (2, 2)), w2)
    mod = g.Module.from_expr(g.nn.softmax(g.reshape(y, (1, 288))))
    data = rng.standard_normal((1, 16, 12, 12)).astype(np.float32)
    reference = tk.compile(mod, "cpu_llvm").run([data])[0]
    lib = tk.compile(to_mixed_precision(mod, dtype), target)
    kernels = lib.summary()["strategies"]
    assert any("nn.conv2d" in k["ops"] for k in kernels.values())
    np.testing.assert_allclose(lib.run([data])[0], reference, rtol=0.1, atol=0.02 * reference.max())
