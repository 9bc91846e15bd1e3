"""int8_gemm.py: a whole 8-bit conv2d (NHWC / HWIO) or dense as one LLVM function: int8 GEMM, int32 accumulation.

`int8_conv_source(plan)` defines (the intrinsic argument convention, tensorkiln.sdk.intrinsic_impl)::

    conv:  void SYMBOL(i8* X, i8* W, i32* Y, i64 x0, x1, x2, i64 w0, w1, w2, i64 y0, y1, y2, i32 accumulate)
           Y[b, oy, ox, n] (+)= sum_{ry, rx, c} X[b, oy*sh + ry*dh, ox*sw + rx*dw, c] * W[ry, rx, c, n]
           (X already padded: the strategy pads in a stage before the call)
    dense: void SYMBOL(i8* X, i8* W, i32* Y, i64 x0, i64 w0, i64 y0, i32 accumulate)
           Y[m, n] (+)= sum_k X[m, k] * W[n, k]

X is int8 or uint8, W int8; every stride is read from the arguments, so the function is
correct for any tile of any buffer the lowering hands it. The GEMM is the conv's
implicit im2col: row m of A is output pixel m = (b, oy, ox), column k = (ry, rx, c)
of it is read in place from X (no im2col buffer), column n of B is output channel n.

The ISA (`Int8Isa`, chosen from the target's features, never from the build host):

- avx512vnni: vpdpbusd zmm (llvm.x86.avx512.vpdpbusd.512), u8 x s8 products of 4 bytes
  summed into each int32 lane; 16 lanes, 8 x 2 register tile (16 of 32 zmm accumulate);
- avxvnni: the same on ymm ({vex} vpdpbusd, llvm.x86.avx512.vpdpbusd.256), 6 x 2 tile;
- avx2: vpmaddwd on int16 (llvm.x86.avx2.pmadd.wd): both operands widened to int16, so
  the products are exact (vpmaddubsw would saturate its int16 pair sums for full-range
  8-bit operands), 2 bytes per int32 lane, 6 x 2 tile.

(Where N is a multiple of one vector but not of two, the strategy asks for a one-vector tile
of more rows instead: strategies/int8_gemm._tile_for.)

vpdpbusd multiplies unsigned by signed bytes. Signed data is made unsigned by flipping
its top bit (x + 128) when the A bytes are broadcast, and the excess 128 * sum_k W[k, n]
is subtracted per column when the tile is stored (the column sums come out of packing).

B is packed per call, in parallel, into nr-column slivers in the VNNI layout: for each
group of g reduction steps (g = 4 bytes; g = 2 int16 on avx2) the nr columns' g values are
adjacent, so one vector load gives every lane its g weights:

    Bp[sliver][tap (ry, rx)][c / g][nr][g]       zero past C (per tap) and past N

The work is split into items (a block of row tiles x a block of slivers) taken
dynamically by the threads, as in sgemm.py; the register tile keeps mr x nr int32
accumulators over the whole reduction. Edge tiles read their missing rows from the last
valid one and store under a lane mask; a reduction group past C (C % g != 0) reads its
valid bytes one at a time (B is zero there). Requantization is not here: the fused
group's epilogue (cast, scale, bias, relu, round, clip, cast: the graph's own ops, so
the numerics are the reference's) runs over Y after the call, vectorized and parallel.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from .cgutils import (I1, I8, I32, I64, PTR, VOID, alloca_in_entry, count_done, declare, for_range, reused_heap_block,
                      run_parallel, wait_until_done)
from .sgemm import MIN_FLOPS_PER_THREAD, NUM_THREADS_GLOBAL, _dynamic_loop, _minimum

__all__ = ["Int8Isa", "ISAS", "Int8ConvPlan", "int8_conv_source"]

I16 = ir.IntType(16)
I32_PTR = I32.as_pointer()
ALIGNMENT = 64


@dataclass(frozen=True)
class Int8Isa:
    """How one int32 lane accumulates: `group` bytes of A x B per instruction (see the module docstring)."""

    name: str
    vector_bits: int
    mr: int            # register tile rows
    vectors: int       # register tile columns, in vectors of vector_bits / 32 int32 lanes

    @property
    def lanes(self) -> int:
        return self.vector_bits // 32

    @property
    def group(self) -> int:
        return 2 if self.name == "avx2" else 4

    @property
    def nr(self) -> int:
        return self.lanes * self.vectors


ISAS = {
    "avx512vnni": Int8Isa("avx512vnni", 512, mr=8, vectors=2),
    "avxvnni": Int8Isa("avxvnni", 256, mr=6, vectors=2),
    "avx2": Int8Isa("avx2", 256, mr=6, vectors=2),
}


@dataclass(frozen=True)
class Int8ConvPlan:
    """One specialised conv (or dense, `kind` "dense": batch = M rows, 1x1 everything) and its work split."""

    isa: Int8Isa
    signed: bool                   # X is int8 (else uint8)
    kind: str                      # "conv" (X NHWC, W HWIO) or "dense" (X[M, K], W[N, K])
    batch: int
    out_h: int
    out_w: int
    channels: int                  # C (dense: K)
    out_channels: int              # N
    kernel: tuple[int, int] = (1, 1)
    strides: tuple[int, int] = (1, 1)
    dilation: tuple[int, int] = (1, 1)
    tiles_per_item: int = 8
    slivers_per_item: int = 4
    whole_groups: bool = False     # X has readable (zero) channels up to a multiple of the group past C

    def __post_init__(self) -> None:
        if self.kind not in ("conv", "dense"):
            raise ValueError(f"Int8ConvPlan kind must be 'conv' or 'dense', got {self.kind!r}")
        if min(self.batch, self.out_h, self.out_w, self.channels, self.out_channels, *self.kernel, *self.strides,
               *self.dilation, self.tiles_per_item, self.slivers_per_item) <= 0:
            raise ValueError(f"int8 conv plan: every extent, stride and block must be positive: {self}")
        if self.kind == "dense" and (self.out_h, self.out_w, self.kernel) != (1, 1, (1, 1)):
            raise ValueError("a dense plan has out_h = out_w = 1 and a 1x1 kernel (M is the batch)")

    @property
    def m(self) -> int:
        return self.batch * self.out_h * self.out_w

    @property
    def taps(self) -> int:
        return self.kernel[0] * self.kernel[1]

    @property
    def groups_per_tap(self) -> int:
        return -(-self.channels // self.isa.group)

    @property
    def k(self) -> int:
        return self.taps * self.channels

    @property
    def slivers(self) -> int:
        return -(-self.out_channels // self.isa.nr)

    @property
    def sliver_bytes(self) -> int:
        return self.taps * self.groups_per_tap * self.isa.nr * 4

    @property
    def row_tiles(self) -> int:
        return -(-self.m // self.isa.mr)

    @property
    def row_blocks(self) -> int:
        return -(-self.row_tiles // self.tiles_per_item)

    @property
    def column_blocks(self) -> int:
        return -(-self.slivers // self.slivers_per_item)

    @property
    def items(self) -> int:
        return self.row_blocks * self.column_blocks

    @property
    def corrects(self) -> bool:
        """vpdpbusd on signed data: the +128 shift's column-sum correction is applied."""
        return self.signed and self.isa.group == 4

    @property
    def symbol(self) -> str:
        kh, kw = self.kernel
        return (f"tk_i8{self.kind}_{self.isa.name}_t{self.isa.mr}x{self.isa.nr}_{'s' if self.signed else 'u'}_"
                f"{self.batch}x{self.out_h}x"
                f"{self.out_w}x{self.channels}_{self.out_channels}_k{kh}x{kw}_s{self.strides[0]}x{self.strides[1]}"
                f"_d{self.dilation[0]}x{self.dilation[1]}_b{self.tiles_per_item}x{self.slivers_per_item}"
                f"{'_w' if self.whole_groups else ''}")


# ---- small helpers -----------------------------------------------------------------------------


def _ivec(lanes: int, bits: int = 32) -> ir.VectorType:
    return ir.VectorType(ir.IntType(bits), lanes)


def _splat(builder: ir.IRBuilder, value: ir.Value, lanes: int) -> ir.Value:
    vector_type = ir.VectorType(value.type, lanes)
    single = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, I32(0))
    return builder.shuffle_vector(single, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def _lane_mask(builder: ir.IRBuilder, lanes: int, first: ir.Value, limit: ir.Value) -> ir.Value:
    """<lanes x i1>: lane l set when first + l < limit."""
    ids = ir.Constant(_ivec(lanes, 64), [I64(i) for i in range(lanes)])
    return builder.icmp_signed("<", builder.add(_splat(builder, first, lanes), ids), _splat(builder, limit, lanes))


def _masked_store(module: ir.Module, lanes: int) -> ir.Function:
    vector = _ivec(lanes)
    return declare(module, f"llvm.masked.store.v{lanes}i32.p0", VOID, [vector, vector.as_pointer(), I32,
                                                                        ir.VectorType(I1, lanes)])


def _masked_load(module: ir.Module, lanes: int) -> ir.Function:
    vector = _ivec(lanes)
    return declare(module, f"llvm.masked.load.v{lanes}i32.p0", vector, [vector.as_pointer(), I32,
                                                                        ir.VectorType(I1, lanes), vector])


def _internal(module: ir.Module, name: str, arguments: list) -> tuple[ir.Function, ir.IRBuilder]:
    function = ir.Function(module, ir.FunctionType(VOID, arguments), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


# ---- the multiply-accumulate of one reduction group --------------------------------------------


def _dot_step(builder: ir.IRBuilder, module: ir.Module, plan: Int8ConvPlan, accumulator: ir.Value,
              a_group: ir.Value, b_vector: ir.Value) -> ir.Value:
    """accumulator + (per int32 lane) the dot product of the broadcast A group with the lane's B group.

    `a_group` is the i32 holding the group (4 bytes, unsigned; or 2 int16), `b_vector` the
    packed B vector as <lanes x i32>."""
    isa, lanes = plan.isa, plan.isa.lanes
    broadcast = _splat(builder, a_group, lanes)
    if isa.group == 4:
        bytes_type = _ivec(4 * lanes, 8)
        intrinsic = declare(module, f"llvm.x86.avx512.vpdpbusd.{isa.vector_bits}", _ivec(lanes),
                            [_ivec(lanes), bytes_type, bytes_type])
        return builder.call(intrinsic, [accumulator, builder.bitcast(broadcast, bytes_type),
                                        builder.bitcast(b_vector, bytes_type)])
    words = _ivec(2 * lanes, 16)
    intrinsic = declare(module, "llvm.x86.avx2.pmadd.wd", _ivec(lanes), [words, words])
    product = builder.call(intrinsic, [builder.bitcast(broadcast, words), builder.bitcast(b_vector, words)])
    return builder.add(accumulator, product)


def _a_group(builder: ir.IRBuilder, plan: Int8ConvPlan, pointer: ir.Value, valid: int) -> ir.Value:
    """The i32 a lane multiplies: `valid` (<= group) bytes at `pointer`, as vpdpbusd's unsigned bytes
    (signed data shifted by +128) or as sign/zero-extended int16 pairs (avx2); missing bytes are 0."""
    group = plan.isa.group
    if valid == group == 4:
        value = builder.load(builder.bitcast(pointer, I32_PTR), align=1)
    elif valid == group == 2:   # one 2-byte load, widened as a pair
        pair = builder.load(builder.bitcast(pointer, ir.VectorType(I8, 2).as_pointer()), align=1)
        wide = (builder.sext if plan.signed else builder.zext)(pair, ir.VectorType(I16, 2))
        return builder.bitcast(wide, I32)
    else:
        parts = ir.Constant(ir.VectorType(I8, group), None)
        for index in range(valid):
            byte = builder.load(builder.gep(pointer, [I64(index)]), align=1)
            parts = builder.insert_element(parts, byte, I32(index))
        if group == 4:
            value = builder.bitcast(parts, I32)
        else:
            widen = builder.sext if plan.signed else builder.zext
            wide = widen(parts, ir.VectorType(I16, 2))
            if valid < group:   # the padding byte stays 0 whatever the extension
                wide = builder.insert_element(wide, ir.Constant(I16, 0), I32(1))
            return builder.bitcast(wide, I32)
    if group == 2:
        wide = (builder.sext if plan.signed else builder.zext)(builder.bitcast(value, ir.VectorType(I8, 2)),
                                                              ir.VectorType(I16, 2))
        return builder.bitcast(wide, I32)
    if plan.corrects:
        mask = 0x80808080 if valid == 4 else int.from_bytes(bytes([0x80] * valid + [0] * (4 - valid)), "little")
        value = builder.xor(value, ir.Constant(I32, mask))
    return value


# ---- B packing -----------------------------------------------------------------------------------


def _define_pack(module: ir.Module, plan: Int8ConvPlan, name: str) -> ir.Function:
    """pack(W, w0, w1, w2, Bp, sums, s): sliver s of B in the VNNI layout, and (signed vnni) 128 x its column sums.

    W[ry, rx, c, n] (conv, strides w0..w2) or W[n, k] (dense, stride w0). A full sliver of a
    conv whose C is a multiple of the group is interleaved a vector at a time (the copy runs
    at memory speed: it is redone on every call); the rest one value at a time.
    """
    isa = plan.isa
    function, builder = _internal(module, name, [PTR, I64, I64, I64, PTR, I32_PTR, I64])
    w, w0, w1, w2, bp, sums, sliver = function.args
    group, nr = isa.group, isa.nr
    element = I8 if group == 4 else I16
    out = builder.bitcast(builder.gep(bp, [builder.mul(sliver, I64(plan.sliver_bytes))]), element.as_pointer())
    column0 = builder.mul(sliver, I64(nr))
    if plan.kind == "conv" and plan.channels % group == 0 and plan.out_channels >= nr:
        vectorizable = builder.icmp_signed("<", sliver, I64(plan.out_channels // nr))
        with builder.if_else(vectorizable, likely=True) as (fast, slow):
            with fast:
                _pack_vectors(builder, plan, w, (w0, w1, w2), out, sums, column0)
            with slow:
                _pack_values(builder, plan, w, (w0, w1, w2), out, sums, column0)
    elif plan.kind == "dense" and plan.channels % group == 0 and plan.out_channels >= nr:
        vectorizable = builder.icmp_signed("<", sliver, I64(plan.out_channels // nr))
        with builder.if_else(vectorizable, likely=True) as (fast, slow):
            with fast:
                _pack_rows(builder, plan, w, w0, out, sums, column0)
            with slow:
                _pack_values(builder, plan, w, (w0, w1, w2), out, sums, column0)
    else:
        _pack_values(builder, plan, w, (w0, w1, w2), out, sums, column0)
    builder.ret_void()
    return function


def _pack_rows(builder: ir.IRBuilder, plan: Int8ConvPlan, w, w0, out, sums, column0) -> None:
    """A full sliver of a dense weight W[N, K]: a group is `group` adjacent bytes of row n, copied as one i32."""
    group, nr = plan.isa.group, plan.isa.nr
    out32 = builder.bitcast(out, I32_PTR)
    group_type = ir.VectorType(I8, group)
    with for_range(builder, I64(0), I64(nr), name="j") as j:
        n = builder.add(column0, j)
        row = builder.gep(w, [builder.mul(n, w0)])
        total = alloca_in_entry(builder, _ivec(group), name="row_sum")
        builder.store(ir.Constant(_ivec(group), None), total)
        with for_range(builder, I64(0), I64(plan.groups_per_tap), name="q") as q:
            values = builder.load(builder.bitcast(builder.gep(row, [builder.mul(q, I64(group))]),
                                                  group_type.as_pointer()), align=1)
            builder.store(builder.add(builder.load(total), builder.sext(values, _ivec(group))), total)
            unit = builder.bitcast(values if group == 4 else builder.sext(values, ir.VectorType(I16, 2)), I32)
            builder.store(unit, builder.gep(out32, [builder.add(builder.mul(q, I64(nr)), j)]), align=4)
        if plan.corrects:
            vector = builder.load(total)
            row_sum = builder.extract_element(vector, I32(0))
            for index in range(1, group):
                row_sum = builder.add(row_sum, builder.extract_element(vector, I32(index)))
            builder.store(builder.mul(row_sum, I32(128)), builder.gep(sums, [n]))


def _pack_vectors(builder: ir.IRBuilder, plan: Int8ConvPlan, w, strides, out, sums, column0) -> None:
    """A full sliver of HWIO weights: per group, `group` rows of nr bytes interleaved by one shuffle."""
    isa = plan.isa
    group, nr = isa.group, isa.nr
    w0, w1, w2 = strides
    row_type = ir.VectorType(I8, nr)
    element = I8 if group == 4 else I16
    wide_type = ir.VectorType(element, nr)
    total = alloca_in_entry(builder, _ivec(nr), name="sums")
    builder.store(ir.Constant(_ivec(nr), None), total)
    with for_range(builder, I64(0), I64(plan.kernel[0]), name="ry") as ry:
        with for_range(builder, I64(0), I64(plan.kernel[1]), name="rx") as rx:
            tap = builder.add(builder.mul(ry, I64(plan.kernel[1])), rx)
            base = builder.add(builder.add(builder.mul(ry, w0), builder.mul(rx, w1)), column0)
            with for_range(builder, I64(0), I64(plan.groups_per_tap), name="q") as q:
                rows = []
                for e in range(group):
                    c = builder.add(builder.mul(q, I64(group)), I64(e))
                    pointer = builder.bitcast(builder.gep(w, [builder.add(base, builder.mul(c, w2))]),
                                              row_type.as_pointer())
                    rows.append(builder.load(pointer, align=1))
                sum_vector = builder.load(total)
                for row in rows:
                    sum_vector = builder.add(sum_vector, builder.sext(row, _ivec(nr)))
                builder.store(sum_vector, total)
                if element is I16:
                    rows = [builder.sext(row, wide_type) for row in rows]
                # concatenate pairs, then one shuffle puts lane j's `group` values side by side
                pairs = [builder.shuffle_vector(rows[i], rows[i + 1], ir.Constant(ir.VectorType(I32, 2 * nr),
                                                                                    list(range(2 * nr))))
                         for i in range(0, group, 2)]
                if group == 4:
                    mask = [(e // 2) * 2 * nr + (e % 2) * nr + j for j in range(nr) for e in range(4)]
                    packed = builder.shuffle_vector(pairs[0], pairs[1], ir.Constant(ir.VectorType(I32, 4 * nr), mask))
                else:
                    mask = [e * nr + j for j in range(nr) for e in range(2)]
                    packed = builder.shuffle_vector(pairs[0], ir.Constant(pairs[0].type, ir.Undefined),
                                                    ir.Constant(ir.VectorType(I32, 2 * nr), mask))
                index = builder.mul(builder.add(builder.mul(tap, I64(plan.groups_per_tap)), q), I64(nr * group))
                builder.store(packed, builder.bitcast(builder.gep(out, [index]), packed.type.as_pointer()), align=1)
    if plan.corrects:
        scaled = builder.mul(builder.load(total), ir.Constant(_ivec(nr), [I32(128)] * nr))
        builder.store(scaled, builder.bitcast(builder.gep(sums, [column0]), _ivec(nr).as_pointer()), align=4)


def _pack_values(builder: ir.IRBuilder, plan: Int8ConvPlan, w, strides, out, sums, column0) -> None:
    """Any sliver, one value at a time: zero past C (per tap) and past N."""
    isa = plan.isa
    group, nr = isa.group, isa.nr
    element = I8 if group == 4 else I16
    w0, w1, w2 = strides
    with for_range(builder, I64(0), I64(nr), name="j") as j:
        n = builder.add(column0, j)
        valid_n = builder.icmp_signed("<", n, I64(plan.out_channels))
        n_read = _minimum(builder, n, I64(plan.out_channels - 1))
        total = alloca_in_entry(builder, I32, name="sum")
        builder.store(I32(0), total)
        with for_range(builder, I64(0), I64(plan.kernel[0]), name="ry") as ry:
            with for_range(builder, I64(0), I64(plan.kernel[1]), name="rx") as rx:
                tap = builder.add(builder.mul(ry, I64(plan.kernel[1])), rx)
                with for_range(builder, I64(0), I64(plan.groups_per_tap * group), name="c") as c:
                    valid = builder.and_(valid_n, builder.icmp_signed("<", c, I64(plan.channels)))
                    c_read = _minimum(builder, c, I64(plan.channels - 1))
                    if plan.kind == "conv":
                        offset = builder.add(builder.add(builder.mul(ry, w0), builder.mul(rx, w1)),
                                             builder.add(builder.mul(c_read, w2), n_read))
                    else:
                        offset = builder.add(builder.mul(n_read, w0), c_read)
                    value = builder.load(builder.gep(w, [offset]), align=1)
                    value = builder.select(valid, value, ir.Constant(I8, 0))
                    wide = builder.sext(value, I32)
                    builder.store(builder.add(builder.load(total), wide), total)
                    # Bp[tap][c / g][j][c % g]
                    index = builder.add(builder.mul(builder.add(builder.mul(tap, I64(plan.groups_per_tap)),
                                                                builder.udiv(c, I64(group))), I64(nr * group)),
                                        builder.add(builder.mul(j, I64(group)), builder.urem(c, I64(group))))
                    stored = value if element is I8 else builder.sext(value, I16)
                    builder.store(stored, builder.gep(out, [index]), align=1)
        if plan.corrects:
            builder.store(builder.mul(builder.load(total), I32(128)), builder.gep(sums, [n]))


# ---- the register tile ---------------------------------------------------------------------------


def _row_offsets(builder: ir.IRBuilder, plan: Int8ConvPlan, m: ir.Value, strides: list[ir.Value]) -> ir.Value:
    """Offset of output pixel m's origin (b, oy * sh, ox * sw) in X, or of row m of Y, given that buffer's strides."""
    if plan.kind == "dense":
        return builder.mul(m, strides[0])
    ox = builder.urem(m, I64(plan.out_w))
    rest = builder.udiv(m, I64(plan.out_w))
    oy = builder.urem(rest, I64(plan.out_h))
    b = builder.udiv(rest, I64(plan.out_h))
    return builder.add(builder.mul(b, strides[0]),
                       builder.add(builder.mul(oy, strides[1]), builder.mul(ox, strides[2])))


def _scaled_offsets(builder: ir.IRBuilder, plan: Int8ConvPlan, m: ir.Value, strides: list[ir.Value]) -> ir.Value:
    """Offset in X of output pixel m's receptive-field origin."""
    if plan.kind == "dense":
        return builder.mul(m, strides[0])
    sh, sw = plan.strides
    scaled = [strides[0], builder.mul(strides[1], I64(sh)), builder.mul(strides[2], I64(sw))]
    return _row_offsets(builder, plan, m, scaled)


def _define_micro(module: ir.Module, plan: Int8ConvPlan, name: str) -> ir.Function:
    """micro(X, x0, x1, x2, sliver, sums, Y, y0, y1, y2, m0, n0, accumulate): Y[m0 : +mr, n0 : +nr] (+)= the tile."""
    isa = plan.isa
    lanes, mr, vectors, group = isa.lanes, isa.mr, isa.vectors, isa.group
    function, builder = _internal(module, name, [PTR, I64, I64, I64, PTR, I32_PTR, I32_PTR, I64, I64, I64, I64, I64,
                                                 I32])
    x, x0, x1, x2, sliver, sums, y, y0, y1, y2, m0, n0, accumulate = function.args
    for argument in (x, sliver, y):
        argument.add_attribute("noalias")
    x_strides, y_strides = [x0, x1, x2], [y0, y1, y2]
    rows = _minimum(builder, I64(mr), builder.sub(I64(plan.m), m0))
    last = builder.sub(rows, I64(1))
    # a tile with fewer rows reads its missing rows from the last valid one (never out of bounds)
    a_rows = [builder.gep(x, [_scaled_offsets(builder, plan, builder.add(m0, _minimum(builder, I64(r), last)),
                                              x_strides)]) for r in range(mr)]
    vector_type = _ivec(lanes)
    slots = alloca_in_entry(builder, vector_type, count=mr * vectors, name="acc", align=ALIGNMENT)
    accumulators = [builder.gep(slots, [I64(i)]) for i in range(mr * vectors)]
    for slot in accumulators:
        builder.store(ir.Constant(vector_type, None), slot)
    b_groups = builder.bitcast(sliver, vector_type.as_pointer())   # one <lanes x i32> per (group, vector)
    full_groups = plan.channels // group
    tail = plan.channels % group
    dh, dw = plan.dilation

    def step(tap_offset: ir.Value, group_index: ir.Value, c: ir.Value, valid: int) -> None:
        b_values = [builder.load(builder.gep(b_groups, [builder.add(builder.mul(group_index, I64(vectors)), I64(v))]),
                                 align=4 * lanes) for v in range(vectors)]
        offset = builder.add(tap_offset, c)
        for r in range(mr):
            a_group = _a_group(builder, plan, builder.gep(a_rows[r], [offset]), valid)
            for v in range(vectors):
                slot = accumulators[r * vectors + v]
                builder.store(_dot_step(builder, module, plan, builder.load(slot), a_group, b_values[v]), slot)

    with for_range(builder, I64(0), I64(plan.kernel[0]), name="ry") as ry:
        with for_range(builder, I64(0), I64(plan.kernel[1]), name="rx") as rx:
            tap = builder.add(builder.mul(ry, I64(plan.kernel[1])), rx)
            tap_offset = I64(0) if plan.kind == "dense" else builder.add(builder.mul(ry, builder.mul(x1, I64(dh))),
                                                                         builder.mul(rx, builder.mul(x2, I64(dw))))
            first_group = builder.mul(tap, I64(plan.groups_per_tap))
            if full_groups:
                with for_range(builder, I64(0), I64(full_groups), name="q") as q:
                    step(tap_offset, builder.add(first_group, q), builder.mul(q, I64(group)), group)
            if tail:   # the group's missing bytes meet B's zeros: read them when X has them
                step(tap_offset, builder.add(first_group, I64(full_groups)), I64(full_groups * group),
                     group if plan.whole_groups else tail)

    columns = _minimum(builder, I64(isa.nr), builder.sub(I64(plan.out_channels), n0))
    full = builder.and_(builder.icmp_signed("==", rows, I64(mr)), builder.icmp_signed("==", columns, I64(isa.nr)))
    accumulating = builder.icmp_signed("!=", accumulate, I32(0))
    corrections = [builder.load(builder.bitcast(builder.gep(sums, [builder.add(n0, I64(v * lanes))]),
                                                vector_type.as_pointer()), align=4) if plan.corrects else None
                   for v in range(vectors)]

    def result(r: int, v: int) -> ir.Value:
        value = builder.load(accumulators[r * vectors + v])
        return value if corrections[v] is None else builder.sub(value, corrections[v])

    def row_pointer(r: int) -> ir.Value:
        return builder.gep(y, [builder.add(_row_offsets(builder, plan, builder.add(m0, I64(r)), y_strides), n0)])

    def vector_pointer(row: ir.Value, v: int) -> ir.Value:
        return builder.bitcast(builder.gep(row, [I64(v * lanes)]), vector_type.as_pointer())

    # the common case first: a whole tile overwriting Y (not read: it may be uninitialised)
    with builder.if_else(builder.and_(full, builder.not_(accumulating)), likely=True) as (whole, other):
        with whole:
            for r in range(mr):
                row = row_pointer(r)
                for v in range(vectors):
                    builder.store(result(r, v), vector_pointer(row, v), align=4)
        with other:
            store, load = _masked_store(module, lanes), _masked_load(module, lanes)
            masks = [_lane_mask(builder, lanes, I64(v * lanes), columns) for v in range(vectors)]
            for r in range(mr):
                with builder.if_then(builder.icmp_signed("<", I64(r), rows)):
                    row = row_pointer(r)
                    for v in range(vectors):
                        pointer, value = vector_pointer(row, v), result(r, v)
                        old = builder.call(load, [pointer, I32(4), masks[v], ir.Constant(vector_type, None)])
                        value = builder.select(accumulating, builder.add(old, value), value)
                        builder.call(store, [value, pointer, I32(4), masks[v]])
    builder.ret_void()
    return function


# ---- work items and threads ------------------------------------------------------------------------


_FIELDS = ("X", "W", "Bp", "Y", "sums", "x0", "x1", "x2", "w0", "w1", "w2", "y0", "y1", "y2", "accumulate",
           "next_sliver", "next_item", "packed")


def _closure_type() -> ir.LiteralStructType:
    return ir.LiteralStructType([PTR, PTR, PTR, I32_PTR, I32_PTR, *([I64] * 9), I32, I64, I64, I32])


def _field(builder: ir.IRBuilder, closure: ir.Value, name: str) -> ir.Value:
    return builder.gep(closure, [I32(0), I32(_FIELDS.index(name))], inbounds=True)


def _define_worker(module: ir.Module, plan: Int8ConvPlan, name: str) -> ir.Function:
    """worker(closure): take slivers to pack, wait until all are packed, take work items (each thread runs it)."""
    pack = _define_pack(module, plan, f"{plan.symbol}.pack")
    micro = _define_micro(module, plan, f"{plan.symbol}.micro")
    function, builder = _internal(module, name, [PTR])
    closure = builder.bitcast(function.args[0], _closure_type().as_pointer())
    v = {field: builder.load(_field(builder, closure, field)) for field in _FIELDS[:15]}
    with _dynamic_loop(builder, _field(builder, closure, "next_sliver"), plan.slivers, "pack") as sliver:
        builder.call(pack, [v["W"], v["w0"], v["w1"], v["w2"], v["Bp"], v["sums"], sliver])
        count_done(builder, _field(builder, closure, "packed"))
    wait_until_done(builder, _field(builder, closure, "packed"), plan.slivers)
    isa = plan.isa
    with _dynamic_loop(builder, _field(builder, closure, "next_item"), plan.items, "item") as index:
        # consecutive items share a column block: its slivers stay in the shared cache
        row_block = builder.urem(index, I64(plan.row_blocks))
        column_block = builder.udiv(index, I64(plan.row_blocks))
        first_tile = builder.mul(row_block, I64(plan.tiles_per_item))
        last_tile = _minimum(builder, builder.add(first_tile, I64(plan.tiles_per_item)), I64(plan.row_tiles))
        first_sliver = builder.mul(column_block, I64(plan.slivers_per_item))
        last_sliver = _minimum(builder, builder.add(first_sliver, I64(plan.slivers_per_item)), I64(plan.slivers))
        with for_range(builder, first_sliver, last_sliver, name="jr") as jr:
            sliver = builder.gep(v["Bp"], [builder.mul(jr, I64(plan.sliver_bytes))])
            with for_range(builder, first_tile, last_tile, name="ir") as it:
                builder.call(micro, [v["X"], v["x0"], v["x1"], v["x2"], sliver, v["sums"], v["Y"], v["y0"], v["y1"],
                                     v["y2"], builder.mul(it, I64(isa.mr)), builder.mul(jr, I64(isa.nr)),
                                     v["accumulate"]])
    builder.ret_void()
    return function


def int8_conv_source(plan: Int8ConvPlan) -> str:
    """LLVM IR text defining `plan.symbol` (see the module docstring)."""
    module = ir.Module(name=plan.symbol)
    worker = _define_worker(module, plan, f"{plan.symbol}.worker")
    rank = 4 if plan.kind == "conv" else 2
    function = ir.Function(module, ir.FunctionType(VOID, [PTR, PTR, I32_PTR, *([I64] * (3 * (rank - 1))), I32]),
                           plan.symbol)
    x, w, y, *strides, accumulate = function.args
    for pointer in (x, w, y):
        pointer.add_attribute("noalias")
    per = rank - 1
    x_strides, w_strides, y_strides = strides[:per], strides[per:2 * per], strides[2 * per:]
    pad = [I64(0)] * (3 - per)
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    closure = alloca_in_entry(builder, _closure_type(), name="closure")
    nbytes = plan.slivers * plan.sliver_bytes + plan.slivers * plan.isa.nr * 4 + ALIGNMENT
    raw, release = reused_heap_block(builder, I64(nbytes), f"{plan.symbol}.Bp")
    sums = builder.bitcast(builder.gep(raw, [I64(plan.slivers * plan.sliver_bytes)]), I32_PTR)
    values = (x, w, raw, y, sums, *x_strides, *pad, *w_strides, *pad, *y_strides, *pad, accumulate, I64(0), I64(0),
              I32(0))
    for field, value in zip(_FIELDS, values):
        builder.store(value, _field(builder, closure, field))
    threads = builder.load(ir.GlobalVariable(module, I32, NUM_THREADS_GLOBAL))
    max_threads = builder.call(declare(module, "omp_get_max_threads", I32, []), [])
    threads = builder.select(builder.icmp_signed(">", threads, I32(0)), threads, max_threads)
    useful = max(1, min(plan.items, 2 * plan.m * plan.out_channels * plan.k // (16 * MIN_FLOPS_PER_THREAD)))
    threads = _minimum(builder, threads, I32(useful))
    run_parallel(builder, worker, closure, threads)
    release()
    builder.ret_void()
    return str(module)
