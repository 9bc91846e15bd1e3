"""cpu_llvm's CPU schedules (strategies/anchors.py, strategies/dense.py), checked for correctness and
for the loop structure a CPU schedule should have (timings live in benchmarks/conv2d.py):

- a fused conv group: epilogue inlined, accumulation per output tile, parallel outer loops;
  with the table applied to capability-only targets, vectors and threads follow the capabilities;
- conv2d in every layout nn.conv2d accepts, NHWC register tiles (output positions x
  output-channel vectors) with fused bias / relu / residual epilogues, at shapes the
  tiles do not divide, stride 2, padding, dilation, groups, depthwise and 1x1;
- the batch-1 dense as vectorized partial sums over K (cpu_llvm.dense_split), with epilogue;
- a small CNN compiled with NHWC preferred (what alter_layout does for cpu_llvm) and
  with NCHW kept, against the graph's numpy reference;
- reductions computed at a fused loop (global pool, softmax rows) keep one accumulator per
  output, and large layout transforms whose innermost axis has no vector divisor.
"""
from types import SimpleNamespace

import numpy as np
import pytest
from tensorkiln_cpu_llvm.strategies import ANCHOR_SCHEDULES

import tensorkiln as tk
from tensorkiln import graph, te, tir
from tensorkiln.compiler.strategy import implementations_for, schedule_for
from tensorkiln.graph import get_op
from tensorkiln.graph.ops.layout import layout_shape
from tensorkiln.graph.ops.nn import BiasAddAttrs, Conv2DAttrs
from tensorkiln.graph.types import TensorType
from tensorkiln.ir.dtypes import to_numpy
from tensorkiln.ir.errors import TargetError, UnsupportedOpError
from tensorkiln.ops import tags
from tensorkiln.ops.nn.conv2d import conv2d_layout
from tensorkiln.passes import PassContext
from tensorkiln.sdk import Workload
from tensorkiln.sdk.schedules import power_of_two_lanes, schedule_fused, vector_lanes

LLVM = tk.target("llvm")
RNG = np.random.default_rng(7)


def run_schedule(s, inputs: list, outputs: list, arrays: list, backend: str = "llvm") -> list[np.ndarray]:
    """Run schedule `s` on `arrays` compiled for llvm (or with the tir interpreter); fresh output arrays."""
    results = [np.zeros(tuple(int(d) for d in o.shape), dtype=to_numpy(o.dtype)) for o in outputs]
    if backend == "interpret":
        tir.interpret(te.lower(s, [*inputs, *outputs], name="kernel"), *arrays, *results)
    else:
        tk.build(s, [*inputs, *outputs], target=LLVM, name="kernel")(*arrays, *results)
    return results


def _random(*shape):
    return RNG.uniform(-1, 1, size=shape).astype("float32")


def _to_layout(array, logical, layout):
    """`array` (in `logical`) rearranged into `layout`, plain ("HWIO") or blocked ("OHWI16o")."""
    return graph.transform_layout(array, logical, layout)


# ---- a fused conv group: structure, and capabilities through the table ------------------------------


def _conv_group(shape, out_channels, kernel=3):
    """te DAG of relu(conv2d(x, w) + bias) + residual (NCHW), built through the registry computes."""
    batch, channels, height, width = shape
    x = te.placeholder(shape, "float32", name="x")
    w = te.placeholder((out_channels, channels, kernel, kernel), "float32", name="w")
    b = te.placeholder((out_channels,), "float32", name="b")
    r = te.placeholder((batch, out_channels, height, width), "float32", name="r")
    out_type = TensorType((batch, out_channels, height, width), "float32")
    conv = get_op("nn.conv2d").compute([x, w], Conv2DAttrs(padding=(kernel // 2,) * 4), out_type)
    biased = get_op("nn.bias_add").compute([conv, b], BiasAddAttrs(), out_type)
    out = get_op("add").compute([get_op("nn.relu").compute([biased], None, out_type), r], None, out_type)
    return [x, w, b, r], out, conv


def _loops(func):
    found = []
    tir.visit.post_order_visit(func.body, lambda x: found.append(x) if isinstance(x, tir.For) else None)
    return found


def test_fused_conv_group_inlines_epilogue_and_accumulates_per_tile():
    inputs, out, conv = _conv_group((1, 4, 6, 8), 8)
    s = schedule_for([out], LLVM)
    stages = {stage.name: stage for stage in s.stages}
    assert stages["T_bias_add"].attach_type == "inline"
    assert stages["T_relu"].attach_type == "inline"
    assert stages["T_conv2d"].attach_type == "scope" and stages["T_conv2d"].attach_stage is s[out]
    func = te.lower(s, [*inputs, out])
    kinds = {loop.kind for loop in _loops(func)}
    assert tir.ForKind.PARALLEL in kinds
    assert "T_bias_add" not in str(func) and "T_relu" not in str(func)  # never materialized


def _fake_target(vector_width_bits: int, max_threads: int):
    """cpu_llvm's anchor schedules read capabilities only, so any object with them is a target."""
    return SimpleNamespace(capabilities=SimpleNamespace(vector_width_bits=vector_width_bits, max_threads=max_threads))


def _with_cpu_table(out, target):
    """cpu_llvm's table applied to `target`, with the knob defaults its conv implementation declares."""
    (conv_nchw,) = [impl for impl in implementations_for(LLVM) if impl.name == "cpu_llvm.conv2d_nchw"]
    config = conv_nchw.space(Workload(outputs=(out,)), LLVM).default_config()
    return schedule_fused([out], target, ANCHOR_SCHEDULES, config)


def test_scalar_single_thread_target_gets_no_vector_or_parallel_loops():
    inputs, out, _ = _conv_group((1, 4, 6, 8), 8)
    func = te.lower(_with_cpu_table(out, _fake_target(0, 1)), [*inputs, out])
    kinds = {loop.kind for loop in _loops(func)}
    assert tir.ForKind.PARALLEL not in kinds and tir.ForKind.VECTORIZED not in kinds
    assert "ramp" not in str(func)


def test_wide_vector_target_vectorizes_the_conv_tile():
    inputs, out, _ = _conv_group((1, 4, 6, 8), 8)
    func = te.lower(_with_cpu_table(out, _fake_target(256, 0)), [*inputs, out])
    assert "ramp" in str(func)
    assert tir.ForKind.PARALLEL in {loop.kind for loop in _loops(func)}


@pytest.mark.parametrize("vector_width_bits, max_threads", [(0, 1), (256, 0)])
def test_the_table_on_capability_targets_matches_numpy(vector_width_bits, max_threads):
    inputs, out, _ = _conv_group((1, 4, 5, 6), 8)
    x, w, b, r = _random(1, 4, 5, 6), _random(8, 4, 3, 3), _random(8), _random(1, 8, 5, 6)
    (got,) = run_schedule(_with_cpu_table(out, _fake_target(vector_width_bits, max_threads)), inputs, [out],
                          [x, w, b, r], "interpret")
    conv = get_op("nn.conv2d").reference(x, w, Conv2DAttrs(padding=(1, 1, 1, 1)))
    np.testing.assert_allclose(got, np.maximum(conv + b[None, :, None, None], 0) + r, rtol=1e-4, atol=1e-5)


# ---- conv2d in every layout ------------------------------------------------------------------------


# (data NCHW shape, weight OIHW shape, Conv2DAttrs keywords)
CONV_SHAPES = [
    ((1, 16, 13, 13), (32, 16, 3, 3), dict(padding=(1, 1, 1, 1))),                     # width 13: 13-wide tile
    ((1, 8, 17, 11), (24, 8, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1))),       # 24 channels, stride 2
    ((1, 32, 9, 9), (48, 32, 1, 1), dict()),                                           # 1x1
    ((1, 64, 14, 14), (96, 64, 1, 1), dict(strides=(2, 2))),                           # 1x1 stride 2
    ((2, 3, 23, 23), (10, 3, 7, 7), dict(strides=(2, 2), padding=(3, 3, 2, 2))),       # batch 2, 10 channels
    ((1, 12, 10, 10), (12, 4, 3, 3), dict(padding=(1, 1, 1, 1), groups=3)),            # groups
    ((1, 32, 15, 15), (32, 1, 3, 3), dict(strides=(2, 2), padding=(1, 1, 1, 1), groups=32)),  # depthwise
    ((1, 16, 12, 12), (32, 16, 3, 3), dict(padding=(2, 2, 2, 2), dilation=(2, 2))),
]


def _conv_epilogue_group(data_shape, weight_shape, keywords, attrs, residual: bool):
    """relu(conv2d(x, w) + bias) (+ residual) through the registry computes, in attrs' layouts."""
    op = get_op("nn.conv2d")
    logical_out = op.type_rule((TensorType(data_shape, "float32"), TensorType(weight_shape, "float32")),
                               Conv2DAttrs(**keywords)).shape
    x = te.placeholder(_shape_in(data_shape, "NCHW", attrs.data_layout), "float32", name="x")
    w = te.placeholder(_shape_in(weight_shape, "OIHW", attrs.kernel_layout), "float32", name="w")
    b = te.placeholder((weight_shape[0],), "float32", name="b")
    out_shape = _shape_in(logical_out, "NCHW", attrs.data_layout)
    out_type = TensorType(out_shape, "float32")
    conv = op.compute([x, w], attrs, out_type)
    axis = attrs.data_layout.index("C")
    out = get_op("nn.relu").compute([get_op("nn.bias_add").compute([conv, b], BiasAddAttrs(axis=axis), out_type)],
                                    None, out_type)
    inputs = [x, w, b]
    if residual:
        r = te.placeholder(out_shape, "float32", name="r")
        out = get_op("add").compute([out, r], None, out_type)
        inputs.append(r)
    return inputs, out, conv


def _shape_in(shape, logical, layout):
    return layout_shape(dict(zip(logical, shape)), layout)


@pytest.mark.parametrize("data_layout, kernel_layout", [("NHWC", "HWIO"), ("NHWC", "OHWI"), ("NHWC", "OIHW"),
                                                        ("NCHW", "OIHW"), ("NCHW", "HWIO"), ("NCHW", "OHWI")])
@pytest.mark.parametrize("data_shape, weight_shape, keywords", CONV_SHAPES, ids=[str(s[:2]) for s in CONV_SHAPES])
def test_conv2d_in_every_layout_with_epilogue_matches_the_reference(data_layout, kernel_layout, data_shape,
                                                                       weight_shape, keywords):
    attrs = Conv2DAttrs(**keywords, data_layout=data_layout, kernel_layout=kernel_layout)
    residual = data_shape[0] == 1
    inputs, out, conv = _conv_epilogue_group(data_shape, weight_shape, keywords, attrs, residual)
    if data_layout == "NHWC":
        assert conv.op.tag == tags.CONV2D_NHWC
    x, w, b = _random(*data_shape), _random(*weight_shape), _random(weight_shape[0])
    arrays = [_to_layout(x, "NCHW", data_layout), _to_layout(w, "OIHW", kernel_layout), b]
    reference = get_op("nn.conv2d").reference(x, w, Conv2DAttrs(**keywords))
    expected = np.maximum(reference + b[None, :, None, None], 0)
    if residual:
        r = _random(*expected.shape)
        arrays.append(_to_layout(r, "NCHW", data_layout))
        expected = expected + r
    (got,) = run_schedule(schedule_for([out], LLVM), inputs, [out], arrays, "llvm")
    np.testing.assert_allclose(got, _to_layout(expected, "NCHW", data_layout), rtol=1e-4, atol=1e-4)


def _output_block(out_channels: int) -> int:
    return next(block for block in (16, 8, 4, 2, 1) if out_channels % block == 0)


@pytest.mark.parametrize("data_layout, blocked", [("NHWC", "OHWI{}o"), ("NHWC", "HWOI{}o"), ("NCHW", "OIHW{}o")])
@pytest.mark.parametrize("data_shape, weight_shape, keywords", CONV_SHAPES, ids=[str(s[:2]) for s in CONV_SHAPES])
def test_conv2d_with_a_blocked_weight_layout_matches_the_reference(data_layout, blocked, data_shape, weight_shape,
                                                                   keywords):
    """A weight packed in blocks of output channels (what cpu_llvm_pack_conv_weights makes): every conv kind,
    the NHWC tile then keeping the block; the result is the plain conv's."""
    kernel_layout = blocked.format(_output_block(weight_shape[0]))
    attrs = Conv2DAttrs(**keywords, data_layout=data_layout, kernel_layout=kernel_layout)
    inputs, out, conv = _conv_epilogue_group(data_shape, weight_shape, keywords, attrs, residual=False)
    x, w, b = _random(*data_shape), _random(*weight_shape), _random(weight_shape[0])
    arrays = [_to_layout(x, "NCHW", data_layout), _to_layout(w, "OIHW", kernel_layout), b]
    assert get_op("nn.conv2d").type_rule((TensorType(arrays[0].shape, "float32"), TensorType(arrays[1].shape,
                                                                                             "float32")),
                                         attrs).shape == _shape_in(conv.shape, data_layout, data_layout)
    expected = np.maximum(get_op("nn.conv2d").reference(x, w, Conv2DAttrs(**keywords)) + b[None, :, None, None], 0)
    np.testing.assert_allclose(get_op("nn.conv2d").reference(arrays[0], arrays[1], attrs),
                               _to_layout(get_op("nn.conv2d").reference(x, w, Conv2DAttrs(**keywords)), "NCHW",
                                          data_layout), rtol=1e-5, atol=1e-5)
    (got,) = run_schedule(schedule_for([out], LLVM), inputs, [out], arrays, "llvm")
    np.testing.assert_allclose(got, _to_layout(expected, "NCHW", data_layout), rtol=1e-4, atol=1e-4)


NHWC_TILE_CONFIGS = [dict(max_accumulators=28, max_tile_width=14, tile_rows=2),
                     dict(max_accumulators=28, max_tile_width=16, tile_rows=1),
                     dict(max_accumulators=8, max_tile_width=4, tile_rows=2),
                     dict(tile_rows=1, loop_order="rows"),
                     dict(tile_rows=1, loop_order="channels"),
                     dict(max_accumulators=8, max_tile_width=7, tile_rows=1, loop_order="rows")]


def _on_this_host(config: dict) -> dict:
    """`config` with max_accumulators lowered to the host's largest candidate at most that many (28 and 24
    need AVX-512's 32 registers; an AVX2 host offers 4, 8 and 12): the tests run the code they build."""
    (conv,) = [impl for impl in implementations_for(LLVM) if impl.name == "cpu_llvm.conv2d_nhwc"]
    (knob,) = [k for k in conv.space(Workload(), LLVM).knobs if k.name == "max_accumulators"]
    wanted = config.get("max_accumulators")
    if wanted is None:
        return config
    return {**config, "max_accumulators": max([c for c in knob.candidates if c <= wanted] or [min(knob.candidates)])}


@pytest.mark.parametrize("config", NHWC_TILE_CONFIGS, ids=str)
@pytest.mark.parametrize("data_shape, weight_shape, keywords", CONV_SHAPES, ids=[str(s[:2]) for s in CONV_SHAPES])
def test_nhwc_tile_knobs_keep_the_conv_result(config, data_shape, weight_shape, keywords):
    """Tuned NHWC tiles (rows per tile, 28 accumulators, narrow tiles) over every conv kind, with packed weights
    and a residual epilogue: the plain conv's result. Rows per tile that do not divide the output rows (17 -> 9
    rows) fall back to a divisor."""
    kernel_layout = "OHWI{}o".format(_output_block(weight_shape[0]))
    attrs = Conv2DAttrs(**keywords, data_layout="NHWC", kernel_layout=kernel_layout)
    inputs, out, conv = _conv_epilogue_group(data_shape, weight_shape, keywords, attrs, residual=True)
    x, w, b = _random(*data_shape), _random(*weight_shape), _random(weight_shape[0])
    residual = _random(*(int(d) for d in out.shape))
    expected = np.maximum(get_op("nn.conv2d").reference(x, w, Conv2DAttrs(**keywords)) + b[None, :, None, None], 0)
    arrays = [_to_layout(x, "NCHW", "NHWC"), _to_layout(w, "OIHW", kernel_layout), b, residual]
    (got,) = run_schedule(schedule_for([out], LLVM, config=_on_this_host({"max_accumulators": 24, "max_tile_width": 14, **config})),
                          inputs, [out], arrays, "llvm")
    np.testing.assert_allclose(got, _to_layout(expected, "NCHW", "NHWC") + residual, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("kernel, channels, outputs, options, order", [
    (1, 64, 256, "-l2_cache=2M", "rows"),           # 64 KB of weights in a 2 MB L2
    (1, 1024, 256, "-l2_cache=2M", "rows"),         # 1 MB: half of it
    (1, 1024, 512, "-l2_cache=2M", "channels"),     # 2 MB
    (3, 512, 512, "-l2_cache=2M", "channels"),      # 9 MB (resnet50's last 3x3)
    (1, 64, 256, "-l2_cache=64K", "channels"),      # the same 64 KB past half of a 64 KB L2
    (3, 64, 64, "-l2_cache=512K", "rows"),          # 144 KB within 256 KB
])
def test_nhwc_loop_order_puts_rows_outermost_when_the_weights_fit_in_half_of_l2(kernel, channels, outputs,
                                                                                 options, order):
    """anchors.nhwc_loop_order against the weight bytes (kernel x kernel x channels x outputs x 4) and half
    of the L2 the target declares (-l2_cache)."""
    from tensorkiln_cpu_llvm.strategies.anchors import nhwc_loop_order

    x = te.placeholder((1, 8, 8, channels), "float32", name="x")
    w = te.placeholder((kernel, kernel, channels, outputs), "float32", name="w")
    attrs = Conv2DAttrs(data_layout="NHWC", kernel_layout="HWIO")
    out_type = TensorType(get_op("nn.conv2d").type_rule((TensorType(x.shape, "float32"), TensorType(w.shape, "float32")),
                                                       attrs).shape, "float32")
    conv = get_op("nn.conv2d").compute([x, w], attrs, out_type)
    assert nhwc_loop_order(conv, tk.target(f"cpu_llvm {options}")) == order


AVX2_L1 = "-mcpu=haswell -l1_cache=32K -l1_ways=8"      # 12 accumulators of 8 lanes, 8 ways of 4 KB
AVX512_L1 = "-mcpu=skylake-avx512 -l1_cache=48K -l1_ways=12"


@pytest.mark.parametrize("height, width, channels, outputs, options, rows", [
    (14, 14, 256, 1024, AVX2_L1, 2),     # one row: 5 positions with a tail (5, 5, 4); two: 2 x 2 x 2 vectors
    (14, 14, 1024, 256, AVX2_L1, 2),     # one row: 2 positions (4 KB apart, one L1 set); two rows fill 8
    (14, 13, 256, 256, AVX2_L1, 1),      # a prime width: two rows of one position fill 4 of 12
    (28, 28, 128, 512, AVX2_L1, 1),      # one row of 4 x 2 vectors has no tail; two rows fill no more
    (7, 7, 512, 2048, AVX2_L1, 1),       # an odd number of rows
    (14, 14, 1024, 256, AVX512_L1, 1),   # 7 positions x 2 vectors, no tail
    (28, 28, 128, 512, AVX512_L1, 1),    # two rows would fill 16 against 14: under TWO_ROW_GAIN
])
def test_nhwc_tile_rows_default_takes_two_rows_where_one_row_has_a_tail_or_few_accumulators(
        height, width, channels, outputs, options, rows):
    """anchors.nhwc_tile_rows, the `tile_rows` knob's default, for targets whose vector registers and L1
    are given (-mcpu, -l1_cache, -l1_ways), and the knob's default in the conv's tuning space."""
    from tensorkiln_cpu_llvm.strategies.anchors import nhwc_tile_rows

    x = te.placeholder((1, height, width, channels), "float32", name="x")
    w = te.placeholder((1, 1, channels, outputs), "float32", name="w")
    attrs = Conv2DAttrs(data_layout="NHWC", kernel_layout="HWIO")
    out_type = TensorType(get_op("nn.conv2d").type_rule((TensorType(x.shape, "float32"), TensorType(w.shape, "float32")),
                                                       attrs).shape, "float32")
    conv = get_op("nn.conv2d").compute([x, w], attrs, out_type)
    target = tk.target(f"cpu_llvm {options}")
    accumulators = 24 if "avx512" in options else 12
    assert nhwc_tile_rows(conv, target, accumulators, 14) == rows
    (implementation,) = [impl for impl in implementations_for(target) if impl.name == "cpu_llvm.conv2d_nhwc"]
    (knob,) = [k for k in implementation.space(Workload(outputs=(conv,)), target).knobs if k.name == "tile_rows"]
    assert knob.default == rows


@pytest.mark.parametrize("channels, stride, rows, ways, widest", [
    (1024, 1, 1, 12, 8),    # 4 KB apart: one L1 set, 8 of its 12 ways
    (512, 2, 1, 12, 8),     # stride 2 over 512 channels: 4 KB apart too
    (512, 1, 1, 12, 16),    # 2 KB apart: two sets, 8 positions each
    (256, 1, 2, 12, 16),    # 1 KB apart, the second row 16 KB on: four sets
    (1024, 1, 1, 8, 5),     # a 32 KB 8-way L1 (-l1_ways=8): 5 positions
    (64, 1, 1, 12, 16),     # 256 bytes apart: no cap
])
def test_nhwc_tile_positions_sharing_an_l1_set_are_capped(channels, stride, rows, ways, widest):
    """anchors.l1_set_width against a count of the L1 sets each tile position's input line falls into."""
    from tensorkiln_cpu_llvm.host import cache_sizes
    from tensorkiln_cpu_llvm.strategies.anchors import l1_set_width

    x = te.placeholder((1, 16, 16, channels), "float32", name="x")
    w = te.placeholder((1, 1, channels, 32), "float32", name="w")
    attrs = Conv2DAttrs(strides=(stride, stride), data_layout="NHWC", kernel_layout="HWIO")
    out_type = TensorType(get_op("nn.conv2d").type_rule((TensorType(x.shape, "float32"), TensorType(w.shape, "float32")),
                                                       attrs).shape, "float32")
    conv = get_op("nn.conv2d").compute([x, w], attrs, out_type)
    caches = cache_sizes(tk.target(f"llvm -l1_cache={ways * 4}K -l1_ways={ways}"))   # 4 KB ways
    width = l1_set_width(conv, rows, 16, caches)
    assert width == widest
    sets = caches.l1d // ways // 64
    def most_per_set(positions):
        lines = {(r * 16 * stride + x * stride) * channels * 4 // 64 for r in range(rows) for x in range(positions)}
        return max(sum(1 for line in lines if line % sets == s) for s in range(sets))
    assert most_per_set(width) <= ways * 2 // 3 and (width == 16 or most_per_set(width + 1) > ways * 2 // 3)


def test_l1_ways_option_is_checked():
    from tensorkiln_cpu_llvm.host import cache_sizes

    with pytest.raises(TargetError, match="l1_ways=0: the L1 associativity must be a positive"):
        cache_sizes(tk.target("llvm -l1_ways=0"))


@pytest.mark.parametrize("layout", ["OHWI16", "OHWI16c", "NHWC8c", "OHWI0o", "OHW16o"])
def test_conv2d_names_a_kernel_layout_it_cannot_read(layout):
    with pytest.raises(graph.AttrsError, match=f"kernel_layout '{layout}' is not one of"):
        Conv2DAttrs(data_layout="NHWC", kernel_layout=layout)


@pytest.mark.parametrize("data_shape, weight_shape, keywords", CONV_SHAPES[:3],
                         ids=[str(s[:2]) for s in CONV_SHAPES[:3]])
def test_nhwc_conv2d_alone_accumulates_in_a_local_tile(data_shape, weight_shape, keywords):
    attrs = Conv2DAttrs(**keywords, data_layout="NHWC", kernel_layout="HWIO")
    x = te.placeholder(_shape_in(data_shape, "NCHW", "NHWC"), "float32", name="x")
    w = te.placeholder(_shape_in(weight_shape, "OIHW", "HWIO"), "float32", name="w")
    logical = get_op("nn.conv2d").type_rule((TensorType(data_shape, "float32"), TensorType(weight_shape, "float32")),
                                            Conv2DAttrs(**keywords)).shape
    conv = get_op("nn.conv2d").compute([x, w], attrs, TensorType(_shape_in(logical, "NCHW", "NHWC"), "float32"))
    s = schedule_for([conv], LLVM)
    assert any(stage.scope == "local" for stage in s.stages)
    xs, ws = _random(*data_shape), _random(*weight_shape)
    (got,) = run_schedule(s, [x, w], [conv], [_to_layout(xs, "NCHW", "NHWC"), _to_layout(ws, "OIHW", "HWIO")], "llvm")
    expected = get_op("nn.conv2d").reference(xs, ws, Conv2DAttrs(**keywords))
    np.testing.assert_allclose(got, _to_layout(expected, "NCHW", "NHWC"), rtol=1e-4, atol=1e-4)


def test_conv2d_compute_names_a_layout_it_has_no_compute_for():
    x = te.placeholder((1, 1, 4, 4, 8), "float32", name="x")
    w = te.placeholder((8, 8, 3, 3), "float32", name="w")
    with pytest.raises(UnsupportedOpError, match=r"nn.conv2d: data layout 'NCHW8c' with kernel layout 'OIHW'"):
        conv2d_layout(x, w, data_layout="NCHW8c")


def _only_strategy(lib) -> dict:
    (strategy,) = lib.summary()["strategies"].values()
    return strategy


@pytest.mark.parametrize("rows, reduction, units", [(1, 64, 24), (1, 30, 7), (1, 31, 9), (1, 1000, 10),
                                                    (1, 4096, 40), (3, 40, 24)])
def test_dense_with_bias_relu_matches_numpy(rows, reduction, units):
    xs, ws, bs = _random(rows, reduction), _random(units, reduction), _random(units)
    x = graph.var("x", shape=(rows, reduction))
    fused = tk.compile(graph.nn.relu(graph.nn.bias_add(graph.nn.dense(x, graph.const(ws)), graph.const(bs))), LLVM)
    strategy = _only_strategy(fused)
    # one row: partial sums over K (31 is prime: no vector split, the packed dense)
    if rows == 1 and reduction != 31:
        assert strategy["strategy"] == "cpu_llvm.dense_split"
        assert strategy["config"]["split"] > 1 and reduction % strategy["config"]["split"] == 0
    else:
        assert strategy["strategy"] == "cpu_llvm.dense_packed"
    np.testing.assert_allclose(fused(xs), np.maximum(xs @ ws.T + bs, 0), rtol=1e-4, atol=1e-4)
    alone = tk.compile(graph.nn.dense(graph.var("x", shape=(rows, reduction)), graph.const(ws)), LLVM)
    assert _only_strategy(alone)["strategy"] == strategy["strategy"]
    np.testing.assert_allclose(alone(xs), xs @ ws.T, rtol=1e-4, atol=1e-4)


def test_batch_one_dense_on_three_dimensional_data():
    xs, ws = _random(1, 1, 48), _random(20, 48)
    lib = tk.compile(graph.nn.dense(graph.var("x", shape=(1, 1, 48)), graph.const(ws)), LLVM)
    assert _only_strategy(lib)["strategy"] == "cpu_llvm.dense_split"
    np.testing.assert_allclose(lib(xs), xs @ ws.T, rtol=1e-4, atol=1e-5)


def _implementation(name: str):
    (found,) = [impl for impl in implementations_for(LLVM) if impl.name == name]
    return found


@pytest.mark.parametrize("name, rows", [("cpu_llvm.dense_split", 1), ("cpu_llvm.dense_packed", 3)])
def test_every_config_of_a_dense_space_matches_numpy(name, rows):
    """What a tuner may pick: each point of the grid is a valid schedule with the same result."""
    xs, ws = _random(rows, 64), _random(24, 64)
    call = graph.nn.dense(graph.var("x", shape=(rows, 64)), graph.var("w", shape=(24, 64)))
    implementation = _implementation(name)
    assert implementation.applies(call, LLVM) is True
    space = implementation.space(Workload(call=call), LLVM)
    assert len(space) >= 8
    for config in space:
        x = te.placeholder((rows, 64), "float32", name="x")
        w = te.placeholder((24, 64), "float32", name="w")
        out = implementation.compute([x, w], call.attrs, call.checked_type, LLVM, config)
        (got,) = run_schedule(implementation.schedule([out], LLVM, config), [x, w], [out], [xs, ws])
        np.testing.assert_allclose(got, xs @ ws.T, rtol=1e-4, atol=1e-4, err_msg=str(config))


def _small_cnn():
    """conv-bn-relu (stride 2), depthwise, 1x1 with a residual add, max pool, dense: NHWC region boundaries."""
    def const(*shape):
        return graph.const(RNG.uniform(-0.5, 0.5, size=shape).astype("float32"))
    x = graph.var("x", shape=(1, 3, 19, 19))
    y = graph.nn.conv2d(x, const(16, 3, 3, 3), strides=2, padding=1)
    y = graph.nn.relu(graph.nn.batch_norm(y, const(16) + graph.const(1.0), const(16), const(16),
                                          const(16) + graph.const(1.0), epsilon=1e-3))
    z = graph.nn.relu(graph.nn.conv2d(y, const(16, 1, 3, 3), padding=1, groups=16))
    z = graph.nn.relu(graph.nn.bias_add(graph.nn.conv2d(z, const(16, 16, 1, 1)), const(16)) + y)
    z = graph.nn.max_pool2d(z, pool_size=2, strides=2)
    z = graph.nn.relu(graph.nn.conv2d(z, const(24, 16, 3, 3), padding=1))
    z = graph.reshape(z, (1, 24 * 5 * 5))
    return x, graph.Module.from_expr(graph.nn.dense(z, const(10, 24 * 5 * 5)))


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
def test_small_cnn_compiled_with_a_preferred_layout_matches_the_reference(layout):
    x, mod = _small_cnn()
    data = RNG.uniform(0, 1, size=(1, 3, 19, 19)).astype("float32")
    context = PassContext(opt_level=3, config={"alter_layout": {"nn.conv2d": layout}})
    lib = tk.compile(mod, "cpu_llvm", context=context)
    transforms = sum("layout_transform" in step.ops for step in lib.plan.steps)
    assert (transforms > 0) == (layout == "NHWC")
    np.testing.assert_allclose(lib(data), graph.evaluate(mod, {"x": data}), rtol=1e-4, atol=1e-5)


def _allocations(s, tensors) -> dict[str, str]:
    """{buffer name: 'float32[n]'} of the lowered schedule's allocations."""
    import re
    text = str(tk.lower(s, tensors))
    return dict(re.findall(r"allocate (\S+): (\S+\[\d+\])", text))


@pytest.mark.parametrize("shape", [(1, 1024, 7, 7), (2, 64, 7, 7)])
def test_global_pool_computes_one_sum_per_output(shape):
    # regression: computed at a loop fusing (batch, channel, 1, 1), the sum was relaxed to every
    # channel, so each of the 1024 outputs summed all 1024 channels (22 ms in densenet121)
    op = get_op("nn.global_avg_pool2d")
    x = te.placeholder(shape, "float32", name="x")
    out = op.compute([x], op.attrs_type(), TensorType(shape[:2] + (1, 1), "float32"))
    s = schedule_for([out], LLVM)
    assert set(_allocations(s, [x, out]).values()) <= {"float32[1]"}
    data = _random(*shape)
    (got,) = run_schedule(s, [x], [out], [data], "llvm")
    np.testing.assert_allclose(got, data.mean(axis=(2, 3), keepdims=True), rtol=1e-5, atol=1e-6)


def test_softmax_rows_of_a_4d_tensor_keep_per_row_statistics():
    op = get_op("nn.softmax")
    x = te.placeholder((2, 3, 8, 100), "float32", name="x")
    out = op.compute([x], op.attrs_type(axis=-1), TensorType((2, 3, 8, 100), "float32"))
    s = schedule_for([out], LLVM)
    # per row: the max and the sum, each with its vector of partial results (4 lanes divide 100)
    assert sorted(_allocations(s, [x, out]).values()) == ["float32[1]", "float32[1]", "float32[4]", "float32[4]"]
    data = _random(2, 3, 8, 100)
    (got,) = run_schedule(s, [x], [out], [data], "llvm")
    np.testing.assert_allclose(got, op.reference(data, op.attrs_type(axis=-1)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op_name, length", [("nn.softmax", 64), ("nn.softmax", 1000), ("nn.log_softmax", 48),
                                             ("nn.layer_norm", 256), ("nn.layer_norm", 7)])
def test_row_reductions_accumulate_a_vector_of_partial_results(op_name, length):
    """softmax's max and exp-sum and layer_norm's mean and variance over a contiguous row: each step adds a
    vector of the row to a vector of partials (rfactor), which one short loop then reduces; rows whose
    length has no power-of-two divisor of 4 or more (7) keep scalar steps."""
    op = get_op(op_name)
    x = te.placeholder((3, 5, length), "float32", name="x")
    out_type = TensorType((3, 5, length), "float32")
    data = _random(3, 5, length) * 4.0
    if op_name == "nn.layer_norm":
        gamma, beta = te.placeholder((length,), "float32", name="g"), te.placeholder((length,), "float32", name="b")
        attrs = op.attrs_type(axis=-1, epsilon=1e-5)
        out = op.compute([x, gamma, beta], attrs, out_type)
        inputs, arrays = [x, gamma, beta], [data, _random(length), _random(length)]
    else:
        attrs = op.attrs_type(axis=-1)
        out = op.compute([x], attrs, out_type)
        inputs, arrays = [x], [data]
    s = schedule_for([out], LLVM)
    from tensorkiln_cpu_llvm.strategies.anchors import _partial_width
    lanes = power_of_two_lanes(length, _partial_width(length, vector_lanes(LLVM, "float32")))
    partials = [shape for shape in _allocations(s, [*inputs, out]).values() if shape != "float32[1]"]
    assert partials == ([f"float32[{lanes}]"] * 2 if lanes >= 4 else [])
    (got,) = run_schedule(s, inputs, [out], arrays, "llvm")
    np.testing.assert_allclose(got, op.reference(*arrays, attrs), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape, src, dst", [((1, 109, 109, 96), "NHWC", "NCHW"), ((1, 96, 37, 41), "NCHW", "NHWC")])
def test_large_layout_transform_without_a_lanes_divisor_matches_numpy(shape, src, dst):
    # the innermost axis (109, 41) has no vector width divisor: it stays its own loop
    op = get_op("layout_transform")
    attrs = op.attrs_type(src_layout=src, dst_layout=dst)
    x = te.placeholder(shape, "float32", name="x")
    out_shape = tuple(shape[src.index(axis)] for axis in dst)
    out = op.compute([x], attrs, TensorType(out_shape, "float32"))
    data = _random(*shape)
    (got,) = run_schedule(schedule_for([out], LLVM), [x], [out], [data], "llvm")
    np.testing.assert_array_equal(got, data.transpose([src.index(axis) for axis in dst]))


@pytest.mark.parametrize("reduction", ["mean", "max"])
@pytest.mark.parametrize("channels", [1000, 24, 7])
def test_an_nhwc_global_pool_accumulates_a_vector_of_channels(reduction, channels):
    # alter_layout turns a global pool of NHWC data into a reduction over H and W (axes 1, 2): the
    # channels, innermost in the input, are the vector that accumulates (a scalar per channel walked
    # the rows 4 KB apart); 7 channels have no vector and keep one scalar each
    op = get_op(reduction)
    attrs = op.attrs_type(axis=(1, 2), keepdims=True)
    x = te.placeholder((1, 13, 13, channels), "float32", name="x")
    out = op.compute([x], attrs, TensorType((1, 1, 1, channels), "float32"))
    s = schedule_for([out], LLVM)
    lanes = power_of_two_lanes(channels, vector_lanes(LLVM, "float32"))
    if reduction == "mean":   # a sum and its epilogue: the accumulator is allocated at the output's vector
        assert set(_allocations(s, [x, out]).values()) == {f"float32[{lanes}]"}
    lowered = str(tk.lower(s, [x, out]))
    assert ("ramp(" in lowered) == (lanes > 1)
    data = _random(1, 13, 13, channels)
    (got,) = run_schedule(s, [x], [out], [data], "llvm")
    np.testing.assert_allclose(got, op.reference(data, attrs), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("reducer", ["sum", "mean", "max", "min", "prod"])
@pytest.mark.parametrize("shape", [(256, 1024), (3, 40), (1, 4096), (6, 7)])
def test_a_reduction_over_the_last_axis_accumulates_vectors(reducer, shape):
    """A plain reduction over the contiguous last axis (a graph's ReduceSum/Mean/Max): a vector of partial
    results per output, up to four vectors wide; rows of 7 stay scalar. Against numpy, with an elementwise
    epilogue too (the reduction then computed at each output of the epilogue)."""
    x = graph.var("x", shape=shape)
    # prod: factors near 1, so 1024 of them neither overflow nor underflow
    data = _random(*shape) * (0.01 if reducer == "prod" else 4.0) + (1.0 if reducer == "prod" else 0.0)
    reduce = getattr(graph, reducer)
    expected = getattr(np, reducer)(data.astype(np.float64), axis=-1, keepdims=True)
    # summed in another order than numpy's: an error up to float32's epsilon times the sum of magnitudes
    atol = 2e-7 * np.abs(data).sum(axis=-1).max() / (shape[-1] if reducer == "mean" else 1) + 1e-6
    for expr, want in ((reduce(x, axis=-1, keepdims=True), expected),
                       (reduce(x, axis=-1, keepdims=True) * graph.const(np.float32(2.0)), 2.0 * expected)):
        lib = tk.compile(graph.Module.from_expr(expr), "llvm")
        (got,) = lib.run({"x": data})
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2 * atol)
