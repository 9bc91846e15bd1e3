"""cpu_llvm's int8 GEMM (int8_gemm.py): conv2d NHWC / dense with 8-bit inputs against numpy's integer arithmetic,
on every instruction path this host can run (VNNI zmm, AVX-VNNI ymm, AVX2 vpmaddwd), with shapes that fit no tile."""
import llvmlite.binding as llvm
import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph as g
from tensorkiln.graph.interpreter import evaluate
from tensorkiln.quantize import QuantizeConfig, quantize

from ._models import small_resnet

_HOST = frozenset(name for name, on in llvm.get_host_cpu_features().items() if on)
# (target, isa, what the host needs to run it)
PATHS = [
    pytest.param("cpu_llvm", "avx512vnni", id="native-avx512vnni",
                 marks=pytest.mark.skipif(not {"avx512vnni", "avx512bw"} <= _HOST, reason="host has no AVX-512 VNNI")),
    pytest.param("cpu_llvm -mcpu=alderlake", "avxvnni", id="alderlake-avxvnni",
                 marks=pytest.mark.skipif("avxvnni" not in _HOST, reason="host has no AVX-VNNI")),
    pytest.param("cpu_llvm -mcpu=haswell", "avx2", id="haswell-avx2",
                 marks=pytest.mark.skipif("avx2" not in _HOST, reason="host has no AVX2")),
]


def _numpy_conv_nhwc(x, w, stride, pad, dilation):
    """int64 conv: x NHWC, w HWIO, zero padding."""
    x = np.pad(x.astype(np.int64), ((0, 0), (pad, pad), (pad, pad), (0, 0)))
    _, height, width, _ = x.shape
    kh, kw, _, _ = w.shape
    oh = (height - ((kh - 1) * dilation + 1)) // stride + 1
    ow = (width - ((kw - 1) * dilation + 1)) // stride + 1
    out = 0
    for i in range(kh):
        for j in range(kw):
            patch = x[:, i * dilation:, j * dilation:, :][:, :stride * oh:stride, :stride * ow:stride, :]
            out = out + patch @ w[i, j].astype(np.int64)
    return out


def _strategies(lib):
    return {k["strategy"] for k in lib.summary()["strategies"].values()}


# (batch, height, width, channels, outputs, kernel, stride, pad, dilation): M, N and K fit no tile
# (N = 19, 33, 70: not multiples of 16 or 32; C = 3, 5, 6, 7: K not a multiple of 4 per tap)
CONV_SHAPES = [
    (1, 5, 7, 6, 19, 3, 1, 1, 1),
    (2, 9, 9, 8, 33, 3, 2, 1, 1),
    (1, 8, 8, 5, 33, 3, 1, 2, 2),
    (1, 6, 6, 8, 70, 3, 1, 1, 1),     # a full sliver (vector packing) and a ragged one
    (1, 7, 5, 12, 64, 1, 1, 0, 1),
    (1, 11, 11, 3, 17, 7, 2, 3, 1),   # the stem's shape: C = 3
    (2, 3, 4, 7, 40, 1, 1, 0, 1),
    (1, 6, 7, 16, 48, 3, 1, 1, 1),    # one-vector tiles: N a multiple of the vector, not of two
    (1, 5, 5, 8, 16, 1, 1, 0, 1),
    (1, 4, 6, 12, 24, 3, 1, 1, 1),
]


@pytest.mark.parametrize("target, isa", PATHS)
@pytest.mark.parametrize("data_dtype", ["int8", "uint8"])
def test_int8_conv_matches_numpy_integer_conv(target, isa, data_dtype):
    rng = np.random.default_rng(0)
    info = np.iinfo(data_dtype)
    inputs, outputs, expected = [], [], []
    for index, shape in enumerate(CONV_SHAPES):   # one module, one compile: each conv its own kernel
        batch, height, width, channels, units, kernel, stride, pad, dilation = shape
        xs = rng.integers(info.min, info.max + 1, (batch, height, width, channels)).astype(data_dtype)
        ws = rng.integers(-128, 128, (kernel, kernel, channels, units)).astype(np.int8)
        outputs.append(g.call("nn.conv2d", g.var(f"x{index}", xs.shape, data_dtype), g.const(ws),
                              strides=(stride, stride), padding=(pad,) * 4, dilation=(dilation, dilation),
                              data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32"))
        inputs.append(xs)
        expected.append(_numpy_conv_nhwc(xs, ws, stride, pad, dilation))
    lib = tk.compile(g.Module.from_expr(g.tuple_(*outputs)), target)
    assert _strategies(lib) == {"cpu_llvm.conv2d_int8_gemm"}
    for shape, out, reference in zip(CONV_SHAPES, lib.run(inputs), expected):
        assert out.dtype == np.int32
        np.testing.assert_array_equal(out, reference, err_msg=str(shape))


@pytest.mark.parametrize("target, isa", PATHS)
def test_extreme_values_do_not_saturate(target, isa):
    """-128 x -128 everywhere: vpmaddubsw's int16 pair sums would saturate, vpdpbusd and vpmaddwd do not."""
    cases = [(np.full((1, 4, 9, 64), value, dtype), np.full((3, 3, 64, 32), -128, np.int8))
             for dtype, value in (("int8", -128), ("uint8", 255))]
    outputs = [g.call("nn.conv2d", g.var(f"x{i}", xs.shape, str(xs.dtype)), g.const(ws), padding=(1, 1, 1, 1),
                      data_layout="NHWC", kernel_layout="HWIO", out_dtype="int32") for i, (xs, ws) in enumerate(cases)]
    lib = tk.compile(g.Module.from_expr(g.tuple_(*outputs)), target)
    for (xs, ws), out in zip(cases, lib.run([xs for xs, _ in cases])):
        np.testing.assert_array_equal(out, _numpy_conv_nhwc(xs, ws, 1, 1, 1))


@pytest.mark.parametrize("target, isa", PATHS)
def test_int8_dense_matches_numpy(target, isa):
    rng = np.random.default_rng(1)
    inputs, outputs, expected = [], [], []
    for index, (rows, units, depth, data_dtype) in enumerate([(7, 37, 53, "int8"), (13, 64, 130, "uint8"),
                                                                (5, 3, 4, "int8"), (6, 70, 64, "int8")]):
        info = np.iinfo(data_dtype)
        xs = rng.integers(info.min, info.max + 1, (rows, depth)).astype(data_dtype)
        ws = rng.integers(-128, 128, (units, depth)).astype(np.int8)
        outputs.append(g.call("nn.dense", g.var(f"x{index}", xs.shape, data_dtype), g.const(ws), out_dtype="int32"))
        inputs.append(xs)
        expected.append(xs.astype(np.int64) @ ws.T.astype(np.int64))
    lib = tk.compile(g.Module.from_expr(g.tuple_(*outputs)), target)
    assert _strategies(lib) == {"cpu_llvm.dense_int8_gemm"}
    for out, reference in zip(lib.run(inputs), expected):
        np.testing.assert_array_equal(out, reference)


@pytest.mark.parametrize("target, isa", PATHS)
def test_the_path_emits_its_instructions(target, isa):
    """The ISA comes from the target's features, and the function's machine code uses its dot product."""
    from tensorkiln_cpu_llvm.host import machine_config, new_target_machine
    from tensorkiln_cpu_llvm.int8_gemm import int8_conv_source
    from tensorkiln_cpu_llvm.strategies.int8_gemm import conv_plan, int8_isa

    resolved = tk.target(target)
    assert int8_isa(resolved).name == isa
    plan = conv_plan((1, 8, 8, 16), (3, 3, 16, 40), (1, 6, 6, 40), (1, 1), (1, 1), True, resolved)
    module = llvm.parse_assembly(int8_conv_source(plan))
    module.verify()
    assembly = new_target_machine(machine_config(resolved)).emit_assembly(module)
    expected = {"avx512vnni": "vpdpbusd\t%zmm", "avxvnni": "{vex}\tvpdpbusd\t%ymm", "avx2": "vpmaddwd\t%ymm"}[isa]
    assert expected in assembly
    if isa != "avx512vnni":
        assert "zmm" not in assembly


def test_without_avx2_the_generic_schedules_run():
    from tensorkiln_cpu_llvm.strategies.int8_gemm import int8_isa

    target = "cpu_llvm -mcpu=x86-64"
    assert int8_isa(tk.target(target)) is None
    rng = np.random.default_rng(3)
    xs = rng.integers(-128, 128, (1, 5, 5, 4)).astype(np.int8)
    ws = rng.integers(-128, 128, (3, 3, 4, 8)).astype(np.int8)
    y = g.call("nn.conv2d", g.var("x", xs.shape, "int8"), g.const(ws), padding=(1, 1, 1, 1), data_layout="NHWC",
               kernel_layout="HWIO", out_dtype="int32")
    lib = tk.compile(g.Module.from_expr(y), target)
    assert "cpu_llvm.conv2d_int8_gemm" not in _strategies(lib)
    np.testing.assert_array_equal(lib.run([xs])[0], _numpy_conv_nhwc(xs, ws, 1, 1, 1))


@pytest.mark.parametrize("activations", ["symmetric", "asymmetric"])
def test_quantized_resnet_matches_the_reference_interpreter(activations):
    """The whole quantized graph (int8 convs, requantization epilogues, int8 between layers) on the int8 GEMM
    gives the numpy reference's result: integer accumulation is exact and the epilogue is the graph's own ops."""
    rng = np.random.default_rng(0)
    samples = [rng.standard_normal((1, 3, 32, 32)).astype(np.float32) for _ in range(3)]
    quantized = quantize(small_resnet(), samples[:2], QuantizeConfig(activations=activations))
    lib = tk.compile(quantized.module, "cpu_llvm")
    assert "cpu_llvm.conv2d_int8_gemm" in _strategies(lib)
    expected = evaluate(quantized.module, {quantized.module.main.params[0].name: samples[2]})
    np.testing.assert_allclose(lib.run([samples[2]])[0], np.asarray(expected), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target, isa", PATHS)
def test_two_threads_share_packing_and_tiles(target, isa):
    """Enough work for a team (the one-thread cut-off is 16 MFLOP here): slivers packed by both threads, the
    barrier, then row x column items taken dynamically; the result is the same integers."""
    from tensorkiln_cpu_llvm.strategies.int8_gemm import conv_plan

    rng = np.random.default_rng(5)
    xs = rng.integers(-128, 128, (1, 20, 21, 64)).astype(np.int8)
    ws = rng.integers(-128, 128, (3, 3, 64, 100)).astype(np.int8)
    threaded = f"{target} -num_threads=2"
    plan = conv_plan((1, 22, 23, 64), ws.shape, (1, 20, 21, 100), (1, 1), (1, 1), True, tk.target(threaded))
    assert plan.items >= 4 and 2 * plan.m * plan.out_channels * plan.k >= 2 * 16_000_000
    y = g.call("nn.conv2d", g.var("x", xs.shape, "int8"), g.const(ws), padding=(1, 1, 1, 1), data_layout="NHWC",
               kernel_layout="HWIO", out_dtype="int32")
    lib = tk.compile(g.Module.from_expr(y), threaded)
    expected = _numpy_conv_nhwc(xs, ws, 1, 1, 1)
    for _ in range(3):   # items are shared differently on each run
        np.testing.assert_array_equal(lib.run([xs])[0], expected)
