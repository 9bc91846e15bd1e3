"""strategies/ukernel.py: dense and matmul as one whole-GEMM call, 1x1 NHWC conv2d on the packed micro-kernel.

- nn.dense (x[M, K] @ w[N, K].T, M >= 4) and nn.matmul of 2-D operands (any M): C = A @ B
  (T_gemm) is tensorized at its outermost axis onto one call of a GEMM specialised for the
  shapes (sgemm.py via gemm_blocking.sgemm_intrinsic): cache blocks mc/kc/nc from the host's
  caches, a register tile from its vector registers, B packed into nr-wide slivers (or read
  in place for few rows), edge tiles masked, work items taken dynamically by the threads.
  The call reads A and B where they are; the group's epilogue (bias, relu, residual add)
  then runs over C, vectorized and parallel. Knobs: mc, kc, nc, tile, pack_b, pack_a.
- nn.dense_pack (x[M, K], a weight packed at compile time in nr-wide slivers, Wp[N / nr, K, nr]: what
  cpu_llvm_pack_dense_weights makes of a dense or matmul with a constant weight): the same call reading the
  slivers as they are, with no copy of B per call. Knobs: mc, kc, nc, tile (nr wide), pack_a.
- nn.conv2d NHWC / HWIO with stride 1 and one group, any kernel size, padding and
  dilation, without im2col: the register tile is mr output positions of one row x nr
  output channels, and for each kernel tap (ry, rx) the micro-kernel multiplies the
  mr input rows data[y + ry, x + rx .. x + rx + mr, :] (row stride C) by the tap's
  packed weights Wp[ry, rx, o / nr, C, nr], accumulating over the taps:

      parallel for (o.outer, y) fused:                 # a weight panel stays in L2 across x
        for x.outer in W / mr:
          acc[mr, nr] (local)
          for ry, rx, c.outer in C / kc:
            sgemm_ukernel_packed(data[y + ry, x + rx, c.outer], Wp[ry, rx, o.outer, c.outer], acc,
                                 accumulate = (ry, rx, c.outer) != 0)
          out[y, x.outer * mr : +mr, o.outer * nr : +nr] = epilogue(acc)    (vectorized)

  It is chosen only for 1x1 shapes where it measured not slower than the NHWC register tile
  (conv_applies); its tile: nr two vectors, mr at most 8 rows with 32 vector registers and 6
  with 16 (host.cpu_facts), the largest divisor of the output width down to 4. Knobs: rows, kc.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.graph import is_blocked_kernel_layout
from tensorkiln.ops import tags
from tensorkiln.ops.nn._accumulate import multiply_sum
from tensorkiln.ops.nn.conv2d import pad_spatial
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace
from tensorkiln.sdk.schedules import find_anchor, inline_injective, output_of, schedule_injective_stage

from ..host import cpu_facts
from ..ukernels import GemmTile
from . import gemm_blocking

__all__ = ["ukernel_strategies", "gemm_applies", "UKERNEL_TAG", "tile_for_rows"]

UKERNEL_TAG = "gemm_ukernel"
CONV_PACK_TAG = "conv_weight_pack"
MIN_ROWS = 4


def _vector_lanes(target) -> int:
    return cpu_facts(target).vector_bits // 32


def max_rows(target) -> int:
    """Rows of the register tile: 8 with 32 vector registers (16 accumulators), 6 with 16 (12)."""
    return 8 if cpu_facts(target).vector_registers >= 32 else 6


def row_candidates(rows: int, target) -> list[int]:
    """Divisors of `rows` in [MIN_ROWS, max_rows]: the register tile's possible heights."""
    return [mr for mr in range(MIN_ROWS, max_rows(target) + 1) if rows % mr == 0]


def tile_for_rows(rows: int, target, mr: int | None = None) -> GemmTile | None:
    """The register tile whose mr is `mr`, else the largest divisor of `rows` in [MIN_ROWS, max_rows]; or None."""
    lanes = _vector_lanes(target)
    candidates = row_candidates(rows, target)
    if not candidates:
        return None
    return GemmTile(mr=mr or candidates[-1], nr=2 * lanes, lanes=lanes)


def _packed_intrinsic(tile: GemmTile):
    from ..intrinsics import packed_intrinsic
    return packed_intrinsic(tile)


# ---- which calls: (M, N, K) of the GEMM each op computes ------------------------------------------


def _gemm_shape(call) -> tuple[int, int, int] | None:
    name = call.op.name
    types = [a.checked_type for a in call.args]
    if any(getattr(t, "dtype", None) != "float32" for t in types):
        return None
    if name == "nn.dense" and len(types[0].shape) == 2:
        (m, k), (n, _) = types[0].shape, types[1].shape
        return int(m), int(n), int(k)
    if name == "nn.dense_pack" and len(types[0].shape) == 2:
        (m, k) = types[0].shape
        return int(m), int(call.attrs.units), int(k)
    if name == "nn.matmul" and len(types[0].shape) == 2 and len(types[1].shape) == 2:
        (m, k), (_, n) = types[0].shape, types[1].shape
        return int(m), int(n), int(k)
    if name == "nn.matmul" and len(types[0].shape) == 3 and len(types[1].shape) == 3 \
            and int(types[0].shape[0]) == int(types[1].shape[0]):
        (_, m, k), (_, _, n) = types[0].shape, types[1].shape   # a batch of GEMMs: one call for the batch
        return int(m), int(n), int(k)
    return None


def gemm_applies(call, target):
    shape = _gemm_shape(call)
    if shape is None:
        return "not a float32 2-D dense or matmul, nor a batch of matmuls of the same batch"
    m, n, _ = shape
    if m < MIN_ROWS and call.op.name == "nn.dense":
        return f"M={m} < {MIN_ROWS} rows: a matrix-vector product (cpu_llvm.dense_split streams the weight)"
    if n < _vector_lanes(target):
        return f"N={n} is narrower than one vector of {_vector_lanes(target)} lanes"
    if call.op.name == "nn.dense_pack":
        nr = int(call.args[1].checked_type.shape[2])
        if not gemm_blocking.packed_tiles(target, m, n, nr):
            return (f"the weight is packed in slivers of {nr}, which no register tile of this target reads "
                    f"(tiles {', '.join(gemm_blocking.register_tiles(target, m, n))})")
    return True


def _batch(call) -> int:
    """G of a batch of matmuls (3-D operands), else 1."""
    shape = call.args[0].checked_type.shape
    return int(shape[0]) if len(shape) == 3 else 1


def _space(workload, target) -> TuningSpace:
    m, n, k = _gemm_shape(workload.call)
    return gemm_blocking.gemm_space(m, n, k, target, _batch(workload.call))


def _packed_space(workload, target) -> TuningSpace:
    m, n, k = _gemm_shape(workload.call)
    return gemm_blocking.gemm_space(m, n, k, target, nr=int(workload.call.args[1].checked_type.shape[2]))


# ---- compute ---------------------------------------------------------------------------------


def _gemm(a, b, transposed: bool) -> te.Tensor:
    """C = a @ b, or a @ b.T when `transposed` (b is W[N, K] of nn.dense): the whole GEMM is one
    tensorized call (sgemm.py), so C reads its operands as they are. 3-D operands (matmul only): one
    call for the whole batch, C[g] = a[g] @ b[g], its GEMMs sharing one parallel region."""
    if len(a.shape) == 3:
        batch, m, k_extent = (int(d) for d in a.shape)
        n = int(b.shape[2])
        k = te.reduce_axis((0, k_extent), name="k")
        return te.compute((batch, m, n), lambda g, i, j: te.sum(a[g, i, k] * b[g, k, j], axis=k), name="T_gemm",
                          tag=UKERNEL_TAG, attrs={"b_layout": "kn"})
    m, k_extent = (int(d) for d in a.shape)
    n = int(b.shape[0 if transposed else 1])
    k = te.reduce_axis((0, k_extent), name="k")
    if transposed:
        return te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[j, k], axis=k), name="T_gemm", tag=UKERNEL_TAG,
                          attrs={"b_layout": "nk"})
    return te.compute((m, n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="T_gemm", tag=UKERNEL_TAG,
                      attrs={"b_layout": "kn"})


def _dense_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    return _gemm(data, weight, transposed=True)


def _dense_pack_compute(inputs, attrs, out_type, target, config):
    """C = x @ W.T with W packed: C[i, j] = sum_k x[i, k] * Wp[j // nr, k, j % nr] (one sgemm call, B "packed")."""
    data, weight = inputs
    m, k_extent = (int(d) for d in data.shape)
    nr = int(weight.shape[2])
    k = te.reduce_axis((0, k_extent), name="k")
    return te.compute((m, attrs.units), lambda i, j: te.sum(data[i, k] * weight[j // nr, k, j % nr], axis=k),
                      name="T_gemm", tag=UKERNEL_TAG, attrs={"b_layout": "packed", "nr": nr})


def _matmul_compute(inputs, attrs, out_type, target, config):
    lhs, rhs = inputs
    return _gemm(lhs, rhs, transposed=False)


# ---- schedule --------------------------------------------------------------------------------


def _find(outputs, tag: str):
    stack, seen = [t.op for t in outputs], set()
    while stack:
        op = stack.pop()
        if id(op) in seen or not isinstance(op, te.ComputeOp):
            continue
        seen.add(id(op))
        if op.tag == tag:
            return op.output(0)
        stack.extend(t.op for t in op.input_tensors)
    return None


def _schedule(outputs, target, config):
    s = te.create_schedule([t.op for t in outputs])
    gemm = _find(outputs, UKERNEL_TAG)
    # the call reads its operands from memory: producers fused before the GEMM stay stages
    producers = [t for t in gemm.op.input_tensors if isinstance(t.op, te.ComputeOp)]
    inline_injective(s, keep=[gemm, *producers])
    for producer in producers:
        schedule_injective_stage(s, producer, target)
    rows, columns = (int(d) for d in gemm.shape[-2:])
    batch = int(gemm.shape[0]) if len(gemm.shape) == 3 else 1
    plan = gemm_blocking.gemm_plan(rows, columns, int(gemm.op.reduce_axis[0].dom.extent), target, config,
                                   gemm.op.attrs["b_layout"], batch, gemm.op.attrs.get("nr"))
    stage = s[gemm]
    # a batch is one call too: its GEMMs share one parallel region (sgemm.py)
    stage.tensorize(stage.op.axis[0], gemm_blocking.sgemm_intrinsic(plan))
    for out in outputs:
        if out.op is not gemm.op:
            schedule_injective_stage(s, out, target)
    return s


# ---- conv2d NHWC on the micro-kernel ------------------------------------------------------------


def _conv_facts(call):
    """(out_width, in_channels, out_channels) of an NHWC / HWIO conv call."""
    out_width = int(call.checked_type.shape[2])
    kh, kw, channels, out_channels = (int(d) for d in call.args[1].checked_type.shape)
    return out_width, channels, out_channels


def conv_applies(call, target):
    attrs = call.attrs
    if attrs.data_layout == "NHWC" and is_blocked_kernel_layout(attrs.kernel_layout):
        return (f"weight packed {attrs.kernel_layout} for the NHWC register tile (cpu_llvm_pack_conv_weights packs "
                "only convs this kernel does not run)")
    if (attrs.data_layout, attrs.kernel_layout) != ("NHWC", "HWIO"):
        return f"layout {attrs.data_layout}/{attrs.kernel_layout}, not NHWC/HWIO"
    if attrs.groups != 1 or tuple(attrs.strides) != (1, 1):
        return "grouped or strided: input rows of a tile are not C apart"
    if any(a.checked_type.dtype != "float32" for a in call.args):
        return "not float32"
    kh, kw = (int(d) for d in call.args[1].checked_type.shape[:2])
    if (kh, kw) != (1, 1):
        # correct for any kernel, but measured slower than the NHWC register-tile schedule for 3x3
        # (0.5-0.8x on resnet50's 3x3 shapes, 1 thread, AVX-512): each tap reloads the C tile
        # and the packed weights are copied on every call
        return f"{kh}x{kw} kernel: the NHWC register tile (cpu_llvm.conv2d_nhwc) is faster"
    out_width, channels, out_channels = _conv_facts(call)
    nr = 2 * _vector_lanes(target)
    if out_channels % nr:
        return f"{out_channels} output channels are not a multiple of the register tile's {nr}"
    if not row_candidates(out_width, target):
        return f"output width {out_width} has no divisor in [{MIN_ROWS}, {max_rows(target)}] (the tile's rows)"
    if out_width < SLOWER_BELOW_WIDTH or not SLOWER_BELOW_CHANNELS <= channels <= SLOWER_ABOVE_CHANNELS \
            or out_channels > SLOWER_ABOVE_OUTPUTS:
        return (f"{out_width} wide, {channels} -> {out_channels} channels: the NHWC register tile "
                f"(cpu_llvm.conv2d_nhwc) is as fast or faster")
    return True


# Where the 1x1 micro-kernel beats the NHWC register-tile schedule (1 thread, bias + relu fused,
# inception_v2's 1x1 shapes, AVX-512): 28x28x192->64 1.05-1.07x, 28x28x256->32 0.99-1.34x,
# 28x28x320->64 1.01x; slower at 56x56x64->64 (0.99x), every 14x14x576 (0.90-0.94x) and
# 7x7x1024 (0.80-0.90x) shape: each call repacks the weights and small images give few row tiles.
# Since the micro-kernel prefetches the next positions (ukernels.next_tile_rows), against onnxruntime in
# the same process (Sapphire Rapids KVM guest, 1 thread): 56x56x256->128 1.21-1.22x (the NHWC tile
# 1.27-1.44x), 28x28x512->128 1.19-1.20x (1.19-1.22x); over 1024 channels it loses (14x14x1024->256 1.75x against 1.06x,
# 7x7x2048->512 3.1x against 1.23x: the tile's positions, 4 KB or more apart, share one L1 set), and for
# wide outputs (56x56x64->256 1.35x against 1.17x, 28x28x128->512 1.22x against 1.14x).
SLOWER_BELOW_WIDTH = 28
SLOWER_BELOW_CHANNELS = 128
SLOWER_ABOVE_CHANNELS = 512
SLOWER_ABOVE_OUTPUTS = 128


def _conv_space(workload, target) -> TuningSpace:
    out_width, channels, _ = _conv_facts(workload.call)
    rows = row_candidates(out_width, target)
    depths = [c for c in (32, 64, 128, 256, 512) if channels % c == 0 and c < channels] + [channels]
    kc = max(c for c in depths if c <= 512) if any(c <= 512 for c in depths) else channels
    return TuningSpace((Knob("rows", tuple(rows), rows[-1]), Knob("kc", tuple(depths), kc)))


def _conv_compute(inputs, attrs, out_type, target, config):
    """conv2d_nhwc reading the weight packed per register tile: Wp[ry, rx, o / nr, c, nr] (tag conv_weight_pack)."""
    data, weight = inputs
    kh, kw, channels, out_channels = (int(d) for d in weight.shape)
    nr = 2 * _vector_lanes(target)
    padded = pad_spatial(data, tuple(attrs.padding), "NHWC")
    packed = te.compute((kh, kw, out_channels // nr, channels, nr),
                        lambda ry_, rx_, jo, c, ji: weight[ry_, rx_, c, jo * nr + ji], name="T_conv_pack",
                        tag=CONV_PACK_TAG)
    (dil_h, dil_w) = attrs.dilation
    batch, _, _, _ = (int(d) for d in data.shape)
    _, out_h, out_w, _ = (int(d) for d in out_type.shape)
    ry = te.reduce_axis((0, kh), name="ry")
    rx = te.reduce_axis((0, kw), name="rx")
    rc = te.reduce_axis((0, channels), name="rc")

    def body(b, y, x, o):
        row = y + (ry if dil_h == 1 else ry * dil_h)
        column = x + (rx if dil_w == 1 else rx * dil_w)
        return multiply_sum(padded[b, row, column, rc] * packed[ry, rx, o // nr, rc, o % nr], axis=[ry, rx, rc])
    return te.compute((batch, out_h, out_w, out_channels), body, name="T_conv2d", tag=tags.CONV2D_NHWC,
                      attrs={"groups": 1})


def _schedule_conv(outputs, target, config):
    s = te.create_schedule([t.op for t in outputs])
    anchor = find_anchor(outputs)
    packed = _find(outputs, CONV_PACK_TAG)
    keep = [anchor, packed, *(t for t in anchor.op.input_tensors if t.op.tag == "injective.pad")]
    inline_injective(s, keep=keep)
    for producer in keep[1:]:
        schedule_injective_stage(s, producer, target)
    output = output_of(anchor, outputs)
    if anchor.op is output.op or s[anchor].is_output:
        acc = s.cache_write(anchor, "local")
    else:
        acc = anchor
    tile = tile_for_rows(int(output.shape[2]), target, config["rows"])
    out = s[output]
    batch, y, x, o = out.op.axis
    x_outer, x_inner = out.split(x, factor=tile.mr)
    o_outer, o_inner = out.split(o, factor=tile.nr)
    out.reorder(batch, o_outer, y, x_outer, x_inner, o_inner)
    out.parallel(out.fuse(o_outer, y))
    out.vectorize(o_inner)
    s[acc].compute_at(out, x_outer)
    stage = s[acc]
    _, _, x_acc, o_acc = stage.op.axis
    ry, rx, rc = stage.op.reduce_axis
    rc_outer, rc_inner = stage.split(rc, factor=config["kc"])
    # split by the tile although compute_at leaves exactly one tile: tensorize checks the nest
    # against the stage's whole extents when it is declared
    x_tile, x_rows = stage.split(x_acc, factor=tile.mr)
    o_tile, o_columns = stage.split(o_acc, factor=tile.nr)
    stage.reorder(*stage.op.axis[:2], ry, rx, rc_outer, x_tile, o_tile, x_rows, o_columns, rc_inner)
    stage.tensorize(x_rows, _packed_intrinsic(tile))
    for other in outputs:
        if other.op is not output.op:
            schedule_injective_stage(s, other, target)
    return s


def ukernel_strategies(target) -> list[OpImplementation]:
    """The micro-kernel implementations; they win over the generic dense and conv schedules where they apply."""
    return [
        OpImplementation("cpu_llvm.dense_ukernel", ("nn.dense",), _schedule, compute=_dense_compute, space=_space,
                         condition=gemm_applies, priority=20),
        OpImplementation("cpu_llvm.matmul_ukernel", ("nn.matmul",), _schedule, compute=_matmul_compute, space=_space,
                         condition=gemm_applies, priority=20),
        OpImplementation("cpu_llvm.dense_pack_ukernel", ("nn.dense_pack",), _schedule, compute=_dense_pack_compute,
                         space=_packed_space, condition=gemm_applies, priority=20),
        OpImplementation("cpu_llvm.conv2d_nhwc_ukernel", ("nn.conv2d",), _schedule_conv, compute=_conv_compute,
                         space=_conv_space, condition=conv_applies, priority=20),
    ]
