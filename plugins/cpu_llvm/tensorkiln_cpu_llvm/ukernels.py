"""ukernels.py: fp32 GEMM kernels written with llvmlite's builder, exported as LLVM IR text for SourceImpl.

Both follow the intrinsic argument convention (tensorkiln.sdk.intrinsic_impl)::

    void tk_sgemm_ukernel_MRxNR(float* A, float* B, float* C, i64 lda, i64 ldb, i64 ldc, i64 K, i32 accumulate)
        C[MR, NR] (+)= A[MR, K] @ B[K, NR]; MR x NR/VL vector accumulators stay in registers over K
    void tk_sgemm_tile(float* A, float* B, float* C, i64 lda, i64 ldb, i64 ldc, i64 M, i64 K, i64 N, i32 accumulate)
        any M x N x K (extents in the description's order): the micro-kernel on full tiles, a masked
        kernel on the edges

`GemmTile` is the register tile; intrinsics.tile_for derives it from the target's CPU
(AVX-512: 8x32, 16 zmm accumulators; AVX2: 4x24, 12 ymm accumulators); the whole-GEMM call's tile
comes from strategies/gemm_blocking.register_tiles.
"""
from __future__ import annotations

from dataclasses import dataclass

import llvmlite.ir as ir

from .cgutils import I1, I32, I64, VOID, alloca_in_entry, declare, for_range

__all__ = ["GemmTile", "ukernel_source", "tile_gemm_source", "ukernel_symbol"]

F32 = ir.FloatType()
F32_PTR = F32.as_pointer()
_SIGNATURE_HEAD = [F32_PTR, F32_PTR, F32_PTR, I64, I64, I64]


@dataclass(frozen=True)
class GemmTile:
    """Register tile: `mr` rows x `nr` columns, in vectors of `lanes` floats."""

    mr: int
    nr: int
    lanes: int

    @property
    def vectors_per_row(self) -> int:
        return self.nr // self.lanes


def ukernel_symbol(tile: GemmTile) -> str:
    return f"tk_sgemm_ukernel_{tile.mr}x{tile.nr}"


def _vector(lanes: int) -> ir.VectorType:
    return ir.VectorType(F32, lanes)


def _splat_load(builder: ir.IRBuilder, pointer: ir.Value, lanes: int) -> ir.Value:
    scalar = builder.load(pointer, align=4)
    vector_type = _vector(lanes)
    single = builder.insert_element(ir.Constant(vector_type, ir.Undefined), scalar, I32(0))
    return builder.shuffle_vector(single, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))


def _vector_pointer(builder: ir.IRBuilder, base: ir.Value, offset: ir.Value, lanes: int) -> ir.Value:
    return builder.bitcast(builder.gep(base, [offset], inbounds=True), _vector(lanes).as_pointer())


def _fma(module: ir.Module, lanes: int) -> ir.Function:
    vector_type = _vector(lanes)
    return declare(module, f"llvm.fma.v{lanes}f32", vector_type, [vector_type] * 3)


def _masked(module: ir.Module, kind: str, lanes: int) -> ir.Function:
    vector_type, mask_type = _vector(lanes), ir.VectorType(I1, lanes)
    if kind == "load":
        return declare(module, f"llvm.masked.load.v{lanes}f32.p0", vector_type,
                       [vector_type.as_pointer(), I32, mask_type, vector_type])
    return declare(module, f"llvm.masked.store.v{lanes}f32.p0", VOID,
                   [vector_type, vector_type.as_pointer(), I32, mask_type])


K_UNROLL = 4
"""k steps per iteration of the whole GEMM's k loop (sgemm._define_micro; a loop of one step takes the
rest). Kernels calling it are optimised without LLVM's unrolling (llvm_passes.optimize), and LLVM does not
unroll a loop of this size with a runtime trip count anyway. A step is 12 FMAs (AVX2 4x24) beside 7 loads
and 4 loop instructions; unrolled, the counter and pointer updates come once per four steps and the offsets
fold into the loads. That matters most when the core's other hardware thread is busy (this host, a KVM
guest) and the two share the front end. Measured on the AVX2 4x24 and 6x16 k loops alone, on L1-resident
data, one process round-robin: 56.9 -> 66.2 and 55.3 -> 64.1 GFLOP/s (8 steps: 66.9). Whole GEMMs, with
the C prefetch of sgemm._define_micro, one process alternating, 1 core: AVX2 1024^3 0.87-0.88 -> 0.93x
numpy, 1000^3 0.90-0.93 -> 0.98-0.99x, 3072x768x768 0.94-0.97 -> 0.99-1.00x, 196x256x2304 0.90 -> 0.93x,
64x4096x1024 0.87-0.94 -> 0.95-0.97x, 49x512x4608 even; AVX-512 1024^3 1.00-1.01 -> 1.02-1.03x,
64x4096x1024 1.30-1.31 -> 1.34-1.36x. On a quiet host the difference is smaller (192^2 x 256: +1%).
The conv micro-kernel (_define_ukernel) keeps one step: unrolled, densenet121's 17 1x1 convs on it ran no
faster (exported models, both orders, within 2%) and took 25% more LLVM time."""


def accumulate_over_k(builder: ir.IRBuilder, module: ir.Module, tile: GemmTile, a_rows: list, b: ir.Value,
                      ldb: ir.Value, depth: ir.Value, a_step: int = 1,
                      prefetch: tuple[ir.Value, ir.Value] | None = None, unroll: int = 1) -> list:
    """The register tile's k loop: acc[r, v] += splat(a_rows[r][k * a_step]) * B[k * ldb + v * lanes : +lanes]
    for k < depth (`a_step` mr: A packed as [k][mr]); `unroll` steps per iteration (K_UNROLL), then one at a
    time.

    `prefetch` (next, span): A read in place, and the following call's A `span` floats in one piece at
    `next` (next_tile_rows). Each step then prefetches the next line of that span, in address order (the
    last one again once all are asked for): the mr rows a tile reads in lock-step, 4 bytes each per step,
    are mr interleaved streams that the hardware prefetcher does not follow, so without it every line of
    A arrives from L3 as a miss once A outgrows L2 (next_tile_rows has the measurements). The offset is
    carried from step to step (an add, a compare, a select): the loop is a few cycles long.

    Emitted at the builder's block, which must end here; returns the mr x nr/lanes final
    accumulators (zeros when depth <= 0) with the builder after the loop.
    """
    lanes, vectors = tile.lanes, tile.vectors_per_row
    function = builder.function
    entry = builder.block
    unrolled = function.append_basic_block(f"k.loop{unroll}") if unroll > 1 else None
    middle = function.append_basic_block("k.rest") if unroll > 1 else None
    loop = function.append_basic_block("k.loop")
    done = function.append_basic_block("k.done")
    zero = ir.Constant(_vector(lanes), None)
    fma = _fma(module, lanes)
    prefetch_call = None
    if prefetch is not None:
        prefetch_call = declare(module, "llvm.prefetch.p0i8", VOID, [ir.IntType(8).as_pointer(), I32, I32, I32])

    def step(k: ir.Value, accumulators: list, line: ir.Value | None) -> tuple[list, ir.Value | None]:
        """One k step on the accumulators; returns them updated and the next prefetched line."""
        if line is not None:
            next_span, span = prefetch
            address = builder.bitcast(builder.gep(next_span, [line]), ir.IntType(8).as_pointer())
            # a read (0), kept in every cache level (3), of data (1)
            builder.call(prefetch_call, [address, I32(0), I32(3), I32(1)])
            following = builder.add(line, I64(FLOATS_PER_LINE))
            line = builder.select(builder.icmp_signed("<", following, span), following, line)
        b_row = builder.mul(k, ldb)
        b_values = [builder.load(_vector_pointer(builder, b, builder.add(b_row, I64(v * lanes)), lanes), align=4)
                    for v in range(vectors)]
        a_index = k if a_step == 1 else builder.mul(k, I64(a_step), flags=["nsw"])
        updated = []
        for row in range(tile.mr):
            a_value = _splat_load(builder, builder.gep(a_rows[row], [a_index], inbounds=True), lanes)
            for v in range(vectors):
                updated.append(builder.call(fma, [a_value, b_values[v], accumulators[row * vectors + v]]))
        return updated, line

    def loop_head(block: ir.Block) -> tuple[ir.PhiInstr, list, ir.PhiInstr | None]:
        builder.position_at_end(block)
        k = builder.phi(I64, name="k")
        accumulators = [builder.phi(_vector(lanes), name=f"acc{n}") for n in range(tile.mr * vectors)]
        line = builder.phi(I64, name="prefetched") if prefetch is not None else None
        return k, accumulators, line

    def add_incoming(phis: list, values: list, block: ir.Block) -> None:
        for phi, value in zip(phis, values):
            if phi is not None:
                phi.add_incoming(value, block)

    count = tile.mr * vectors
    start = (I64(0), *([zero] * count), I64(0) if prefetch is not None else None)
    if unrolled is None:
        # one step per iteration: the loop starts from the entry's values
        middle, (k_rest, *rest, line_rest) = entry, start
        builder.cbranch(builder.icmp_signed(">", depth, I64(0)), loop, done)
    else:
        builder.cbranch(builder.icmp_signed(">=", depth, I64(unroll)), unrolled, middle)
        # the main loop: `unroll` steps while that many remain
        k, accumulators, line = loop_head(unrolled)
        values, next_line = accumulators, line
        for offset in range(unroll):
            index = k if offset == 0 else builder.add(k, I64(offset), flags=["nsw"])
            values, next_line = step(index, values, next_line)
        k_unrolled = builder.add(k, I64(unroll), flags=["nsw"])
        builder.cbranch(builder.icmp_signed("<=", builder.add(k_unrolled, I64(unroll), flags=["nsw"]), depth),
                        unrolled, middle)
        unrolled_end = builder.block
        add_incoming([k, *accumulators, line], start, entry)
        add_incoming([k, *accumulators, line], (k_unrolled, *values, next_line), unrolled_end)
        # the rest, one step at a time
        builder.position_at_end(middle)
        k_rest = builder.phi(I64, name="k.rest")
        rest = [builder.phi(_vector(lanes)) for _ in range(count)]
        line_rest = builder.phi(I64) if prefetch is not None else None
        add_incoming([k_rest, *rest, line_rest], start, entry)
        add_incoming([k_rest, *rest, line_rest], (k_unrolled, *values, next_line), unrolled_end)
        builder.cbranch(builder.icmp_signed("<", k_rest, depth), loop, done)

    k, accumulators, line = loop_head(loop)
    updated, next_line = step(k, accumulators, line)
    k_next = builder.add(k, I64(1), flags=["nsw"])
    builder.cbranch(builder.icmp_signed("<", k_next, depth), loop, done)
    add_incoming([k, *accumulators, line], (k_rest, *rest, line_rest), middle)
    add_incoming([k, *accumulators, line], (k_next, *updated, next_line), loop)

    builder.position_at_end(done)
    finals = []
    for before, after in zip(rest, updated):
        phi = builder.phi(_vector(lanes))
        phi.add_incoming(before, middle)
        phi.add_incoming(after, loop)
        finals.append(phi)
    return finals


FLOATS_PER_LINE = 16


def next_tile_rows(builder: ir.IRBuilder, a: ir.Value, lda: ir.Value, depth: ir.Value,
                   tile: GemmTile) -> tuple[ir.Value, ir.Value]:
    """`accumulate_over_k`'s prefetch of the row tile after the one at `a` (mr rows on): the next call's A
    when calls go down the rows (the GEMM's row tiles of a sliver, the NHWC conv's positions of an output
    row). Its mr rows are one piece of mr x depth floats where they are contiguous (lda == depth: a 1x1
    conv's positions over all their channels, a GEMM whose K is one block); otherwise only its first line
    is asked for (a piece of one line: its rows' pieces lie apart, and a prefetch order that crossed them
    measured no better). Past the end of A it names addresses nothing reads: a prefetch never faults.

    Measured, 1 thread, against onnxruntime in the same process: the 1x1 conv 56x56x256 -> 64 (its 3.2 MB
    input past L2) 1.52-1.79x onnxruntime's time without, 1.19-1.30x with; 14x14 and 28x28 inputs, which
    stay in L2, within noise; the GEMM 3136x256x64 0.89 -> 0.95-1.03x numpy."""
    contiguous = builder.icmp_signed("==", lda, depth)
    span = builder.select(contiguous, builder.mul(lda, I64(tile.mr)), I64(FLOATS_PER_LINE))
    return builder.gep(a, [builder.mul(lda, I64(tile.mr))]), span


def _define_ukernel(module: ir.Module, tile: GemmTile, name: str, linkage: str = "", b_strides: int = 1) -> ir.Function:
    """`b_strides` > 1: B is a tile of a higher-rank buffer (packed Bp[N/nr, K, nr]); its last stride is ldb."""
    head = [F32_PTR, F32_PTR, F32_PTR, I64, *([I64] * b_strides), I64]
    function = ir.Function(module, ir.FunctionType(VOID, [*head, I64, I32]), name)
    if linkage:
        function.linkage = linkage
    function.attributes.add("nounwind")
    a, b, c, lda, *b_stride_args, ldc, k_extent, accumulate = function.args
    ldb = b_stride_args[-1]
    labels = ("A", "B", "C", "lda", *(f"ldb{n}" for n in range(b_strides)), "ldc", "K", "accumulate")
    for argument, label in zip(function.args, labels):
        argument.name = label
    for pointer in (a, b, c):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    rows = [builder.gep(a, [builder.mul(lda, I64(row))], inbounds=True) for row in range(tile.mr)]
    finals = accumulate_over_k(builder, module, tile, rows, b, ldb, k_extent,
                               prefetch=next_tile_rows(builder, a, lda, k_extent, tile))
    is_accumulating = builder.icmp_signed("!=", accumulate, I32(0))
    pointers = [_vector_pointer(builder, c, builder.add(builder.mul(ldc, I64(row)), I64(v * tile.lanes)), tile.lanes)
                for row in range(tile.mr) for v in range(tile.vectors_per_row)]
    # C is read only when accumulating: it may be uninitialised otherwise
    with builder.if_else(is_accumulating) as (then, otherwise):
        with then:
            for pointer, value in zip(pointers, finals):
                builder.store(builder.fadd(builder.load(pointer, align=4), value), pointer, align=4)
        with otherwise:
            for pointer, value in zip(pointers, finals):
                builder.store(value, pointer, align=4)
    builder.ret_void()
    return function


def _define_edge_kernel(module: ir.Module, tile: GemmTile, name: str) -> ir.Function:
    """C[m, n] (+)= A[m, K] @ B[K, n] for m <= mr, n <= nr, one row and one masked vector at a time."""
    function = ir.Function(module, ir.FunctionType(VOID, [*_SIGNATURE_HEAD, I64, I64, I64, I32]), name)
    function.linkage = "internal"
    a, b, c, lda, ldb, ldc, m_extent, n_extent, k_extent, accumulate = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    lanes = tile.lanes
    lane_ids = ir.Constant(ir.VectorType(I64, lanes), [I64(i) for i in range(lanes)])
    vector_count = builder.sdiv(builder.add(n_extent, I64(lanes - 1)), I64(lanes))
    fma, load, store = _fma(module, lanes), _masked(module, "load", lanes), _masked(module, "store", lanes)
    zero = ir.Constant(_vector(lanes), None)
    with for_range(builder, I64(0), m_extent, name="row") as row:
        with for_range(builder, I64(0), vector_count, name="vec") as vec:
            column = builder.mul(vec, I64(lanes))
            remaining = builder.sub(n_extent, column)
            splat_remaining = builder.insert_element(ir.Constant(ir.VectorType(I64, lanes), ir.Undefined),
                                                     remaining, I32(0))
            splat_remaining = builder.shuffle_vector(splat_remaining, ir.Constant(splat_remaining.type, ir.Undefined),
                                                     ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))
            mask = builder.icmp_signed("<", lane_ids, splat_remaining)
            slot = alloca_in_entry(builder, _vector(lanes))
            builder.store(zero, slot)
            with for_range(builder, I64(0), k_extent, name="k") as k:
                a_value = _splat_load(builder, builder.gep(a, [builder.add(builder.mul(row, lda), k)]), lanes)
                b_pointer = _vector_pointer(builder, b, builder.add(builder.mul(k, ldb), column), lanes)
                b_value = builder.call(load, [b_pointer, I32(4), mask, zero])
                builder.store(builder.call(fma, [a_value, b_value, builder.load(slot)]), slot)
            c_pointer = _vector_pointer(builder, c, builder.add(builder.mul(row, ldc), column), lanes)
            total = builder.load(slot)
            with builder.if_then(builder.icmp_signed("!=", accumulate, I32(0))):
                builder.store(builder.fadd(builder.call(load, [c_pointer, I32(4), mask, zero]), total), slot)
            builder.call(store, [builder.load(slot), c_pointer, I32(4), mask])
    builder.ret_void()
    return function


def _new_module(name: str) -> ir.Module:
    module = ir.Module(name=name)
    return module


def ukernel_source(tile: GemmTile, symbol: str | None = None, b_strides: int = 1) -> str:
    """LLVM IR text defining the micro-kernel `symbol` (default `ukernel_symbol(tile)`)."""
    symbol = symbol or ukernel_symbol(tile)
    module = _new_module(symbol)
    _define_ukernel(module, tile, symbol, b_strides=b_strides)
    return str(module)


PACK_DEPTH = 256
"""K block of tile_gemm: the packed kc x nr panel of B (32 KiB for 256 x 32 floats) stays in L1."""


def _minimum(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def _pack_panel(builder: ir.IRBuilder, tile: GemmTile, source: ir.Value, ldb: ir.Value, depth: ir.Value,
                panel: ir.Value) -> None:
    """panel[k, 0:nr] = source[k * ldb + 0:nr] for k < depth: a contiguous copy of a B panel."""
    with for_range(builder, I64(0), depth, name="pack") as k:
        for v in range(tile.vectors_per_row):
            load_from = _vector_pointer(builder, source, builder.add(builder.mul(k, ldb), I64(v * tile.lanes)),
                                        tile.lanes)
            store_to = _vector_pointer(builder, panel, builder.add(builder.mul(k, I64(tile.nr)),
                                                                   I64(v * tile.lanes)), tile.lanes)
            builder.store(builder.load(load_from, align=4), store_to, align=64)


def tile_gemm_source(tile: GemmTile, symbol: str = "tk_sgemm_tile", extent_order=("M", "N", "K")) -> str:
    """LLVM IR text defining `symbol(A, B, C, lda, ldb, ldc, <M, N, K in extent_order>, accumulate)`.

    For each K block of PACK_DEPTH and each full nr-wide column panel, B is copied to a
    contiguous stack panel (no cache-set conflicts for large ldb), then every mr-row tile
    of that panel runs the micro-kernel; ragged rows and columns run the masked kernel.
    """
    module = _new_module(symbol)
    micro = _define_ukernel(module, tile, f"{symbol}.ukernel", linkage="internal")
    edge = _define_edge_kernel(module, tile, f"{symbol}.edge")
    function = ir.Function(module, ir.FunctionType(VOID, [*_SIGNATURE_HEAD, I64, I64, I64, I32]), symbol)
    a, b, c, lda, ldb, ldc, *extents, accumulate = function.args
    by_name = dict(zip(extent_order, extents))
    m_extent, n_extent, k_extent = by_name["M"], by_name["N"], by_name["K"]
    for argument, label in zip(function.args, ("A", "B", "C", "lda", "ldb", "ldc", *extent_order, "accumulate")):
        argument.name = label
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    panel = alloca_in_entry(builder, F32, PACK_DEPTH * tile.nr, name="panel", align=64)
    k_blocks = builder.sdiv(builder.add(k_extent, I64(PACK_DEPTH - 1)), I64(PACK_DEPTH))
    row_tiles = builder.sdiv(builder.add(m_extent, I64(tile.mr - 1)), I64(tile.mr))
    column_tiles = builder.sdiv(builder.add(n_extent, I64(tile.nr - 1)), I64(tile.nr))
    # K of zero still has to overwrite C when not accumulating: one empty block
    k_blocks = builder.select(builder.icmp_signed("<", k_blocks, I64(1)), I64(1), k_blocks)
    with for_range(builder, I64(0), k_blocks, name="kb") as kb:
        k_start = builder.mul(kb, I64(PACK_DEPTH))
        depth = builder.select(builder.icmp_signed(">", k_extent, k_start),
                               _minimum(builder, I64(PACK_DEPTH), builder.sub(k_extent, k_start)), I64(0))
        block_accumulates = builder.select(builder.icmp_signed(">", kb, I64(0)), I32(1), accumulate)
        with for_range(builder, I64(0), column_tiles, name="jt") as jt:
            column = builder.mul(jt, I64(tile.nr))
            columns = _minimum(builder, I64(tile.nr), builder.sub(n_extent, column))
            b_block = builder.gep(b, [builder.add(builder.mul(k_start, ldb), column)], inbounds=True)
            is_full_width = builder.icmp_signed("==", columns, I64(tile.nr))
            with builder.if_then(is_full_width, likely=True):
                _pack_panel(builder, tile, b_block, ldb, depth, panel)
            with for_range(builder, I64(0), row_tiles, name="it") as it:
                row = builder.mul(it, I64(tile.mr))
                rows = _minimum(builder, I64(tile.mr), builder.sub(m_extent, row))
                a_tile = builder.gep(a, [builder.add(builder.mul(row, lda), k_start)], inbounds=True)
                c_tile = builder.gep(c, [builder.add(builder.mul(row, ldc), column)], inbounds=True)
                is_full = builder.and_(is_full_width, builder.icmp_signed("==", rows, I64(tile.mr)))
                with builder.if_else(is_full, likely=True) as (then, otherwise):
                    with then:
                        builder.call(micro, [a_tile, panel, c_tile, lda, I64(tile.nr), ldc, depth, block_accumulates])
                    with otherwise:
                        builder.call(edge, [a_tile, b_block, c_tile, lda, ldb, ldc, rows, columns, depth,
                                            block_accumulates])
    builder.ret_void()
    return str(module)
