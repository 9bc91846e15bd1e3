"""strategies/ukernel.py: dense, matmul and 1x1 NHWC conv2d on the packed GEMM micro-kernel.

Each is computed as C[M, N] = A[M, K] @ B[K, N] with B packed per micro-kernel width
into Bp[N / nr, K, nr] (stage T_gemm_pack, at run time: B is a kernel argument), and
C's loop nest blocked and tensorized onto `sgemm_ukernel_packed` (intrinsics.py):

    parallel for i.block in M / mc:                 # each thread owns mc rows of C
      for k.outer in K / kc:                        # a kc x nr panel of Bp stays in L1
        for j.outer in N / nr:
          for i.tile in mc / mr:
            sgemm_ukernel_packed(A[mr, kc], Bp[j.outer, kc, nr], C[mr, nr], accumulate = k.outer > 0)

then the group's epilogue (bias, relu, residual add) runs over C, vectorized and parallel.

- nn.dense (x[M, K] @ w[N, K].T), nn.matmul of 2-D operands;
- nn.conv2d NHWC with an HWIO 1x1 weight, stride 1, no padding, one group: a GEMM of the
  input viewed as [H * W, C] (copied once into T_gemm_rows) with w[C, O].

The register tile comes from the CPU: nr is two vectors, mr at most 8 rows with 32
vector registers and 6 with 16 (host.cpu_facts); mr is the largest such divisor of M
(down to 4, else the implementation does not apply). mc and kc are knobs.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace
from tensorkiln.sdk.schedules import inline_injective, schedule_injective_stage

from ..host import cpu_facts
from ..ukernels import GemmTile

__all__ = ["ukernel_strategies", "gemm_applies", "UKERNEL_TAG", "tile_for_rows"]

UKERNEL_TAG = "gemm_ukernel"
PACK_TAG = "gemm_pack"
ROWS_TAG = "gemm_rows"
MIN_ROWS = 4


def _vector_lanes(target) -> int:
    return cpu_facts(target).vector_bits // 32


def max_rows(target) -> int:
    """Rows of the register tile: 8 with 32 vector registers (16 accumulators), 6 with 16 (12)."""
    return 8 if cpu_facts(target).vector_registers >= 32 else 6


def tile_for_rows(rows: int, target) -> GemmTile | None:
    """The register tile whose mr is the largest divisor of `rows` in [MIN_ROWS, max_rows], or None."""
    lanes = _vector_lanes(target)
    for mr in range(max_rows(target), MIN_ROWS - 1, -1):
        if rows % mr == 0:
            return GemmTile(mr=mr, nr=2 * lanes, lanes=lanes)
    return None


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
    if name == "nn.matmul" and len(types[0].shape) == 2 and len(types[1].shape) == 2:
        (m, k), (_, n) = types[0].shape, types[1].shape
        return int(m), int(n), int(k)
    if name == "nn.conv2d":
        attrs = call.attrs
        if (attrs.data_layout, attrs.kernel_layout) != ("NHWC", "HWIO") or attrs.groups != 1 \
                or tuple(attrs.strides) != (1, 1) or tuple(attrs.dilation) != (1, 1) or any(attrs.padding):
            return None
        b, h, w, c = (int(d) for d in types[0].shape)
        kh, kw, _, o = (int(d) for d in types[1].shape)
        if (kh, kw) != (1, 1):
            return None
        return b * h * w, o, c
    return None


def gemm_applies(call, target):
    shape = _gemm_shape(call)
    if shape is None:
        return "not a float32 2-D dense / matmul or a 1x1 stride-1 unpadded NHWC/HWIO conv2d"
    m, n, _ = shape
    if tile_for_rows(m, target) is None:
        return f"M={m} has no divisor in [{MIN_ROWS}, {max_rows(target)}] (the register tile's rows)"
    if n % (2 * _vector_lanes(target)):
        return f"N={n} is not a multiple of the register tile's {2 * _vector_lanes(target)} columns"
    return True


def _space(workload, target) -> TuningSpace:
    m, _, k = _gemm_shape(workload.call)
    mr = tile_for_rows(m, target).mr
    blocks = [c for c in range(mr, min(m, 16 * mr) + 1, mr) if m % c == 0]
    mc = max((c for c in blocks if c <= 64), default=mr)
    depths = [c for c in (32, 64, 128, 192, 256, 384, 512) if k % c == 0] or [k]
    kc = max((c for c in depths if c <= 256), default=min(depths))
    return TuningSpace((Knob("mc", tuple(blocks), mc), Knob("kc", tuple(sorted(set(depths))), kc)))


# ---- compute ---------------------------------------------------------------------------------


def _gemm(a, read_b, m: int, n: int, k_extent: int, nr: int) -> te.Tensor:
    """C = a @ B with B[k, j] = read_b(k, j), packed to Bp[n / nr, K, nr] first."""
    packed = te.compute((n // nr, k_extent, nr), lambda jo, k, ji: read_b(k, jo * nr + ji), name="T_gemm_pack",
                        tag=PACK_TAG)
    k = te.reduce_axis((0, k_extent), name="k")
    return te.compute((m, n), lambda i, j: te.sum(a[i, k] * packed[j // nr, k, j % nr], axis=k), name="T_gemm",
                      tag=UKERNEL_TAG)


def _dense_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    tile = tile_for_rows(int(data.shape[0]), target)
    n, k_extent = (int(d) for d in weight.shape)
    return _gemm(data, lambda k, j: weight[j, k], int(data.shape[0]), n, k_extent, tile.nr)


def _matmul_compute(inputs, attrs, out_type, target, config):
    lhs, rhs = inputs
    tile = tile_for_rows(int(lhs.shape[0]), target)
    k_extent, n = (int(d) for d in rhs.shape)
    return _gemm(lhs, lambda k, j: rhs[k, j], int(lhs.shape[0]), n, k_extent, tile.nr)


def _conv_compute(inputs, attrs, out_type, target, config):
    data, weight = inputs
    b, h, w, c = (int(d) for d in data.shape)
    o = int(weight.shape[3])
    tile = tile_for_rows(b * h * w, target)
    rows = te.compute((b * h * w, c), lambda p, ch: data[p // (h * w), (p // w) % h, p % w, ch],
                      name="T_gemm_rows", tag=ROWS_TAG)
    gemm = _gemm(rows, lambda k, j: weight[0, 0, k, j], b * h * w, o, c, tile.nr)
    return te.compute((b, h, w, o), lambda bb, y, x, oo: gemm[(bb * h + y) * w + x, oo], name="T_conv2d",
                      tag="injective")


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
    packed, rows = gemm.op.input_tensors[1], _find(outputs, ROWS_TAG)
    inline_injective(s, keep=[t for t in (gemm, packed, rows) if t is not None])
    m, n = (int(d) for d in gemm.shape)
    tile = tile_for_rows(m, target)
    stage = s[gemm]
    i, j = stage.op.axis
    (k_axis,) = stage.op.reduce_axis
    i_outer, i_inner = stage.split(i, factor=tile.mr)
    i_block, i_tile = stage.split(i_outer, factor=config["mc"] // tile.mr)
    j_outer, j_inner = stage.split(j, factor=tile.nr)
    k_outer, k_inner = stage.split(k_axis, factor=config["kc"])
    stage.reorder(i_block, k_outer, j_outer, i_tile, i_inner, j_inner, k_inner)
    stage.tensorize(i_inner, _packed_intrinsic(tile))
    if m // config["mc"] > 1:
        stage.parallel(i_block)
    jo, _, ji = s[packed].op.axis
    s[packed].vectorize(ji)
    s[packed].parallel(jo)
    if rows is not None:
        schedule_injective_stage(s, rows, target)
    for out in outputs:
        if out.op is not gemm.op:
            schedule_injective_stage(s, out, target)
    return s


def ukernel_strategies(target) -> list[OpImplementation]:
    """The micro-kernel implementations; they win over the generic dense and conv schedules where they apply."""
    return [
        OpImplementation("cpu_llvm.dense_ukernel", ("nn.dense",), _schedule, compute=_dense_compute, space=_space,
                         condition=gemm_applies, priority=20),
        OpImplementation("cpu_llvm.matmul_ukernel", ("nn.matmul",), _schedule, compute=_matmul_compute, space=_space,
                         condition=gemm_applies, priority=20),
        OpImplementation("cpu_llvm.conv2d_1x1_ukernel", ("nn.conv2d",), _schedule, compute=_conv_compute,
                         space=_space, condition=gemm_applies, priority=20),
    ]
