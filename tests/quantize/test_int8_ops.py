"""nn.conv2d / nn.dense with out_dtype="int32": 8-bit inputs, exact int32 accumulation on cpu_llvm."""
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln.ir.errors import DTypeError


def _numpy_conv(x, w, stride, pad, groups):
    x = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, width = x.shape
    o, cg, kh, kw = w.shape
    oh, ow = (h - kh) // stride + 1, (width - kw) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per_group = o // groups
    for oc in range(o):
        g0 = (oc // per_group) * cg
        for i in range(kh):
            for j in range(kw):
                patch = x[:, g0:g0 + cg, i:i + stride * oh:stride, j:j + stride * ow:stride]
                out[:, oc] += np.einsum("nchw,c->nhw", patch, w[oc, :, i, j].astype(np.int64))
    return out


@pytest.mark.parametrize("data_dtype, stride, pad, groups, opt_level", [
    ("int8", 1, 1, 1, 2), ("uint8", 2, 1, 4, 2), pytest.param("uint8", 1, 1, 1, 0, marks=pytest.mark.slow)])
def test_int8_conv2d_accumulates_exactly_in_int32(data_dtype, stride, pad, groups, opt_level):
    rng = np.random.default_rng(0)
    info = np.iinfo(data_dtype)
    xs = rng.integers(info.min, info.max + 1, (1, 8, 9, 9)).astype(data_dtype)
    ws = rng.integers(-128, 128, (16, 8 // groups, 3, 3)).astype(np.int8)
    x = g.var("x", xs.shape, data_dtype)
    y = g.call("nn.conv2d", x, g.const(ws), strides=(stride, stride), padding=(pad,) * 4, groups=groups,
               out_dtype="int32")
    lib = tk.compile(g.Module.from_expr(y), "cpu_llvm", opt_level=opt_level)
    out = lib.run([xs])[0]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, _numpy_conv(xs, ws, stride, pad, groups))


@pytest.mark.parametrize("rows", [1, 6])
def test_int8_dense_uses_the_int8_strategy_and_is_exact(rows):
    rng = np.random.default_rng(1)
    xs = rng.integers(0, 256, (rows, 200)).astype(np.uint8)
    ws = rng.integers(-128, 128, (48, 200)).astype(np.int8)
    y = g.call("nn.dense", g.var("x", xs.shape, "uint8"), g.const(ws), out_dtype="int32")
    lib = tk.compile(g.Module.from_expr(y), "cpu_llvm")
    np.testing.assert_array_equal(lib.run([xs])[0], xs.astype(np.int64) @ ws.T.astype(np.int64))
    (kernel,) = lib.summary()["strategies"].values()
    # several rows run on the int8 GEMM (test_int8_gemm.py) where the CPU has AVX2; one row streams the weights
    assert kernel["strategy"] == ("cpu_llvm.dense_int8_gemm" if rows >= 4 and _has_int8_gemm() else "cpu_llvm.dense_int8")


def _has_int8_gemm() -> bool:
    from tensorkiln_cpu_llvm.strategies.int8_gemm import int8_isa
    return int8_isa(tk.target("cpu_llvm")) is not None


def test_out_dtype_needs_8bit_integer_inputs():
    x = g.var("x", (1, 4), "float32")
    with pytest.raises(DTypeError, match="8-bit integer inputs"):
        g.call("nn.dense", x, g.const(np.ones((2, 4), np.float32)), out_dtype="int32")
