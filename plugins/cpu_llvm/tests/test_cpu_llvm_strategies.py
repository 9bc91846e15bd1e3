"""cpu_llvm's strategies (tensorkiln_cpu_llvm/strategies/): which implementation `tk.compile` picks, and
knob defaults derived from the CPU the target names (host.cpu_facts), not from the core.

- the packed GEMM micro-kernel for fp32 dense (+ bias + relu), 2-D matmul and 1x1 NHWC conv2d
  (built in NHWC, or converted by alter_layout), against numpy;
- one row of data: the split dense, with the micro-kernel's rejection reason in the summary;
- `-mcpu=haswell` (AVX2: 16 registers of 256 bits) and `-mcpu=skylake-avx512` (32 of 512 bits) get
  different knob defaults and register tiles, and haswell code runs correctly on this host.
"""
import re

import numpy as np
import pytest
from tensorkiln_cpu_llvm.host import host_features
from tensorkiln_cpu_llvm.strategies.ukernel import tile_for_rows

import tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln.compiler.strategy import implementations_for
from tensorkiln.passes import PassContext
from tensorkiln.sdk import Workload

RNG = np.random.default_rng(5)
HASWELL = tk.target("llvm -mcpu=haswell")
SKYLAKE = tk.target("llvm -mcpu=skylake-avx512")


def _random(*shape):
    return RNG.uniform(-1, 1, size=shape).astype("float32")


def _only(lib) -> dict:
    (strategy,) = lib.summary()["strategies"].values()
    return strategy


def _implementation(target, name: str):
    (found,) = [impl for impl in implementations_for(target) if impl.name == name]
    return found


# ---- the micro-kernel ------------------------------------------------------------------------------


def test_dense_bias_relu_runs_on_the_micro_kernel():
    x, w, b = _random(64, 128), _random(256, 128), _random(256)
    dense = graph.nn.dense(graph.var("x", shape=(64, 128)), graph.var("w", shape=(256, 128)))
    model = graph.nn.relu(graph.nn.bias_add(dense, graph.const(b)))
    lib = tk.compile(model, "llvm")
    strategy = _only(lib)
    assert (strategy["strategy"], strategy["key"]) == ("cpu_llvm.dense_ukernel", "nn.dense")
    assert strategy["ops"] == ["nn.dense", "nn.bias_add", "nn.relu"]
    assert set(strategy["config"]) == {"tile", "mc", "kc", "nc", "pack_b", "pack_a"} and strategy["space_size"] > 1
    np.testing.assert_allclose(lib(x=x, w=w), np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_dense_with_constant_weights_runs_on_the_micro_kernel_with_the_weight_packed():
    """cpu_llvm's graph passes store the constant weight transposed (a matmul), then packed in the micro-kernel's
    slivers, so the group is an nn.dense_pack (test_dense_pack.py)."""
    x, w, b = _random(64, 128), _random(256, 128), _random(256)
    model = graph.nn.relu(graph.nn.bias_add(graph.nn.dense(graph.var("x", shape=(64, 128)), graph.const(w)),
                                            graph.const(b)))
    lib = tk.compile(model, "llvm")
    strategy = _only(lib)
    assert strategy["strategy"] == "cpu_llvm.dense_pack_ukernel"
    assert strategy["ops"] == ["nn.dense_pack", "nn.bias_add", "nn.relu"]
    np.testing.assert_allclose(lib(x), np.maximum(x @ w.T + b, 0), rtol=1e-4, atol=1e-4)


def test_matmul_runs_on_the_micro_kernel():
    x, w = _random(48, 96), _random(96, 64)
    lib = tk.compile(graph.nn.matmul(graph.var("x", shape=(48, 96)), graph.var("w", shape=(96, 64))), "llvm")
    assert _only(lib)["strategy"] == "cpu_llvm.matmul_ukernel"
    np.testing.assert_allclose(lib(x, w), x @ w, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape", [(2, 3, 28, 128, 64), (1, 2, 28, 512, 128)])
def test_nhwc_1x1_conv_runs_on_the_micro_kernel(shape):
    batch, height, width, channels, outputs = shape
    x, w = _random(batch, height, width, channels), _random(1, 1, channels, outputs)
    model = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w), data_layout="NHWC",
                       kernel_layout="HWIO")
    lib = tk.compile(model, "llvm")
    assert _only(lib)["strategy"] == "cpu_llvm.conv2d_nhwc_ukernel"
    np.testing.assert_allclose(lib(x), np.einsum("bhwc,co->bhwo", x, w[0, 0]), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("shape", [(1, 7, 7, 1024, 128), (1, 14, 14, 576, 96), (1, 8, 8, 256, 64),
                                   (1, 2, 56, 64, 64), (1, 2, 28, 1024, 64), (1, 2, 28, 256, 256)])
def test_1x1_shapes_measured_slower_on_the_micro_kernel_get_the_nhwc_tile(shape):
    batch, height, width, channels, outputs = shape
    x, w = _random(batch, height, width, channels), _random(1, 1, channels, outputs)
    model = graph.call("nn.conv2d", graph.var("x", shape=x.shape), graph.const(w), data_layout="NHWC",
                       kernel_layout="HWIO")
    # the micro-kernel declines the HWIO conv; the packing pass then packs its weight for the NHWC tile
    with PassContext(disabled={"cpu_llvm_pack_conv_weights"}):
        unpacked = _only(tk.compile(model, "llvm"))
    assert unpacked["strategy"] == "cpu_llvm.conv2d_nhwc"
    reason = dict(unpacked["rejected"])["cpu_llvm.conv2d_nhwc_ukernel"]
    # on AVX2 (tiles of at most 6 rows) widths 7 and 14 have no tile; where they have one it measured slower
    assert "is as fast or faster" in reason if tile_for_rows(width, tk.target("llvm")) else "has no divisor" in reason
    lib = tk.compile(model, "llvm -winograd=off")   # by default a 3x3 stride-1 conv runs as Winograd (test_winograd.py)
    strategy = _only(lib)
    assert strategy["strategy"] == "cpu_llvm.conv2d_nhwc"
    assert "weight packed OHWI" in dict(strategy["rejected"])["cpu_llvm.conv2d_nhwc_ukernel"]
    np.testing.assert_allclose(lib(x), np.einsum("bhwc,co->bhwo", x, w[0, 0]), rtol=1e-4, atol=1e-3)


def test_nchw_1x1_conv_converted_by_alter_layout_runs_on_the_micro_kernel():
    x, w = _random(1, 128, 4, 28), _random(64, 128, 1, 1)
    model = graph.nn.relu(graph.nn.conv2d(graph.var("x", shape=(1, 128, 4, 28)), graph.const(w)))
    context = PassContext(opt_level=3, config={"alter_layout": {"nn.conv2d": "NHWC"}})
    lib = tk.compile(model, "llvm", context=context)
    by_ops = {tuple(entry["ops"]): entry["strategy"] for entry in lib.summary()["strategies"].values()}
    assert by_ops[("nn.conv2d", "nn.relu")] == "cpu_llvm.conv2d_nhwc_ukernel"
    np.testing.assert_allclose(lib(x), np.maximum(np.einsum("bchw,oc->bohw", x, w[:, :, 0, 0]), 0),
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, dilation, padding", [(3, 1, 1), (3, 2, 2), (5, 1, 0)])
def test_the_conv_micro_kernel_is_exact_for_any_kernel_size_when_forced(kernel, dilation, padding):
    """The 3x3 and larger taps are measured slower than the NHWC tile and so not chosen, but the
    nest (one micro-kernel call per tap, input rows at an offset) must stay correct."""
    from tensorkiln import te
    from tensorkiln.graph.ops.nn import Conv2DAttrs
    from tensorkiln.graph.types import TensorType

    target = tk.target("llvm")
    impl = _implementation(target, "cpu_llvm.conv2d_nhwc_ukernel")
    x, w = _random(1, 12, 16, 32), _random(kernel, kernel, 32, 64)
    attrs = Conv2DAttrs(padding=(padding,) * 4, dilation=(dilation, dilation), data_layout="NHWC",
                        kernel_layout="HWIO")
    out_w = 16 + 2 * padding - (kernel - 1) * dilation
    out_h = 12 + 2 * padding - (kernel - 1) * dilation
    from tensorkiln_cpu_llvm.strategies.ukernel import row_candidates
    rows = row_candidates(out_w, target)[-1]
    data, weight = te.placeholder(x.shape, name="x"), te.placeholder(w.shape, name="w")
    config = {"rows": rows, "kc": 16}
    out = impl.compute([data, weight], attrs, TensorType((1, out_h, out_w, 64), "float32"), target, config)
    s = impl.schedule([out], target, config)
    assert f"sgemm_ukernel_packed_{rows}x" in str(tk.lower(s, [data, weight, out]))
    got = np.zeros((1, out_h, out_w, 64), "float32")
    tk.build(s, [data, weight, out], target=target)(x, w, got)
    reference = tk.graph.get_op("nn.conv2d").reference(
        x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1),
        Conv2DAttrs(padding=(padding,) * 4, dilation=(dilation, dilation)))
    np.testing.assert_allclose(got, reference.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def test_a_3x3_nhwc_conv_gets_the_nhwc_schedule_and_the_reason_the_micro_kernel_does_not_apply():
    x, w = _random(1, 8, 8, 16), _random(3, 3, 16, 32)
    model = graph.call("nn.conv2d", graph.var("x", shape=(1, 8, 8, 16)), graph.const(w), padding=(1, 1, 1, 1),
                       data_layout="NHWC", kernel_layout="HWIO")
    lib = tk.compile(model, "llvm -winograd=off")   # by default a 3x3 stride-1 conv runs as Winograd (test_winograd.py)
    strategy = _only(lib)
    assert strategy["strategy"] == "cpu_llvm.conv2d_nhwc"
    rejected = dict(strategy["rejected"])
    assert "cpu_llvm.conv2d_nhwc_ukernel" in rejected
    # the only other candidates turned down are the int8 ones, for this conv's float32 dtype, and the
    # NCHW depthwise one
    assert "NCHW" in rejected.pop("cpu_llvm.depthwise_nchw")
    assert all("int8" in name and "8-bit" in reason for name, reason in rejected.items()
               if name != "cpu_llvm.conv2d_nhwc_ukernel"), rejected
    nchw = tk.graph.get_op("nn.conv2d").reference(x.transpose(0, 3, 1, 2), w.transpose(3, 2, 0, 1),
                                                  tk.graph.get_op("nn.conv2d").attrs_type(padding=(1, 1, 1, 1)))
    np.testing.assert_allclose(lib(x), nchw.transpose(0, 2, 3, 1), rtol=1e-4, atol=1e-4)


def test_one_row_gets_the_split_dense_and_the_micro_kernels_reason():
    x, w = _random(1, 128), _random(256, 128)
    lib = tk.compile(graph.nn.relu(graph.nn.dense(graph.var("x", shape=(1, 128)), graph.const(w))), "llvm")
    strategy = _only(lib)
    assert strategy["strategy"] == "cpu_llvm.dense_split"
    reason = "M=1 < 4 rows: a matrix-vector product (cpu_llvm.dense_split streams the weight)"
    assert ["cpu_llvm.dense_ukernel", reason] in strategy["rejected"]
    np.testing.assert_allclose(lib(x), np.maximum(x @ w.T, 0), rtol=1e-4, atol=1e-4)


def test_a_float16_dense_is_not_for_the_micro_kernel():
    call = graph.nn.dense(graph.var("x", shape=(64, 128), dtype="float16"),
                          graph.var("w", shape=(256, 128), dtype="float16"))
    reason = _implementation(tk.target("llvm"), "cpu_llvm.dense_ukernel").applies(call, tk.target("llvm"))
    assert reason.startswith("not a float32 2-D dense")


# ---- knob defaults from the CPU ----------------------------------------------------------------------


def test_targets_report_the_named_cpus_vector_width():
    assert HASWELL.capabilities.vector_width_bits == 256 and SKYLAKE.capabilities.vector_width_bits == 512
    assert tk.target("llvm -mcpu=skylake-avx512 -mattr=-avx512f").capabilities.vector_width_bits == 256


def _nhwc_conv_output():
    x = te.placeholder((1, 8, 8, 16), "float32", name="x")
    w = te.placeholder((3, 3, 16, 32), "float32", name="w")
    attrs = tk.graph.get_op("nn.conv2d").attrs_type(padding=(1, 1, 1, 1), data_layout="NHWC", kernel_layout="HWIO")
    return tk.graph.get_op("nn.conv2d").compute([x, w], attrs, tk.graph.TensorType((1, 8, 8, 32), "float32"))


@pytest.mark.parametrize("target, accumulators, tile, pack, gemm_tile",
                         [(HASWELL, 12, (6, 16), 16, "4x24"), (SKYLAKE, 24, (8, 32), 32, "6x64")],
                         ids=["haswell", "skylake-avx512"])
def test_knob_defaults_follow_the_cpu(target, accumulators, tile, pack, gemm_tile):
    conv = _implementation(target, "cpu_llvm.conv2d_nhwc")
    assert conv.space(Workload(outputs=(_nhwc_conv_output(),)), target).default_config()["max_accumulators"] == \
        accumulators
    gemm = tile_for_rows(48, target)
    assert (gemm.mr, gemm.nr) == tile
    # 384 columns: no tile pads them (gemm_blocking.PADDING_GAIN would pick another for 256)
    dense = graph.nn.dense(graph.var("x", shape=(48, 128)), graph.var("w", shape=(384, 128)))
    space = _implementation(target, "cpu_llvm.dense_ukernel").space(Workload(call=dense), target)
    (mc,) = [knob for knob in space.knobs if knob.name == "mc"]
    assert space.default_config()["tile"] == gemm_tile            # the whole-GEMM register tile (gemm_blocking.py)
    rows = int(gemm_tile.split("x")[0])
    assert all(value % rows == 0 for value in mc.candidates)      # row blocks of whole register tiles
    rows = graph.nn.dense(graph.var("x", shape=(3, 128)), graph.var("w", shape=(256, 128)))
    packed = _implementation(target, "cpu_llvm.dense_packed").space(Workload(call=rows), target)
    assert packed.default_config()["pack"] == pack               # two vectors of output columns


@pytest.mark.skipif(not {"avx2", "fma"} <= host_features(), reason="haswell code needs an AVX2 + FMA host")
def test_haswell_code_runs_correctly_on_this_host():
    x, w = _random(48, 96), _random(64, 96)
    lib = tk.compile(graph.nn.dense(graph.var("x", shape=(48, 96)), graph.var("w", shape=(64, 96))), HASWELL)
    strategy = _only(lib)
    assert strategy["strategy"] == "cpu_llvm.dense_ukernel" and "-mcpu=haswell" in strategy["target"]
    (artifact,) = lib.artifacts.values()
    vector_widths = set(re.findall(r"<(\d+) x float>", artifact.source))
    assert vector_widths == {"8"}, f"AVX2 code uses 8-float vectors only, found {vector_widths}"
    np.testing.assert_allclose(lib(x=x, w=w), x @ w.T, rtol=1e-4, atol=1e-4)


def test_a_host_whose_llvm_tuning_measured_slower_is_scheduled_for_its_stand_in(monkeypatch):
    """-mcpu=native on a Zen 1 host schedules for haswell with the host's own feature string (its instruction
    set); an explicit -mcpu=znver1 keeps znver1's model; other hosts keep their own name."""
    from tensorkiln_cpu_llvm import host
    features = "+avx,+avx2,+fma,+sse4a,-avx512f"
    monkeypatch.setattr(host, "_host_cpu", lambda: ("znver1", features))
    native = host.machine_config(tk.target("llvm"))
    assert (native.cpu, native.features) == ("haswell", features)
    assert host.cpu_facts(tk.target("llvm")).vector_bits == 256
    assert host.machine_config(tk.target("llvm -mcpu=znver1")).cpu == "znver1"
    monkeypatch.setattr(host, "_host_cpu", lambda: ("znver3", features))
    assert host.machine_config(tk.target("llvm")).cpu == "znver3"
