"""cpu_llvm's NCHW{x}c conv2d and pools (strategies/conv_nchwc.py): which implementation runs, knob
defaults from the CPU the target names, and every knob value against numpy (native and -mcpu=haswell)."""
import numpy as np
import pytest
from tensorkiln_cpu_llvm.host import host_features
from tensorkiln_cpu_llvm.strategies.conv_nchwc import preferred_block

import tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln.compiler.strategy import implementations_for, schedule_for
from tensorkiln.graph.ops.layout import transform_layout
from tensorkiln.graph.ops.nn import Conv2DAttrs
from tensorkiln.graph.types import TensorType
from tensorkiln.passes import PassContext
from tensorkiln.sdk import Workload

RNG = np.random.default_rng(11)
HASWELL = "llvm -mcpu=haswell"
SKYLAKE = "llvm -mcpu=skylake-avx512"
needs_avx2 = pytest.mark.skipif(not {"avx2", "fma"} <= host_features(), reason="haswell code needs AVX2 + FMA")


def _random(*shape):
    return RNG.uniform(-1, 1, size=shape).astype("float32")


def _numpy_conv(x, w, stride, pad):
    """NCHW x OIHW, tap by tap in float64."""
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out_c, _, kh, kw = w.shape
    out_h, out_w = (x.shape[2] - kh) // stride + 1, (x.shape[3] - kw) // stride + 1
    out = np.zeros((x.shape[0], out_c, out_h, out_w))
    for i in range(kh):
        for j in range(kw):
            window = x[:, :, i:i + (out_h - 1) * stride + 1:stride, j:j + (out_w - 1) * stride + 1:stride]
            out += np.einsum("nchw,oc->nohw", window, w[:, :, i, j])
    return out


def _implementation(target, name):
    (found,) = [impl for impl in implementations_for(tk.target(target)) if impl.name == name]
    return found


@pytest.mark.parametrize("target, block, reg_n", [(HASWELL, 8, 12), (SKYLAKE, 16, 16)], ids=["haswell", "avx512"])
def test_block_and_register_tile_follow_the_cpu(target, block, reg_n):
    assert preferred_block(tk.target(target)) == block
    space = _implementation(target, "cpu_llvm.conv2d_nchwc").space(Workload(), tk.target(target))
    assert space.default_config() == {"reg_n": reg_n, "unroll_kw": False, "oc_blocks": 2}   # no call: channels unknown
    assert max(space.knobs[0].candidates) <= (16 if block == 8 else 32) - 2   # a weight vector and an input left


def _conv_stage(channels, out_channels, size, kernel, stride, pad, block):
    x = te.placeholder((1, channels // block, size, size, block), "float32", name="x")
    w = te.placeholder((out_channels // block, channels // block, kernel, kernel, block, block), "float32", name="w")
    attrs = Conv2DAttrs(strides=(stride, stride), padding=(pad,) * 4, data_layout=f"NCHW{block}c",
                        kernel_layout=f"OIHW{block}i{block}o")
    op = graph.get_op("nn.conv2d")
    out_type = op.type_rule((TensorType(x.shape, "float32"), TensorType(w.shape, "float32")), attrs)
    relu = te.compute(out_type.shape, lambda *i: te.max(op.compute([x, w], attrs, out_type)[i], 0.0), name="relu",
                      tag="elemwise")
    return x, w, relu, attrs


@pytest.mark.parametrize("reg_n, unroll_kw, oc_blocks", [(4, False, 1), (12, True, 2), (24, False, 2), (8, True, 1)])
@pytest.mark.parametrize("target", ["llvm", pytest.param(HASWELL, marks=needs_avx2)])
@pytest.mark.parametrize("shape", [(16, 32, 13, 3, 1, 1), (32, 16, 9, 3, 2, 1), (16, 16, 7, 1, 1, 0)],
                         ids=["13wide", "stride2", "1x1"])
def test_every_knob_value_matches_numpy(shape, target, reg_n, unroll_kw, oc_blocks):
    channels, out_channels, size, kernel, stride, pad = shape
    block = 8
    x, w, relu, attrs = _conv_stage(channels, out_channels, size, kernel, stride, pad, block)
    space = _implementation(target, "cpu_llvm.conv2d_nchwc").space(Workload(), tk.target(target))
    config = {"reg_n": reg_n if reg_n in space.knobs[0].candidates else space.knobs[0].default, "unroll_kw": unroll_kw,
              "oc_blocks": oc_blocks}
    s = schedule_for([relu], tk.target(target), ops=("nn.conv2d",), config=config)
    data, weight = _random(1, channels, size, size), _random(out_channels, channels, kernel, kernel)
    args = [transform_layout(data, "NCHW", attrs.data_layout), transform_layout(weight, "OIHW", attrs.kernel_layout)]
    out = np.zeros(tuple(int(d) for d in relu.shape), "float32")
    tk.build(s, [x, w, relu], target=tk.target(target), name="conv")(*args, out)
    expected = np.maximum(_numpy_conv(data, weight, stride, pad), 0)
    np.testing.assert_allclose(transform_layout(out, attrs.data_layout, "NCHW"), expected, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target", ["cpu_llvm", pytest.param("cpu_llvm -mcpu=haswell", marks=needs_avx2)])
def test_a_blocked_cnn_runs_on_the_nchwc_strategies_and_matches_numpy(target):
    block = preferred_block(tk.target(target))
    x, w1, w2 = _random(1, 3, 15, 15), _random(2 * block, 3, 3, 3), _random(2 * block, 2 * block, 3, 3)
    data = graph.var("x", shape=x.shape)
    y = graph.nn.relu(graph.nn.conv2d(data, graph.const(w1), padding=1))     # 3 channels: NCHW in, blocked out
    y = graph.nn.max_pool2d(y, pool_size=3, strides=2, padding=1)
    y = graph.nn.avg_pool2d(graph.nn.relu(graph.nn.conv2d(y, graph.const(w2), padding=1)), pool_size=2, strides=2)
    lib = tk.compile(graph.Module.from_expr(y), target,
                     context=PassContext(config={"alter_layout": {"nn.conv2d": f"NCHW{block}c"}}))
    strategies = {tuple(e["ops"]): e["strategy"] for e in lib.summary()["strategies"].values()}
    convs = [e for e in lib.summary()["strategies"].values() if e["ops"] == ["nn.conv2d", "nn.relu"]]
    assert [e["strategy"] for e in convs] == ["cpu_llvm.conv2d_nchwc"] * 2
    assert strategies[("nn.max_pool2d",)] == strategies[("nn.avg_pool2d",)] == "cpu_llvm.pool_nchwc"
    first = np.maximum(_numpy_conv(x, w1, 1, 1), 0)
    pooled = np.pad(first, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    pooled = np.max([pooled[:, :, i:i + 15:2, j:j + 15:2] for i in range(3) for j in range(3)], axis=0)
    second = np.maximum(_numpy_conv(pooled, w2, 1, 1), 0)
    expected = second.reshape(1, 2 * block, 4, 2, 4, 2).mean(axis=(3, 5))
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-4)


def _numpy_pool(x, kind, size, stride, pad, ceil_mode=False):
    """NCHW max / avg (padding not counted) pool, window by window."""
    height = x.shape[2]
    span = height + 2 * pad - size
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    result = np.zeros(x.shape[:2] + (out, out))
    for i in range(out):
        for j in range(out):
            rows = slice(max(i * stride - pad, 0), min(i * stride - pad + size, height))
            cols = slice(max(j * stride - pad, 0), min(j * stride - pad + size, height))
            window = x[:, :, rows, cols]
            result[:, :, i, j] = window.max(axis=(2, 3)) if kind == "max" else window.mean(axis=(2, 3))
    return result


@pytest.mark.parametrize("kind, size, stride, pad, ceil_mode", [("max", 3, 2, 1, False), ("avg", 3, 1, 1, False),
                                                                  ("max", 2, 2, 0, True), ("avg", 3, 2, 0, True)])
@pytest.mark.parametrize("block", [8, 16])
def test_blocked_pools_match_numpy(kind, size, stride, pad, ceil_mode, block):
    x = _random(1, 2 * block, 9, 9)
    layout = f"NCHW{block}c"
    data = graph.var("x", shape=(1, 2, 9, 9, block))
    y = graph.call(f"nn.{kind}_pool2d", data, pool_size=(size, size), strides=(stride, stride), padding=(pad,) * 4,
                   ceil_mode=ceil_mode, layout=layout)
    lib = tk.compile(graph.Module.from_expr(y), "cpu_llvm")
    assert [e["strategy"] for e in lib.summary()["strategies"].values()] == ["cpu_llvm.pool_nchwc"]
    got = transform_layout(lib(transform_layout(x, "NCHW", layout)), layout, "NCHW")
    np.testing.assert_allclose(got, _numpy_pool(x, kind, size, stride, pad, ceil_mode), rtol=1e-5, atol=1e-5)


def test_prime_widths_get_a_tile_with_a_tail():
    from tensorkiln_cpu_llvm.strategies.conv_nchwc import tile_columns
    assert tile_columns(56, 12, 64) == 8 and tile_columns(55, 12, 64) == 11 and tile_columns(7, 12, 64) == 7
    assert tile_columns(13, 12, 64) == 7      # two tiles, one column wasted, instead of 13 tiles of 1
    assert tile_columns(13, 12, 3) == 1       # a 3-channel stem keeps divisors: its bounds checks would not hoist


def _randomized(model, seed=0):
    """The light zoo fills every weight with one value (ConstantOfShape), under which a channel mix-up in a
    layout goes unseen: each weight gets random values here, of a scale that keeps activations O(1)."""
    import onnx
    from onnx import numpy_helper

    rng = np.random.default_rng(seed)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    shapes = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    users = {}
    for node in model.graph.node:
        for index, name in enumerate(node.input):
            users.setdefault(name, (node.op_type, index))
    kept = []
    for node in model.graph.node:
        if node.op_type != "ConstantOfShape" or node.input[0] not in shapes:
            kept.append(node)
            continue
        shape = tuple(int(d) for d in shapes[node.input[0]])
        op, index = users.get(node.output[0], ("", 0))
        if (op, index) in (("Conv", 1), ("Gemm", 1)):
            fan_in = int(np.prod(shape[1:])) if op == "Conv" else shape[-1]
            value = rng.standard_normal(shape) / np.sqrt(max(fan_in, 1))
        elif op == "BatchNormalization" and index in (1, 4):
            value = rng.uniform(0.5, 1.5, shape)
        else:
            value = rng.standard_normal(shape) * 0.1
        model.graph.initializer.append(numpy_helper.from_array(value.astype(np.float32), node.output[0]))
        if model.ir_version < 4:   # before IR 4 every initializer is also a graph input
            model.graph.input.append(onnx.helper.make_tensor_value_info(node.output[0], onnx.TensorProto.FLOAT, shape))
    del model.graph.node[:]
    model.graph.node.extend(kept)
    return model


@pytest.mark.slow
@pytest.mark.parametrize("name", ["resnet50", "inception_v1"])
@pytest.mark.parametrize("target", ["cpu_llvm", pytest.param("cpu_llvm -mcpu=haswell", marks=needs_avx2)])
def test_light_models_in_the_blocked_layout_match_onnxruntime(name, target):
    import os

    import onnx
    ort = pytest.importorskip("onnxruntime")
    path = os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "light", f"light_{name}.onnx")
    model = _randomized(onnx.load(path))
    (data,) = [i for i in model.graph.input if i.name not in {t.name for t in model.graph.initializer}]
    shape = [d.dim_value for d in data.type.tensor_type.shape.dim]
    x = RNG.uniform(0, 1, size=shape).astype("float32")
    expected = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {data.name: x})[0]
    block = preferred_block(tk.target(target))
    lib = tk.compile(model, target, context=PassContext(config={"alter_layout": {"nn.conv2d": f"NCHW{block}c"}}))
    blocked = sum(e["strategy"] == "cpu_llvm.conv2d_nchwc" for e in lib.summary()["strategies"].values())
    assert blocked >= 20
    np.testing.assert_allclose(lib(x), expected, rtol=1e-4, atol=1e-5 * np.abs(expected).max())


def test_the_tuner_extracts_blocked_conv_tasks_inside_the_pass_context():
    """The layout is a graph-level choice: tasks extracted under the preference are the blocked convs,
    with their knobs (the same PassContext then compiles with the tuned records)."""
    from tensorkiln import tune

    data = graph.var("x", shape=(1, 16, 10, 10))
    y = graph.nn.relu(graph.nn.conv2d(data, graph.const(_random(32, 16, 3, 3)), padding=1))
    model = graph.Module.from_expr(graph.nn.conv2d(y, graph.const(_random(16, 32, 1, 1))))
    with PassContext(config={"alter_layout": {"nn.conv2d": "NCHW8c"}}):
        tasks = tune.extract_tasks(model, "cpu_llvm")
    assert len(tasks) == 2
    for task in tasks:
        assert task.implementation.name == "cpu_llvm.conv2d_nchwc"
        assert {knob.name for knob in task.space.knobs} == {"reg_n", "unroll_kw", "oc_blocks"}
    assert all(t.implementation.name != "cpu_llvm.conv2d_nchwc" for t in tune.extract_tasks(model, "cpu_llvm"))


@pytest.mark.parametrize("target, channels, unroll", [(HASWELL, 64, True), (HASWELL, 256, False), (SKYLAKE, 64, True),
                                                      (SKYLAKE, 256, False)])
def test_kernel_columns_unroll_below_128_input_channels(target, channels, unroll):
    data = graph.var("x", shape=(1, channels // 8, 9, 9, 8))
    call = graph.Module.from_expr(graph.nn.conv2d(data, graph.var("w", shape=(2, channels // 8, 3, 3, 8, 8)),
                                                  data_layout="NCHW8c", kernel_layout="OIHW8i8o")).main.body
    space = _implementation(target, "cpu_llvm.conv2d_nchwc").space(Workload(call=call), tk.target(target))
    assert space.default_config()["unroll_kw"] is unroll


def test_the_register_tile_takes_one_block_when_two_would_leave_accumulators_idle():
    from tensorkiln_cpu_llvm.strategies.conv_nchwc import register_tile
    assert register_tile(27, 16, 12, 2, 96) == (1, 9)    # AVX2: 9 columns, not 3 columns x 2 blocks
    assert register_tile(56, 16, 12, 2, 96) == (2, 4)
    assert register_tile(56, 3, 12, 2, 96) == (1, 8)     # an odd number of blocks cannot pair
