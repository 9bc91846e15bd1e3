"""sgemm.py: a whole fp32 GEMM as one LLVM function, blocked for the caches, for any M, N, K.

`sgemm_source(plan)` defines (the intrinsic argument convention, tensorkiln.sdk.intrinsic_impl)::

    void SYMBOL(float* A, float* B, float* C, i64 lda, i64 ldb..., i64 ldc, i32 accumulate)
        C[M, N] (+)= A[M, K] @ B        B: "kn" B[K, N]; "nk" W[N, K] (C = A @ W.T);
                                           "packed" Bp[ceil(N / nr), K, nr] (two strides)
    a batch of G GEMMs (batch > 1; "kn" or "nk"), each operand with a leading batch stride:
    void SYMBOL(float* A, float* B, float* C, i64 sa, i64 lda, i64 sb, i64 ldb, i64 sc, i64 ldc, i32 accumulate)
        C[g, M, N] (+)= A[g, M, K] @ B[g]  for g < G

with M, N, K and every block size compiled in (the strategy specialises one function per
workload). The loop nest, after BLIS (Van Zee & van de Geijn, "BLIS: A Framework for
Rapidly Instantiating BLAS Functionality"), with B packed once per call into nr-wide
slivers Bp[N / nr, K, nr] (zero-padded past N; skipped when B comes packed):

    parallel, dynamic: pack rows of B into slivers              (PACK_ROWS rows per work unit)
    wait until every sliver is packed (by whichever thread claimed it)
    parallel, dynamic: for each work item (row block ib, column block jb; B's slivers evened out over the
                       ceil(N / nc) column blocks, as gemm_blocking.column_block_widths):
      for pc in K / kc:                                         # kc x nr sliver of Bp stays in L1
        for jr in nc / nr:                                      # mc x kc block of A stays in L2
          for ir in mc / mr:
            micro-kernel: C[ir:+mr, jr:+nr] (+)= A[ir:+mr, pc:+kc] @ Bp[jr / nr, pc:+kc, :]

A is read where it is (rows `lda` apart), or, with `pack_a`, copied once per call into row tiles
Ap[K / kc, M / mr, kc, mr] (packed_a_offset) in the same parallel packing phase as B (a row tile then is one
stream, not mr rows a page or more apart). A "kn" B is packed PACK_ROWS rows at a time, each row of B one contiguous
run. A B read in place (`pack_b` False: few rows reuse each sliver) that is larger than half of L2 has
each work item's kc x nc panel copied, a row at a time, into the thread's own buffer first
(`pack_panels`; see _pack_panel for why rows); a smaller one whose rows crowd one L1 set has each
kc x nr sliver copied to the stack just before its row tiles (`copy_slivers`). Edge tiles cost
almost nothing: a tile with fewer than mr rows reads its missing rows from the last valid one and stores only the
valid rows; fewer than nr columns read the zero padding of Bp and store under a lane
mask, in a register tile only as wide as those columns rounded up to whole vectors (GemmPlan.edge_tile). Work items
are taken from an atomic counter (dynamic scheduling), so a thread slowed down by other processes takes fewer; one
thread (num_threads=1, a single item, or less than MIN_FLOPS_PER_THREAD of work for a second one) runs the worker in
place without a parallel region, in the plan's one-thread blocks where they differ (GemmPlan.single_blocks: a B
copied in panels takes wider ones, chosen when the call finds its thread count). With B read in place the caller
packs the ragged sliver before the region, so the threads never wait for each other. A batch shares one region: its
slivers and work items are numbered across the batch (item i is GEMM i // items-per-GEMM), so G small GEMMs (grouped
1x1 convs, attention heads) are shared out together instead of running one after another, each too small to be
split. The region runs on the pool of thread_pool.c, which returns once the work is done without waiting for
threads that never started.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import llvmlite.ir as ir

from .cgutils import (I32, I64, PTR, VOID, alloca_in_entry, count_done, declare, for_range, reused_heap_block,
                      run_parallel, wait_until_done)
from .ukernels import (F32, F32_PTR, K_UNROLL, GemmTile, _masked, _vector, _vector_pointer, accumulate_over_k,
                       next_tile_rows)

__all__ = ["GemmPlan", "sgemm_source", "B_LAYOUTS"]

B_LAYOUTS = ("kn", "nk", "packed")
NUM_THREADS_GLOBAL = "tensorkiln_num_threads"   # defined by the kernel module this function is linked into
ALIGNMENT = 64
PACK_ROWS = 32
"""Rows of B per packing work unit when a "kn" B is packed a row at a time (_define_pack_rows)."""
MIN_FLOPS_PER_THREAD = 1_000_000
"""Work per thread below which a GEMM runs on fewer threads (1 MFLOP: 5-15 us on one core). Measured,
2 threads against 1 MFLOP's predecessor 4 MFLOP, whole models, blocks of runs alternating: shufflenet
(grouped 1x1 convs, a batch of four 1.8 MFLOP GEMMs each) 0.67x on AVX2 and 0.80x on AVX-512, tcn 0.92x
and 0.96x, the transformer, GPT block, UNet, squeezenet and inception even (0.98-1.01x); at 1 thread even."""


@dataclass(frozen=True)
class GemmPlan:
    """One specialised GEMM: shapes, register tile, cache blocks and work items."""

    tile: GemmTile
    m: int
    n: int
    k: int
    mc: int                # rows of A per block (a multiple of mr): mc x kc floats stay in L2
    nc: int                # columns per work item (a multiple of nr)
    kc: int                # reduction block: a kc x nr sliver of Bp stays in L1
    b_layout: str = "kn"
    pack_b: bool = True    # False ("kn" only): full slivers are read from B in place, only a ragged last one is packed
    pack_panels: bool = False    # (B in place) each item's kc x nc panel is copied, a row at a time, before use
    copy_slivers: bool = False   # (B in place, no panels) each kc x nr sliver is copied to the stack before use
    batch: int = 1         # G GEMMs of these shapes, operands batch-strided (one call, one parallel region)
    pack_a: bool = False   # copy A once per call into row tiles Ap[K / kc, M / mr, kc, mr] (rows past M: the last)
    nc_single: int = 0     # nc when the call runs on one thread (0: nc), see `single_blocks`

    def __post_init__(self) -> None:
        if self.b_layout not in B_LAYOUTS:
            raise ValueError(f"b_layout must be one of {B_LAYOUTS}, got {self.b_layout!r}")
        if (self.pack_panels or self.copy_slivers) and self.pack_b:
            raise ValueError("pack_panels and copy_slivers copy a B read in place: they need pack_b False")
        if self.pack_panels and self.copy_slivers:
            raise ValueError("pack_panels and copy_slivers are two ways to copy B: choose one")
        if not self.pack_b and self.b_layout != "kn":
            raise ValueError(f"only a row-major B (b_layout 'kn') can be read in place, not {self.b_layout!r}")
        if self.batch < 1 or (self.batch > 1 and self.b_layout == "packed"):
            raise ValueError(f"batch={self.batch}: a batch is at least 1, of 'kn' or 'nk' B (a packed B is one weight)")
        if self.pack_a and self.k == 0:
            raise ValueError("pack_a needs K > 0: there is nothing of A to copy")
        for mc, nc in ((self.mc, self.nc), self.single_blocks):
            if mc % self.tile.mr or nc % self.tile.nr or min(mc, nc, self.kc) <= 0:
                raise ValueError(f"mc={mc} must be a multiple of mr={self.tile.mr} and nc={nc} of "
                                 f"nr={self.tile.nr}, kc={self.kc} positive")

    @property
    def single_blocks(self) -> tuple[int, int]:
        """(mc, nc) of a call that runs on one thread. The blocks split N into enough work items to share out
        over the cores the plan was made for; one thread alone gains nothing from the split and may pay for it
        (a panel of a B read in place is a shorter run of each of B's rows). The call picks these blocks when it
        finds itself on one thread (gemm_blocking chooses nc_single)."""
        return self.mc, self.nc_single or self.nc

    @property
    def single(self) -> "GemmPlan":
        """This plan with its one-thread blocks as its blocks."""
        mc, nc = self.single_blocks
        return replace(self, mc=mc, nc=nc, nc_single=0)

    @property
    def splits_for_threads(self) -> bool:
        """Whether one thread runs other blocks than several (the call chooses at run time)."""
        return self.single_blocks != (self.mc, self.nc)

    @property
    def slivers(self) -> int:
        return -(-self.n // self.tile.nr)

    @property
    def ragged(self) -> bool:
        """True when N is not a multiple of nr: the last sliver is padded with zeros."""
        return self.n % self.tile.nr != 0

    @property
    def edge_tile(self) -> GemmTile | None:
        """The register tile of the ragged last sliver when it is narrower than nr: its columns rounded up to whole
        vectors (N = 49 in slivers of 24 computes 24 + 24 + 8 columns, not 72), else None. Measured, Zen 4, AVX2,
        1 core, chains of the batched GEMMs of shufflenet's grouped 1x1 convs (4 groups), against numpy:
        68x49x68 0.67 -> 0.70-0.73x, 136x49x136 0.74 -> 0.79-0.81x, 34x196x34 0.76 -> 0.79-0.80x, 68x196x68
        0.77-0.83 -> 0.90x, 28x784x28 0.89-0.90 -> 0.93-0.94x."""
        edge = -(-(self.n % self.tile.nr) // self.tile.lanes) * self.tile.lanes
        return GemmTile(self.tile.mr, edge, self.tile.lanes) if 0 < edge < self.tile.nr else None

    @property
    def packed_slivers(self) -> int:
        """Slivers held in the packing buffer: all, or only the ragged last one when B is read in place."""
        if self.b_layout == "packed":
            return 0
        return self.slivers if self.pack_b else int(self.ragged)

    @property
    def packs_by_rows(self) -> bool:
        """Whether B is packed a unit of PACK_ROWS rows at a time (all of a "kn" B), else a sliver at a time."""
        return self.pack_b and self.b_layout == "kn"

    @property
    def pack_units(self) -> int:
        """Work units of one GEMM's B packing (rows or slivers; 0 when B is not packed in the parallel phase)."""
        if not self.pack_b or self.b_layout == "packed":
            return 0
        return -(-self.k // PACK_ROWS) if self.packs_by_rows else self.slivers

    @property
    def row_tiles(self) -> int:
        return -(-self.m // self.tile.mr)

    @property
    def packed_a_floats(self) -> int:
        """Floats of one GEMM's packed A (row tiles of mr rows, each K x mr, by blocks of K), 0 without pack_a."""
        return self.row_tiles * self.k * self.tile.mr if self.pack_a else 0

    @property
    def panel_sliver_floats(self) -> int:
        """Floats from one sliver of a panel to the next (pack_panels): its kc x nr floats, a line more when they
        are a multiple of 16 lines (1 KB). The copy (_pack_panel) writes a row of every sliver in turn; slivers
        a multiple of 4 KB apart (kc x nr = 256 x 16 floats) put all those lines into one L1 set, which holds 8,
        and every store missed. Measured, Zen 4, 1 core, two processes alternating, GFLOP/s: AVX-512 (6x16, kc
        256) 64x1024x256 (a GPT block's MLP) 93.7-94.0 -> 96.6-96.9, 64x256x1024 90.7-92.8 -> 97.0-97.3; at 2
        cores 64x1024x256 126-135 -> 136-142; AVX2 (4x24, kc 128) 64x1024x256 86.1-90.5 -> 93.6-94.7. Other
        strides keep their layout: a line more for every sliver measured 2% slower on AVX2 64x256x1024 (312 lines),
        but the same A/B gave identical code a 2% spread too, so that is noise, and the rule pads only where the
        stores provably share sets."""
        lines = -(-self.kc * self.tile.nr // 16)
        return (lines + (lines % 16 == 0)) * 16

    @property
    def panel_floats(self) -> int:
        """Floats of one thread's panel buffer (pack_panels): a kc x nc block of B as slivers (the wider of the
        two column blocks), panel_sliver_floats apart."""
        return self.panel_sliver_floats * (max(self.nc, self.single_blocks[1]) // self.tile.nr) \
            if self.pack_panels else 0

    @property
    def row_blocks(self) -> int:
        return -(-self.m // self.mc)

    @property
    def column_blocks(self) -> int:
        return -(-self.n // self.nc)

    @property
    def items_per_gemm(self) -> int:
        return self.row_blocks * self.column_blocks

    @property
    def items(self) -> int:
        return self.batch * self.items_per_gemm

    @property
    def symbol(self) -> str:
        t = self.tile
        mode = "" if self.pack_b else "_panels" if self.pack_panels else "_copied" if self.copy_slivers else "_direct"
        mode += "_pa" if self.pack_a else ""
        batch = f"_g{self.batch}" if self.batch > 1 else ""
        single = f"_s{self.single_blocks[0]}x{self.single_blocks[1]}" if self.splits_for_threads else ""
        return (f"tk_sgemm_{self.b_layout}{mode}{batch}_{self.m}x{self.n}x{self.k}"
                f"_t{t.mr}x{t.nr}_b{self.mc}x{self.nc}x{self.kc}{single}")


def _minimum(builder: ir.IRBuilder, a: ir.Value, b: ir.Value) -> ir.Value:
    return builder.select(builder.icmp_signed("<", a, b), a, b)


def _lane_mask(builder: ir.IRBuilder, lanes: int, first_column: int, columns: ir.Value) -> ir.Value:
    """<lanes x i1>: lane l is set when first_column + l < columns."""
    ids = ir.Constant(ir.VectorType(I64, lanes), [I64(first_column + i) for i in range(lanes)])
    limit = builder.insert_element(ir.Constant(ir.VectorType(I64, lanes), ir.Undefined), columns, I32(0))
    limit = builder.shuffle_vector(limit, ir.Constant(limit.type, ir.Undefined),
                                   ir.Constant(ir.VectorType(I32, lanes), [0] * lanes))
    return builder.icmp_signed("<", ids, limit)


def _define_micro(module: ir.Module, tile: GemmTile, name: str, a_packed: bool = False,
                  prefetch_a: bool = True) -> ir.Function:
    """micro(A, lda, Bp, ldbp, C, ldc, kc, rows, columns, accumulate): C[rows, columns] (+)= A[rows, kc] @ Bp[kc, nr].

    mr x nr/lanes accumulators stay in registers over kc; Bp's rows are ldbp apart (nr in a packed sliver).
    `a_packed`: A is a packed row tile, A[k * mr + r] (lda unused; its rows past `rows` are copies).
    `prefetch_a`: A in place, the k loop prefetches the next row tile (ukernels.next_tile_rows); see
    `_prefetches_a` for when it pays.
    """
    lanes, mr, vectors = tile.lanes, tile.mr, tile.vectors_per_row
    function = ir.Function(module, ir.FunctionType(
        VOID, [F32_PTR, I64, F32_PTR, I64, F32_PTR, I64, I64, I64, I64, I32]), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    a, lda, bp, ldbp, c, ldc, depth, rows, columns, accumulate = function.args
    for argument in (a, bp, c):
        argument.add_attribute("noalias")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    if a_packed:
        row_pointers = [builder.gep(a, [I64(r)], inbounds=True) for r in range(mr)]
    else:
        # a tile with fewer rows reads its missing rows from the last valid one (never out of bounds)
        last_row = builder.sub(rows, I64(1))
        row_pointers = [builder.gep(a, [builder.mul(_minimum(builder, I64(r), last_row), lda)], inbounds=True)
                        for r in range(mr)]
    zero = ir.Constant(_vector(lanes), None)
    # C's tile is read and written only after the k loop, its rows ldc apart (an L1 set each when ldc is a
    # multiple of 4 KB): asked for now (a write, kept in every level), the lines arrive while the loop runs.
    # Measured, AVX2, 1 core, one process alternating: 1024^3 0.87-0.88 -> 0.88-0.90x numpy, 196x256x2304
    # 0.91 -> 0.91-0.92x, 64x4096x1024 0.91-0.92 -> 0.93-0.94x
    prefetch = declare(module, "llvm.prefetch.p0i8", VOID, [ir.IntType(8).as_pointer(), I32, I32, I32])
    for r in range(mr):
        row = builder.gep(c, [builder.mul(ldc, I64(r))])
        for column in sorted({0, tile.nr - 1}):   # the tile row's first and last line
            address = builder.bitcast(builder.gep(row, [I64(column)]), ir.IntType(8).as_pointer())
            builder.call(prefetch, [address, I32(1), I32(3), I32(1)])
    # A in place (prefetch_a): the next row tile of the sliver is prefetched while this one computes
    finals = accumulate_over_k(builder, module, tile, row_pointers, bp, ldbp, depth, mr if a_packed else 1,
                               prefetch=next_tile_rows(builder, a, lda, depth, tile)
                               if prefetch_a and not a_packed else None,
                               unroll=K_UNROLL)
    accumulating = builder.icmp_signed("!=", accumulate, I32(0))
    full = builder.and_(builder.icmp_signed("==", rows, I64(mr)), builder.icmp_signed("==", columns, I64(tile.nr)))

    def pointer(r: int, v: int) -> ir.Value:
        return _vector_pointer(builder, c, builder.add(builder.mul(ldc, I64(r)), I64(v * lanes)), lanes)

    with builder.if_else(full, likely=True) as (then, otherwise):
        with then:
            with builder.if_else(accumulating) as (add, overwrite):
                with add:
                    for r in range(mr):
                        for v in range(vectors):
                            p = pointer(r, v)
                            builder.store(builder.fadd(builder.load(p, align=4), finals[r * vectors + v]), p, align=4)
                with overwrite:    # C may be uninitialised: not read
                    for r in range(mr):
                        for v in range(vectors):
                            builder.store(finals[r * vectors + v], pointer(r, v), align=4)
        with otherwise:
            load, store = _masked(module, "load", lanes), _masked(module, "store", lanes)
            masks = [_lane_mask(builder, lanes, v * lanes, columns) for v in range(vectors)]
            for r in range(mr):
                with builder.if_then(builder.icmp_signed("<", I64(r), rows)):
                    for v in range(vectors):
                        p, value = pointer(r, v), finals[r * vectors + v]
                        old = builder.call(load, [p, I32(4), masks[v], zero])
                        value = builder.select(accumulating, builder.fadd(old, value), value)
                        builder.call(store, [value, p, I32(4), masks[v]])
    builder.ret_void()
    return function


def _prefetches_a(plan: GemmPlan) -> bool:
    """Whether the micro-kernel prefetches the next row tile of A (read in place) as it goes: only when K is one block
    (kc >= K), where a row tile can be one piece of mr x K floats (lda == K: next_tile_rows asks for all of its
    lines). With K in several blocks a row tile's rows are K apart and its block of them only kc long, so the
    prefetch asks for one line (the next tile's first) again at every step: a load slot and a few integer operations
    a step for a line the k loop of the next call finds in L1 or L2 anyway. Measured without it, Zen 4, 1 core,
    in-process A/B over random layouts (4-8 each), ratio to numpy's time: AVX2 64x4096x1024 0.960 / 0.965 -> 0.975 /
    0.978 (seed 2, two copies of each), 0.970-0.976 -> 0.966-0.984 (seeds 3 and 4), 49x512x4608 1.065 -> 1.076,
    3072x768x768 1.006 -> 1.018, 1024x1000x2048 0.997 -> 1.005, 1024^3 and 196x256x2304 even; AVX-512 even
    (1.075-1.157 either way)."""
    return plan.kc >= plan.k


def _packing_function(module: ir.Module, name: str) -> tuple[ir.Function, ir.IRBuilder]:
    """An internal `void name(float* source, i64 stride, float* out, i64 unit)` copying part of an operand
    into a packing buffer (source and out never overlap), and a builder at its entry."""
    function = ir.Function(module, ir.FunctionType(VOID, [F32_PTR, I64, F32_PTR, I64]), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    for pointer in (function.args[0], function.args[2]):
        pointer.add_attribute("noalias")
    return function, ir.IRBuilder(function.append_basic_block("entry"))


def _define_pack(module: ir.Module, plan: GemmPlan, name: str) -> ir.Function:
    """pack(B, ldb, out, s): out[k, 0:nr] = B[k, s*nr : +nr] (zero past N) for every k: sliver s of B."""
    tile, lanes = plan.tile, plan.tile.lanes
    function, builder = _packing_function(module, name)
    b, ldb, out, sliver = function.args
    column = builder.mul(sliver, I64(tile.nr))
    columns = _minimum(builder, I64(tile.nr), builder.sub(I64(plan.n), column))
    zero = ir.Constant(_vector(lanes), None)
    if plan.b_layout == "kn":
        full = builder.icmp_signed("==", columns, I64(tile.nr))
        source = builder.gep(b, [column], inbounds=True)
        with builder.if_else(full, likely=True) as (then, otherwise):
            with then:
                with for_range(builder, I64(0), I64(plan.k), name="k") as k:
                    for v in range(tile.vectors_per_row):
                        value = builder.load(_vector_pointer(builder, source, builder.add(builder.mul(k, ldb),
                                                                                          I64(v * lanes)), lanes),
                                             align=4)
                        target = _vector_pointer(builder, out, builder.add(builder.mul(k, I64(tile.nr)),
                                                                           I64(v * lanes)), lanes)
                        builder.store(value, target, align=ALIGNMENT)
            with otherwise:
                load = _masked(module, "load", lanes)
                masks = [_lane_mask(builder, lanes, v * lanes, columns) for v in range(tile.vectors_per_row)]
                with for_range(builder, I64(0), I64(plan.k), name="k") as k:
                    for v in range(tile.vectors_per_row):
                        p = _vector_pointer(builder, source, builder.add(builder.mul(k, ldb), I64(v * lanes)), lanes)
                        value = builder.call(load, [p, I32(4), masks[v], zero])
                        target = _vector_pointer(builder, out, builder.add(builder.mul(k, I64(tile.nr)),
                                                                           I64(v * lanes)), lanes)
                        builder.store(value, target, align=ALIGNMENT)
    else:   # "nk": W[N, K]; row j of W is column j of B, a transposing copy
        with for_range(builder, I64(0), I64(tile.nr), name="j") as j:
            valid = builder.icmp_signed("<", j, columns)
            row = builder.gep(b, [builder.mul(_minimum(builder, builder.add(column, j), I64(plan.n - 1)), ldb)],
                              inbounds=True)
            with for_range(builder, I64(0), I64(plan.k), name="k") as k:
                value = builder.load(builder.gep(row, [k], inbounds=True), align=4)
                value = builder.select(valid, value, ir.Constant(F32, 0.0))
                builder.store(value, builder.gep(out, [builder.add(builder.mul(k, I64(tile.nr)), j)], inbounds=True),
                              align=4)
    builder.ret_void()
    return function


def _define_pack_rows(module: ir.Module, plan: GemmPlan, name: str) -> ir.Function:
    """pack_rows(B, ldb, out, u): out[s, k, 0:nr] = B[k, s*nr : +nr] (zero past N) for every sliver s and the rows
    k of unit u (PACK_ROWS of them): a "kn" B packed a row at a time. Each row of B is one contiguous run that
    the hardware prefetcher streams, where a sliver alone is K pieces of nr floats, a page or more apart once a
    row is 4 KB long (see _pack_panel)."""
    tile, lanes = plan.tile, plan.tile.lanes
    function, builder = _packing_function(module, name)
    b, ldb, out, unit = function.args
    first = builder.mul(unit, I64(PACK_ROWS))
    stop = _minimum(builder, builder.add(first, I64(PACK_ROWS)), I64(plan.k))
    full = plan.n // tile.nr
    zero = ir.Constant(_vector(lanes), None)
    load = _masked(module, "load", lanes)
    masks = [_lane_mask(builder, lanes, v * lanes, I64(plan.n - full * tile.nr)) for v in range(tile.vectors_per_row)]
    with for_range(builder, first, stop, name="k") as k:
        row = builder.gep(b, [builder.mul(k, ldb)], inbounds=True)
        with for_range(builder, I64(0), I64(full), name="s") as sliver:
            source = builder.gep(row, [builder.mul(sliver, I64(tile.nr))], inbounds=True)
            target = builder.gep(out, [builder.add(builder.mul(sliver, I64(plan.k * tile.nr)),
                                                   builder.mul(k, I64(tile.nr)))], inbounds=True)
            for v in range(tile.vectors_per_row):
                value = builder.load(_vector_pointer(builder, source, I64(v * lanes), lanes), align=4)
                builder.store(value, _vector_pointer(builder, target, I64(v * lanes), lanes), align=ALIGNMENT)
        if plan.ragged:
            source = builder.gep(row, [I64(full * tile.nr)], inbounds=True)
            target = builder.gep(out, [builder.add(I64(full * plan.k * tile.nr), builder.mul(k, I64(tile.nr)))],
                                 inbounds=True)
            for v in range(tile.vectors_per_row):
                value = builder.call(load, [_vector_pointer(builder, source, I64(v * lanes), lanes), I32(4), masks[v],
                                            zero])
                builder.store(value, _vector_pointer(builder, target, I64(v * lanes), lanes), align=ALIGNMENT)
    builder.ret_void()
    return function


def packed_a_offset(builder: ir.IRBuilder, plan: GemmPlan, k_start: ir.Value, depth: ir.Value,
                    row_tile: ir.Value) -> ir.Value:
    """Where row tile `row_tile`'s block of K (kc rows from k_start, `depth` of them) starts in the packed A:
    Ap[K / kc][M / mr][depth][mr], block by block, so the mc x kc block of A that a work item's slivers read again
    is one piece. Whole row tiles (Ap[M / mr][K][mr]) put each tile's block K * mr floats after the last; at
    K = 2048 that is 32 KB, and a block's 64 pieces of 8 KB fall into a quarter of L2's sets (1 MB, 8 ways), more
    lines per set than it has ways."""
    before = builder.mul(k_start, I64(plan.row_tiles * plan.tile.mr))
    return builder.add(before, builder.mul(row_tile, builder.mul(depth, I64(plan.tile.mr))))


def _define_pack_a(module: ir.Module, plan: GemmPlan, name: str) -> ir.Function:
    """pack_a(A, lda, Ap, t): Ap[packed_a_offset(k0, depth, t) + k * mr + r] = A[min(t * mr + r, M - 1), k0 + k]
    for every block of K (k0, depth) and k < depth: row tile t of A, its rows interleaved so the micro-kernel reads
    one contiguous stream (rows past M repeat the last)."""
    mr = plan.tile.mr
    function, builder = _packing_function(module, name)
    a, lda, out, row_tile = function.args
    first = builder.mul(row_tile, I64(mr))
    rows = [builder.gep(a, [builder.mul(_minimum(builder, builder.add(first, I64(r)), I64(plan.m - 1)), lda)],
                        inbounds=True) for r in range(mr)]
    with for_range(builder, I64(0), I64(-(-plan.k // plan.kc)), name="pc") as pc:
        k_start = builder.mul(pc, I64(plan.kc))
        depth = _minimum(builder, I64(plan.kc), builder.sub(I64(plan.k), k_start))
        block = builder.gep(out, [packed_a_offset(builder, plan, k_start, depth, row_tile)], inbounds=True)
        with for_range(builder, I64(0), depth, name="k") as k:
            base = builder.mul(k, I64(mr))
            column = builder.add(k_start, k)
            for r, row in enumerate(rows):
                value = builder.load(builder.gep(row, [column], inbounds=True), align=4)
                builder.store(value, builder.gep(block, [builder.add(base, I64(r))], inbounds=True), align=4)
    builder.ret_void()
    return function


PANEL_PREFETCH_ROWS = 16
"""The panel copy asks for the row of B this many rows ahead while it copies a row. The hardware prefetcher
starts afresh on each row when a panel is a part of B's rows (nc < N), and the copy waited for every line
(the panel of a work item is 128-264 columns when 2 threads share N = 512). Measured, Zen 1, 49x512x4608, one
process alternating with numpy: native (4x16, nc 128) 0.91 -> 0.97x at 1 thread, 0.92 -> 0.96x at 2;
-mcpu=haswell (4x24, nc 264) 0.83 -> 0.88x and 0.89 -> 0.93x; 8 and 32 rows ahead no better."""


def _pack_panel(builder: ir.IRBuilder, plan: GemmPlan, b: ir.Value, ldb: ir.Value, k_start: ir.Value,
                depth: ir.Value, first: ir.Value, stop: ir.Value, panel: ir.Value) -> None:
    """panel[s - first, k, 0:nr] = B[k_start + k, s * nr : +nr] for the full slivers first <= s < stop: an item's
    kc x nc panel of a B read in place, copied a row at a time. Each row is one contiguous run of B, which the
    hardware prefetcher streams; a sliver alone is kc pieces of nr floats, each in its own page once a row of
    B is 4 KB or longer, and copying it (or the micro-kernel reading it in place) waits for every line in
    turn (measured, 1 core, AVX2, 48x4608x512: copying the slivers one by one took 3.8 of the GEMM's 8.6 ms)."""
    tile, lanes = plan.tile, plan.tile.lanes
    prefetch = declare(builder.module, "llvm.prefetch.p0i8", VOID, [ir.IntType(8).as_pointer(), I32, I32, I32])
    ahead = builder.mul(I64(PANEL_PREFETCH_ROWS), ldb)
    with for_range(builder, I64(0), depth, name="panel.k") as k:
        row = builder.gep(b, [builder.mul(builder.add(k_start, k), ldb)], inbounds=True)
        with for_range(builder, first, stop, name="panel.s") as s:
            source = builder.gep(row, [builder.mul(s, I64(tile.nr))], inbounds=True)
            later = builder.gep(source, [ahead])   # past B's end near the last rows: a prefetch never faults
            for offset in range(0, tile.nr, 16):   # a line per 16 floats
                address = builder.bitcast(builder.gep(later, [I64(offset)]), ir.IntType(8).as_pointer())
                builder.call(prefetch, [address, I32(0), I32(3), I32(1)])
            target = builder.gep(panel, [builder.add(builder.mul(builder.sub(s, first), I64(plan.panel_sliver_floats)),
                                                     builder.mul(k, I64(tile.nr)))], inbounds=True)
            for v in range(tile.vectors_per_row):
                value = builder.load(_vector_pointer(builder, source, I64(v * lanes), lanes), align=4)
                builder.store(value, _vector_pointer(builder, target, I64(v * lanes), lanes), align=ALIGNMENT)


NEXT_PANEL_LOCALITY = 2
"""LLVM's prefetch locality for the next panel's rows: 2 (prefetcht1) brings them to L2, beside the panel the
micro-kernels read now, without evicting it from L1."""


def _prefetch_next_panel(builder: ir.IRBuilder, plan: GemmPlan, b: ir.Value, ldb: ir.Value, k_start: ir.Value,
                         jr: ir.Value, sliver_start: ir.Value, sliver_stop: ir.Value, column_start: ir.Value,
                         column_stop: ir.Value) -> None:
    """While sliver `jr` of a panel computes, ask for its share of the rows of the item's next panel (the next kc
    rows of B, the same columns): each of the panel's slivers prefetches kc / slivers of them, so the next copy
    (_pack_panel) reads B from L2 instead of waiting on memory a row at a time. The last block of K asks for
    nothing (rows clamped to K). Measured, Zen 4, 1 core, one process alternating, GFLOP/s without -> with:
    AVX2 48x4608x512 78.5-79.8 -> 83.8-86.5, 64x4096x1024 78.2-83.6 -> 84.9-85.4, 49x512x4608 75-77 -> 74-77;
    AVX-512 48x4608x512 82.0-82.7 -> 84.7, 64x4096x1024 80.0-81.0 -> 83.1-83.3, 49x512x4608 88.7 -> 86.0-87.5.
    Locality 3 (into L1) was slower than none: 48x4608x512 76.4-84.7, 49x512x4608 70.9-71.1.

    Tried against this burst and lost, AVX2 64x4096x1024, 1 core, in-process A/B over 8 random layouts (ratio to
    numpy's time; the burst read 0.96-0.98): each micro-kernel call asking for its share of the next panel's lines
    (0.955 against 0.970); each call copying its share of the next panel's rows into a second panel buffer, rows
    1-4 calls ahead prefetched (0.939-0.942 against 0.973); a line in two (0.958-0.975 against 0.971-0.994: no
    adjacent-line fetch to lean on); the burst after the sliver's first or eighth row tile (even). Copying no panel
    at all, the first row tile of each sliver copying it from B as its k loop reads it (prefetched 48-80 rows ahead
    into L2), read 0.956 against 0.946-0.955 across processes: that row tile's calls took 3.3x a call from L1."""
    slivers = builder.sub(sliver_stop, sliver_start)
    share = builder.udiv(builder.add(I64(plan.kc), builder.sub(slivers, I64(1))), slivers)
    first = builder.add(builder.add(k_start, I64(plan.kc)), builder.mul(builder.sub(jr, sliver_start), share))
    last = _minimum(builder, builder.add(first, share), I64(plan.k))
    prefetch = declare(builder.module, "llvm.prefetch.p0i8", VOID, [ir.IntType(8).as_pointer(), I32, I32, I32])
    lines = builder.udiv(builder.add(builder.sub(column_stop, column_start), I64(15)), I64(16))
    with for_range(builder, first, last, name="next.k") as k:
        row = builder.gep(b, [builder.add(builder.mul(k, ldb), column_start)])
        with for_range(builder, I64(0), lines, name="next.line") as line:
            address = builder.bitcast(builder.gep(row, [builder.mul(line, I64(16))]), ir.IntType(8).as_pointer())
            builder.call(prefetch, [address, I32(0), I32(NEXT_PANEL_LOCALITY), I32(1)])


def _copy_sliver(builder: ir.IRBuilder, plan: GemmPlan, b: ir.Value, ldb: ir.Value, k_start: ir.Value,
                 depth: ir.Value, column: ir.Value, columns: ir.Value, sliver: ir.Value, stride: ir.Value):
    """(sliver, stride) of a full kc x nr sliver of B copied into a stack buffer (kept otherwise): read in
    place, rows ldb apart whose lines all fall into a few L1 sets are evicted before the next row tile
    reads them again (see gemm_blocking.crowds_l1_sets). The copy is in L1 when its row tiles read it;
    a B in L2 is copied so (a panel, copied long before, would be read from L2)."""
    tile, lanes = plan.tile, plan.tile.lanes
    buffer = alloca_in_entry(builder, F32, plan.kc * tile.nr, name="sliver", align=ALIGNMENT)
    full = builder.icmp_signed("==", columns, I64(tile.nr))
    with builder.if_then(full, likely=True):
        source = builder.gep(b, [builder.add(builder.mul(k_start, ldb), column)], inbounds=True)
        with for_range(builder, I64(0), depth, name="copy") as k:
            row = builder.gep(source, [builder.mul(k, ldb)], inbounds=True)
            for v in range(tile.vectors_per_row):
                value = builder.load(_vector_pointer(builder, row, I64(v * lanes), lanes), align=4)
                target = builder.add(builder.mul(k, I64(tile.nr)), I64(v * lanes))
                builder.store(value, _vector_pointer(builder, buffer, target, lanes), align=ALIGNMENT)
    return builder.select(full, buffer, sliver), builder.select(full, I64(tile.nr), stride)


def _define_item(module: ir.Module, plan: GemmPlan, micro: ir.Function, name: str,
                 micro_edge: ir.Function | None = None) -> ir.Function:
    """item(A, lda, B, ldb, Bp, Ap, C, ldc, index, accumulate, panel, mc, nc, row_blocks): the blocks of C of
    work item `index` over all of K, C split into blocks of mc x (at most) nc, row_blocks of them per column
    (A's row tiles read from Ap when plan.pack_a; B's full slivers from `panel`, the calling thread's kc x nc
    floats, when plan.pack_panels; the ragged last sliver by `micro_edge`, plan.edge_tile wide, when given)."""
    tile = plan.tile
    function = ir.Function(module, ir.FunctionType(
        VOID, [F32_PTR, I64, F32_PTR, I64, F32_PTR, F32_PTR, F32_PTR, I64, I64, I32, F32_PTR, I64, I64, I64]),
        name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    a, lda, b, ldb, bp, ap, c, ldc, index, accumulate, panel, mc, nc, row_blocks = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    # consecutive items share a column block: its Bp panel stays in the shared cache
    row_block = builder.urem(index, row_blocks)
    column_block = builder.udiv(index, row_blocks)
    row_start = builder.mul(row_block, mc)
    row_stop = _minimum(builder, builder.add(row_start, mc), I64(plan.m))
    # B's slivers evened out over the column blocks (the first `extra` take one more): 171 slivers in 16 items
    # are 11 of 11 and 5 of 10, not 15 of 11 and one of 6, which two threads share 86 / 85, not 88 / 83
    column_blocks = builder.udiv(builder.add(I64(plan.n), builder.sub(nc, I64(1))), nc)
    per_block = builder.udiv(I64(plan.slivers), column_blocks)
    extra = builder.urem(I64(plan.slivers), column_blocks)
    sliver_start = builder.add(builder.mul(column_block, per_block), _minimum(builder, column_block, extra))
    sliver_stop = builder.add(builder.add(sliver_start, per_block),
                              builder.zext(builder.icmp_unsigned("<", column_block, extra), I64))
    column_start = builder.mul(sliver_start, I64(tile.nr))
    column_stop = _minimum(builder, builder.mul(sliver_stop, I64(tile.nr)), I64(plan.n))
    tile_start = builder.udiv(row_start, I64(tile.mr))
    tile_stop = builder.udiv(builder.add(row_stop, I64(tile.mr - 1)), I64(tile.mr))
    depth_blocks = max(1, -(-plan.k // plan.kc))   # K = 0 still overwrites C (with zeros)
    with for_range(builder, I64(0), I64(depth_blocks), name="pc") as pc:
        k_start = builder.mul(pc, I64(plan.kc))
        depth = _minimum(builder, I64(plan.kc), builder.sub(I64(plan.k), k_start))
        adds = builder.select(builder.icmp_signed(">", pc, I64(0)), I32(1), accumulate)
        if plan.pack_panels:
            full_stop = _minimum(builder, sliver_stop, I64(plan.n // tile.nr))
            _pack_panel(builder, plan, b, ldb, k_start, depth, sliver_start, full_stop, panel)
        with for_range(builder, sliver_start, sliver_stop, name="jr") as jr:
            column = builder.mul(jr, I64(tile.nr))
            columns = _minimum(builder, I64(tile.nr), builder.sub(I64(plan.n), column))
            if plan.pack_panels and depth_blocks > 1:
                _prefetch_next_panel(builder, plan, b, ldb, k_start, jr, sliver_start, sliver_stop, column_start,
                                     column_stop)
            if plan.pack_b:
                sliver = builder.gep(bp, [builder.add(builder.mul(jr, I64(plan.k * tile.nr)),
                                                      builder.mul(k_start, I64(tile.nr)))], inbounds=True)
                sliver_stride = I64(tile.nr)
            elif plan.pack_panels:   # full slivers from the panel, a ragged last one from the packing buffer
                sliver = builder.gep(panel, [builder.mul(builder.sub(jr, sliver_start), I64(plan.panel_sliver_floats))])
                sliver_stride = I64(tile.nr)
            else:   # B in place; a ragged last sliver from the packing buffer
                sliver = builder.gep(b, [builder.add(builder.mul(k_start, ldb), column)])
                sliver_stride = ldb
            if not plan.pack_b and plan.ragged:
                edge = builder.icmp_signed("==", jr, I64(plan.slivers - 1))
                sliver = builder.select(edge, builder.gep(bp, [builder.mul(k_start, I64(tile.nr))]), sliver)
                sliver_stride = builder.select(edge, I64(tile.nr), sliver_stride)
            if plan.copy_slivers:
                sliver, sliver_stride = _copy_sliver(builder, plan, b, ldb, k_start, depth, column, columns,
                                                     sliver, sliver_stride)
            with for_range(builder, tile_start, tile_stop, name="ir") as it:
                row = builder.mul(it, I64(tile.mr))
                rows = _minimum(builder, I64(tile.mr), builder.sub(I64(plan.m), row))
                if plan.pack_a:
                    a_tile = builder.gep(ap, [packed_a_offset(builder, plan, k_start, depth, it)], inbounds=True)
                else:
                    a_tile = builder.gep(a, [builder.add(builder.mul(row, lda), k_start)], inbounds=True)
                c_tile = builder.gep(c, [builder.add(builder.mul(row, ldc), column)], inbounds=True)
                arguments = [a_tile, lda, sliver, sliver_stride, c_tile, ldc, depth, rows, columns, adds]
                if micro_edge is None:
                    builder.call(micro, arguments)
                else:
                    with builder.if_else(builder.icmp_signed("==", jr, I64(plan.slivers - 1))) as (edge, full):
                        with edge:
                            builder.call(micro_edge, arguments)
                        with full:
                            builder.call(micro, arguments)
    builder.ret_void()
    return function


_CLOSURE_FIELDS = ("A", "B", "Bp", "Ap", "C", "lda", "ldb", "ldc", "accumulate", "sa", "sb", "sc",
                   "next_sliver", "next_item", "packed", "panels", "next_panel",
                   "mc", "nc", "row_blocks", "items_per_gemm", "items")
_OPERAND_FIELDS = _CLOSURE_FIELDS[:12]   # the call's operands; then the shared counters and the panel buffers


def _closure_type() -> ir.LiteralStructType:
    return ir.LiteralStructType([F32_PTR, F32_PTR, F32_PTR, F32_PTR, F32_PTR, I64, I64, I64, I32, I64, I64, I64,
                                 I64, I64, I32, F32_PTR, I64, I64, I64, I64, I64, I64])


def _batch_operands(builder: ir.IRBuilder, plan: GemmPlan, values: dict, g: ir.Value) -> dict:
    """The A, B, Bp, Ap and C pointers of GEMM `g` of the batch (the values themselves without a batch)."""
    if plan.batch == 1:
        return values
    packed = I64(plan.packed_slivers * plan.k * plan.tile.nr)
    return dict(values, A=builder.gep(values["A"], [builder.mul(g, values["sa"])], inbounds=True),
                B=builder.gep(values["B"], [builder.mul(g, values["sb"])], inbounds=True),
                C=builder.gep(values["C"], [builder.mul(g, values["sc"])], inbounds=True),
                Bp=builder.gep(values["Bp"], [builder.mul(g, packed)], inbounds=True),
                Ap=builder.gep(values["Ap"], [builder.mul(g, I64(plan.packed_a_floats))], inbounds=True))


def _field(builder: ir.IRBuilder, closure: ir.Value, name: str) -> ir.Value:
    return builder.gep(closure, [I32(0), I32(_CLOSURE_FIELDS.index(name))], inbounds=True)


def _dynamic_loop(builder: ir.IRBuilder, counter: ir.Value, count: int | ir.Value, name: str):
    """`while (i = counter++) < count: body(i)`, the counter shared by all threads; a context manager."""
    import contextlib

    @contextlib.contextmanager
    def loop():
        function = builder.function
        head = function.append_basic_block(f"{name}.take")
        body = function.append_basic_block(f"{name}.body")
        done = function.append_basic_block(f"{name}.done")
        builder.branch(head)
        builder.position_at_end(head)
        index = builder.atomic_rmw("add", counter, I64(1), "monotonic")
        limit = I64(count) if isinstance(count, int) else count
        builder.cbranch(builder.icmp_signed("<", index, limit), body, done)
        builder.position_at_end(body)
        yield index
        builder.branch(head)
        builder.position_at_end(done)
    return loop()


def _define_worker(module: ir.Module, plan: GemmPlan, micro: ir.Function, pack: ir.Function | None,
                   pack_rows: ir.Function | None, pack_a: ir.Function | None, name: str) -> ir.Function:
    """worker(closure): take slivers of B and row tiles of A to pack, wait until every one is packed, take
    work items (each thread of the region runs it; one thread alone does all the work)."""
    function = ir.Function(module, ir.FunctionType(VOID, [PTR]), name)
    function.linkage = "internal"
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    closure = builder.bitcast(function.args[0], _closure_type().as_pointer())
    values = {field: builder.load(_field(builder, closure, field)) for field in _OPERAND_FIELDS}
    # (B in place: the caller packed the ragged sliver, no barrier for B)
    slivers = plan.batch * plan.pack_units   # B's packing units across the batch
    a_tiles = plan.batch * plan.row_tiles if pack_a is not None else 0

    def pack_sliver(taken):
        g, unit = builder.udiv(taken, I64(plan.pack_units)), builder.urem(taken, I64(plan.pack_units))
        operands = _batch_operands(builder, plan, values, g)
        if plan.packs_by_rows:
            builder.call(pack_rows, [operands["B"], values["ldb"], operands["Bp"], unit])
        else:
            out = builder.gep(operands["Bp"], [builder.mul(unit, I64(plan.k * plan.tile.nr))], inbounds=True)
            builder.call(pack, [operands["B"], values["ldb"], out, unit])

    def pack_a_tile(taken):
        g, row_tile = builder.udiv(taken, I64(plan.row_tiles)), builder.urem(taken, I64(plan.row_tiles))
        operands = _batch_operands(builder, plan, values, g)
        builder.call(pack_a, [operands["A"], values["lda"], operands["Ap"], row_tile])

    if slivers + a_tiles:
        with _dynamic_loop(builder, _field(builder, closure, "next_sliver"), slivers + a_tiles, "pack") as taken:
            if slivers and a_tiles:
                with builder.if_else(builder.icmp_signed("<", taken, I64(slivers))) as (of_b, of_a):
                    with of_b:
                        pack_sliver(taken)
                    with of_a:
                        pack_a_tile(builder.sub(taken, I64(slivers)))
            elif slivers:
                pack_sliver(taken)
            else:
                pack_a_tile(taken)
            count_done(builder, _field(builder, closure, "packed"))
        wait_until_done(builder, _field(builder, closure, "packed"), slivers + a_tiles)
    micro_edge = None if plan.edge_tile is None else \
        _define_micro(module, plan.edge_tile, f"{plan.symbol}.micro_edge", plan.pack_a, _prefetches_a(plan))
    item = _define_item(module, plan, micro, f"{plan.symbol}.item", micro_edge)
    panel = ir.Constant(F32_PTR, None)
    if plan.pack_panels:   # this thread's panel buffer: one of `threads`, claimed once per region
        slot = builder.atomic_rmw("add", _field(builder, closure, "next_panel"), I64(1), "monotonic")
        panels = builder.load(_field(builder, closure, "panels"))
        panel = builder.gep(panels, [builder.mul(slot, I64(plan.panel_floats))], inbounds=True)
    if plan.splits_for_threads:   # the blocks the entry chose for the region's thread count
        blocks = {field: builder.load(_field(builder, closure, field))
                  for field in ("mc", "nc", "row_blocks", "items_per_gemm", "items")}
    else:
        blocks = {field: I64(getattr(plan, field)) for field in ("mc", "nc", "row_blocks", "items_per_gemm")}
        blocks["items"] = plan.items
    with _dynamic_loop(builder, _field(builder, closure, "next_item"), blocks["items"], "item") as index:
        per_gemm = blocks["items_per_gemm"]
        g, local = builder.udiv(index, per_gemm), builder.urem(index, per_gemm)
        operands = _batch_operands(builder, plan, values, g)
        builder.call(item, [operands["A"], values["lda"], operands["B"], values["ldb"], operands["Bp"],
                            operands["Ap"], operands["C"], values["ldc"], local, values["accumulate"], panel,
                            blocks["mc"], blocks["nc"], blocks["row_blocks"]])
    builder.ret_void()
    return function


def sgemm_source(plan: GemmPlan) -> str:
    """LLVM IR text defining `plan.symbol` (see the module docstring)."""
    module = ir.Module(name=plan.symbol)
    micro = _define_micro(module, plan.tile, f"{plan.symbol}.micro", plan.pack_a, _prefetches_a(plan))
    by_sliver = plan.packed_slivers and not plan.packs_by_rows   # "nk", or the ragged sliver of a B in place
    pack = _define_pack(module, plan, f"{plan.symbol}.pack") if by_sliver else None
    pack_rows = _define_pack_rows(module, plan, f"{plan.symbol}.pack_rows") if plan.packs_by_rows else None
    pack_a = _define_pack_a(module, plan, f"{plan.symbol}.pack_a") if plan.pack_a else None
    worker = _define_worker(module, plan, micro, pack, pack_rows, pack_a, f"{plan.symbol}.worker")
    # the strides of every dimension but the last of A, B (Bp: two) and C (the intrinsic convention)
    batched = int(plan.batch > 1)
    a_rank, b_rank, c_rank = 2 + batched, (3 if plan.b_layout == "packed" else 2) + batched, 2 + batched
    function = ir.Function(module, ir.FunctionType(
        VOID, [F32_PTR, F32_PTR, F32_PTR, *([I64] * (a_rank + b_rank + c_rank - 3)), I32]), plan.symbol)
    a, b, c, *strides, accumulate = function.args
    lda, ldb, ldc = strides[a_rank - 2], strides[a_rank + b_rank - 3], strides[-1]
    sa, sb, sc = (strides[0], strides[a_rank - 1], strides[a_rank + b_rank - 2]) if batched else (I64(0),) * 3
    for pointer in (a, b, c):
        pointer.add_attribute("noalias")
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    closure = alloca_in_entry(builder, _closure_type(), name="closure")
    releases = []

    def heap_floats(floats: int, label: str) -> ir.Value:
        raw, release = reused_heap_block(builder, I64(-(-plan.batch * floats * 4 // ALIGNMENT) * ALIGNMENT),
                                         f"{plan.symbol}.{label}")
        releases.append(release)
        return builder.bitcast(raw, F32_PTR)

    packed = b if not plan.packed_slivers else heap_floats(plan.packed_slivers * plan.k * plan.tile.nr, "Bp")
    packed_a = a if pack_a is None else heap_floats(plan.packed_a_floats, "Ap")
    values = (a, b, packed, packed_a, c, lda, ldb, ldc, accumulate, sa, sb, sc, I64(0), I64(0), I32(0),
              ir.Constant(F32_PTR, None), I64(0), I64(plan.mc), I64(plan.nc), I64(plan.row_blocks),
              I64(plan.items_per_gemm), I64(plan.items))
    for field, value in zip(_CLOSURE_FIELDS, values):
        builder.store(value, _field(builder, closure, field))
    if pack is not None and not plan.pack_b:   # the ragged last sliver of each B
        with for_range(builder, I64(0), I64(plan.batch), name="g") as g:
            operands = _batch_operands(builder, plan, dict(zip(_CLOSURE_FIELDS, values)), g)
            builder.call(pack, [operands["B"], ldb, operands["Bp"], I64(plan.slivers - 1)])
    threads_global = ir.GlobalVariable(module, I32, NUM_THREADS_GLOBAL)
    threads = builder.load(threads_global)
    max_threads = builder.call(declare(module, "omp_get_max_threads", I32, []), [])
    threads = builder.select(builder.icmp_signed(">", threads, I32(0)), threads, max_threads)
    # no more threads than work items, nor than MIN_FLOPS_PER_THREAD allow: fork and join cost more than
    # a small GEMM gains (and wait for a thread the OS has not scheduled yet on a loaded machine)
    useful = max(1, min(plan.items, 2 * plan.batch * plan.m * plan.n * plan.k // MIN_FLOPS_PER_THREAD))
    threads = _minimum(builder, threads, I32(useful))
    if plan.splits_for_threads:   # one thread: the blocks of plan.single_blocks
        single = builder.icmp_signed("==", threads, I32(1))
        alone = plan.single
        for field in ("mc", "nc", "row_blocks", "items_per_gemm", "items"):
            builder.store(builder.select(single, I64(getattr(alone, field)), I64(getattr(plan, field))),
                          _field(builder, closure, field))
    if plan.pack_panels:   # a panel for each thread of the region (it runs on at most `threads`)
        nbytes = builder.mul(builder.zext(threads, I64), I64(plan.panel_floats * 4))
        raw, release = reused_heap_block(builder, nbytes, f"{plan.symbol}.panels")
        releases.append(release)
        builder.store(builder.bitcast(raw, F32_PTR), _field(builder, closure, "panels"))
    run_parallel(builder, worker, closure, threads)
    for release in releases:
        release()
    builder.ret_void()
    return str(module)

