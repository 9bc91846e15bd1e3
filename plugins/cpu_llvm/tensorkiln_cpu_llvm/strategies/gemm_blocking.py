"""strategies/gemm_blocking.py: register tile, cache blocks and work items of the whole-GEMM call (sgemm.py).

Every value is a knob of `gemm_space` with an analytic default from the target's CPU
(host.cpu_facts: vector width and registers) and caches (host.cache_sizes: read from
sysfs, overridable by -l1_cache/-l2_cache/-l3_cache):

- tile "MRxNR": the register tile. MR x NR/lanes accumulators plus NR/lanes B vectors
  and one broadcast must fit the vector registers: 4x24 on AVX2 (12 of 16 ymm), 8x32
  on AVX-512 (16 of 32 zmm; 14x32 with 28 is a candidate), 6x64 (24 zmm) where two 512-bit
  FMA pipes need fewer loads per FMA (host.CpuFacts.fma512_pipes), 6x16 where one 512-bit FMA issues a
  cycle (ONE_FMA512_TILE_ROWS); up to two rows fewer when
  that pads M less (M = 49 runs 7x32), M rows when M is smaller;
- kc: a kc x NR sliver of packed B is one and a half times L1, streamed from L2 beside the row tile (C's tile
  is read and written once per kc: _streamed_depth); a sliver of a B read in place fills half of L1
  (_resident_depth), two thirds when B is copied into panels (_panel_depth);
- mc: an mc x kc block of A fills half of L2 (it is reused by every column sliver), no more rows than L2's sets
  hold where rows a multiple of a way apart fall into the same sets (l2_set_rows);
- pack_b: copy B into slivers when more than 64 rows in more than one row block reuse each, else
  read it in place (each work item's panel of B copied a row at a time first when B is larger than half
  of L2 and read by more than one row tile: copies_panels; else each sliver copied to the stack where its
  rows crowd an L1 set);
- pack_a: copy A into row tiles (one stream per tile): a knob for the tuner, off by default (PACK_A);
- a B packed at compile time (nn.dense_pack, b_layout "packed": weight_packing.pack_dense_weights) takes the
  packed blocks whatever M (its slivers are contiguous, as a packed B's), no pack_b knob, and only tiles of its
  slivers' width nr (packed_tiles);
- nc: columns per work item: all of N when a kc x N panel fits a quarter of L3 (a copied panel of a B read in
  place: PANEL_L2_SHARE of L2), then
  split until there are at least WORK_ITEMS_PER_CORE items per core (PANEL_ITEMS_PER_CORE when
  each item copies its panel of a B read in place from memory) to share out (counting
  the items of every GEMM of a batch, which share one parallel region); then the rows of a tall
  GEMM are split, in blocks of at least MIN_SPLIT_ROWS, up to BALANCED_ITEMS_PER_CORE items; rows of
  a short one are split too only while there are fewer than MIN_ITEMS_PER_CORE.

Blocks are evened out over their extent (M = 1000 with mc <= 680 gives two blocks of
504 and 496, not 680 and 320), so no shape leaves a sliver of a block.
"""
from __future__ import annotations

import functools
import os
from collections import Counter

from tensorkiln.sdk import Knob, TuningSpace

from ..host import cache_sizes, cpu_facts
from ..sgemm import GemmPlan, sgemm_source
from ..ukernels import GemmTile

__all__ = ["gemm_space", "gemm_plan", "sgemm_intrinsic", "register_tiles", "parse_tile", "packs_panels",
           "crowds_l1_sets", "l2_set_rows", "balanced_columns", "packed_tiles", "default_packed_columns"]

MIN_TILE_ROWS = 4
"""Rows of the shortest register tile offered to avoid padding (two below the default at most)."""
WORK_ITEMS_PER_CORE = 4
"""Items per core for dynamic scheduling: a core slowed by other processes takes fewer."""
PANEL_ITEMS_PER_CORE = 2
"""Items per core, in place of WORK_ITEMS_PER_CORE, when each work item copies its panel of a B read in place
from memory (packs_panels): the copy reads nc columns of each of kc rows, a row apart, and wider panels read
longer runs. Measured, AVX2, 49x512x4608 (4x24, kc 256), one process alternating: nc 72 -> 144 at 1 thread
0.85-0.88 -> 0.92-0.93x numpy, at 2 threads 0.94-0.99 -> 0.99-1.04x; 64x4096x1024 (nc 528 -> 1032) and
196x256x2304 (48 -> 72) even within the noise (0.93-0.97x, 0.96-1.03x at 1 thread); transformer shapes at 1 thread
64x768x3072 0.90 -> 0.90-0.93x, 197x768x3072 0.90-0.91 -> 0.94-0.99x, 128x3072x768 0.92-0.94 -> 0.91x; at 2 threads
within the noise (0.96-1.17x either way)."""
MIN_ITEMS_PER_CORE = 2
"""Items per core below which rows are split too: each row block reads every sliver of B once more. Rows
were split up to WORK_ITEMS_PER_CORE; measured with the sweep (alternating checkouts, AVX-512, 1 / 2
threads), 64x256x256 0.93-0.97 / 0.81-0.89x numpy -> 1.01-1.04 / 0.95-0.97x, 64x256x1024 0.93 / 0.94-0.97x
-> 1.10 / 1.06-1.11x (the attention and MLP GEMMs of a 64-token GPT block); AVX2 even or up to 0.06x
better."""
BALANCED_ITEMS_PER_CORE = 8
"""Items per core that a tall GEMM (M >= 2 x MIN_SPLIT_ROWS) reaches by splitting rows after the columns.
Work is handed out an item at a time, so the last item runs on one core alone: with 4 items per core that
tail cost 1024^3 a tenth at 2 threads (0.91x numpy at mc 1024, 8 items; 1.03x at mc 512, 16 items; 1 thread
0.95 / 0.96x, Zen 4, L2 1 MB). A row block more only reads B once more (a column block more would read all
of A once more)."""
MIN_SPLIT_ROWS = 256
"""The least rows of a row block made for balance (BALANCED_ITEMS_PER_CORE): blocks of hundreds of rows keep
each B sliver's reuse (and its packing) worth it."""
MIN_COLUMN_SLIVERS = 2
"""Slivers of the narrowest column block made for more work items, before rows are split (which reads
every sliver once more per row block)."""


def _round_up(value: int, step: int) -> int:
    return -(-value // step) * step


def _even(extent: int, block: int, step: int) -> int:
    """The block (a multiple of `step`, at most max(block, step)) that splits `extent` into equal parts."""
    block = max(step, block // step * step)
    parts = -(-extent // block)
    return min(block, _round_up(-(-extent // parts), step))


def register_tiles(target, m: int | None = None, n: int | None = None) -> tuple[str, ...]:
    """Candidate register tiles, the analytic default first (M rows high when M is below its rows)."""
    facts = cpu_facts(target)
    lanes = facts.lanes(32)
    if facts.vector_registers >= 32:
        tiles = (f"8x{2 * lanes}", f"14x{2 * lanes}", f"6x{4 * lanes}", f"4x{4 * lanes}")
        if facts.fma512_pipes >= 2 and (n is None or _round_up(n, 4 * lanes) - n <= n // 16):
            # two FMA pipes need twice the operands per cycle: 6x64 loads 10 vectors per 24 FMAs (8x32: 10
            # per 16) and each row tile of A is read by half as many slivers. Measured, 1 core, Sapphire
            # Rapids (KVM), A packed, against 8x32: 1024^3 0.80 -> 0.90x numpy, 960^3 0.87 -> 0.96x,
            # 1000^3 0.81 -> 0.93x, 3072x768x768 0.86 -> 0.94x, 196x256x2304 1.05 -> 1.18x (N padded to
            # 64 by at most a sixteenth)
            tiles = (tiles[2], tiles[0], tiles[1], tiles[3])
        elif facts.fma512_pipes == 1:
            tiles = (f"{ONE_FMA512_TILE_ROWS}x{lanes}", *tiles)
    else:
        # 4x24 first: 7 loads per 12 FMAs (6x16: 8), and 4 rows pad M less. Measured 1 core, AVX2, each
        # tile on the same blocks, against 6x16: 64x4096x1024 0.84 -> 0.95x numpy, 1000^3 0.97 -> 1.02x,
        # 3072x768x768 1.00 -> 1.04x, the other sweep shapes even or up to 0.02x better
        tiles = (f"4x{3 * lanes}", f"6x{2 * lanes}", f"4x{2 * lanes}")
        if m is not None and n is not None:
            # the tile that pads M and N least wins by PADDING_GAIN: of the 12-accumulator tiles, or of all
            # three on a core with one 256-bit FMA a cycle, where 4x16's 8 accumulators hide its latency too
            tiles = _least_padding(tiles, m, n, 3 if facts.fma256_pipes == 1 else 2)
    default_rows, default_columns = (int(x) for x in tiles[0].split("x"))
    if m is None:
        return tiles
    if m < default_rows:   # M rows, two vectors wide (four under the 6x64 default)
        columns = default_columns if default_columns == 4 * lanes else 2 * lanes
        return (f"{m}x{columns}", *tiles)
    # padded rows, weighed by the per-row share of B loads a shorter tile pays (M = 49: 7 rows, not 8
    # with a 1-row last tile; M = 1024 on AVX2 keeps 6 rows and pads 2, not 4 rows with 8 accumulators)
    rows = min(range(max(MIN_TILE_ROWS, default_rows - 2), default_rows + 1),
               key=lambda r: (-(-m // r) * r * (1 + 0.5 / r), -r))
    if rows == default_rows:
        return tiles
    return (f"{rows}x{default_columns}", *tiles)


ONE_FMA512_TILE_ROWS = 6
"""Rows of the default register tile where one 512-bit FMA issues per cycle (host.CpuFacts.fma512_pipes == 1: Zen 4,
which splits it into two 256-bit halves, and Intel's client cores): six rows of one vector (6x16), six accumulators
for an FMA latency of 4. Two vectors a row (8x32) did as well only for deep K: measured, Zen 4, 1 core, a chain of
batched GEMMs (4 groups, the grouped 1x1 convs of shufflenet: M = K = 28-136, N = 49-784), against numpy, 8x32 /
7x32 against 6x16 (4x16 where M pads less): 28x784x28 0.60-0.81 -> 0.93-0.95x (4x16 1.01x), 68x196x68 0.72-0.78 ->
0.89-0.90x, 136x49x136 0.42-0.67 -> 0.83-0.84x, 34x196x34 0.53 -> 0.89x; the GEMM sweep even (1024^3 106.0 against
105.9 GFLOP/s, 196x256x2304 108.2 / 108.0) or better (64x4096x1024 83.2 -> 87.2)."""


PADDING_GAIN = 0.98
"""An AVX2 tile other than 4x24 is the default when its padded M x N is at most this share of 4x24's
(`_least_padding`). N = 512 or 256 is 528 or 264 wide in 24-column slivers, and an odd count of slivers
splits unevenly over 2 threads (196x256x2304: 6 and 5 of 11, where 16 split 8 and 8). On a core with one
256-bit FMA a cycle (host.CpuFacts.fma256_pipes, Zen 1) 4x16 is a candidate too. Measured on Zen 1, sweep
medians against numpy, 1 / 2 threads: 196x256x2304 4x24 0.91 / 0.85x, 4x16 0.95 / 0.99x; 49x512x4608 4x24
0.88 / 0.88x, 4x16 0.89 / 0.90x; 1 core, the same blocks, 4x24 against 6x16 against 4x16 where neither pads
(3072x768x768): 42.9, 41.8, 42.3 GFLOP/s."""


def _least_padding(tiles: tuple[str, ...], m: int, n: int, candidates: int) -> tuple[str, ...]:
    """`tiles` with the one of the first `candidates` that pads m x n least first, when it beats the first
    by PADDING_GAIN."""
    def padded(tile: str) -> int:
        rows, columns = (int(x) for x in tile.split("x"))
        return _round_up(m, rows) * _round_up(n, columns)

    best = min(tiles[:candidates], key=padded)
    if padded(best) > PADDING_GAIN * padded(tiles[0]):
        return tiles
    return (best, *(t for t in tiles if t != best))


def parse_tile(name: str, target) -> GemmTile:
    mr, nr = (int(x) for x in name.split("x"))
    return GemmTile(mr=mr, nr=nr, lanes=cpu_facts(target).lanes(32))


def _cores(target) -> int:
    threads = int(target.options.get("num_threads", 0) or 0)
    if threads > 0:
        return threads
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _defaults(m: int, n: int, k: int, tile: GemmTile, target, batch: int = 1,
              cores: int | None = None, prepacked: bool = False) -> dict[str, int]:
    """mc, kc, nc for `cores` threads (default: the target's, _cores); `prepacked`: B comes packed (nn.dense_pack),
    its slivers streamed as a packed B's are, whatever M."""
    cores = _cores(target) if cores is None else cores
    caches = cache_sizes(target)
    blocks = _blocks(m, n, k, tile, target, batch, WORK_ITEMS_PER_CORE, cores, _streamed_depth(tile, caches))
    if prepacked or _packs_b(m, blocks["mc"]):
        return blocks
    # B read in place: its slivers are read where they lie (or copied a sliver or panel at a time), and the
    # sliver stays in L1 (_resident_depth)
    kc = _resident_depth(tile, caches)
    blocks = _blocks(m, n, k, tile, target, batch, WORK_ITEMS_PER_CORE, cores, kc)
    if copies_panels(m, n, k, tile, kc, caches) and not _packs_b(m, blocks["mc"]):
        # B streamed from memory into each item's panels, deeper ones (_panel_depth): a narrower panel is a
        # shorter run of each row of B; a panel in a quarter of L2 (PANEL_L2_SHARE)
        kc = max(kc, _panel_depth(tile, caches))
        widest = caches.l2 // PANEL_L2_SHARE // (_even(k, kc, 8) * 4)
        blocks = _blocks(m, n, k, tile, target, batch, PANEL_ITEMS_PER_CORE, cores, kc, widest)
        if batch == 1:
            blocks["nc"] = balanced_columns(m, n, blocks["mc"], blocks["nc"], tile.nr, cores, widest)
    return blocks


def _streamed_depth(tile: GemmTile, caches) -> int:
    """kc of a packed B: a kc x NR sliver of one and a half times L1, streamed through L1 from L2 beside the row
    tile (at most 512 rows). C's tile is read and written once per kc, which a deeper block spreads over more
    FMAs: 4x24 (AVX2) 512 rows, 8x32 (AVX-512) 384, 6x64 at 48 KB 288. Measured, Zen 4 (L1 32 KB, L2 1 MB),
    1 core, one process alternating with numpy, against the sliver in half of L1 (152 rows at 4x24, 128 at 8x32):
    AVX2 1024^3 0.90-0.92 -> 0.95-0.97x, 1000^3 0.91-0.93 -> 0.94-0.96x, 1024x1000x2048 0.87-0.93 -> 0.94x,
    960^3 0.92-0.94 -> 0.96-0.97x, 3072x768x768 even (0.97x); AVX-512 1024^3 1.01 -> 1.04-1.06x, 1024x1000x2048
    0.95 -> 0.97-0.98x. Sapphire Rapids measured the same for the 6x64 tile (_resident_depth)."""
    return min(512, max(64, caches.l1d * 3 // 2 // (tile.nr * 4) // 16 * 16))


def _resident_depth(tile: GemmTile, caches) -> int:
    """kc of a B read in place: a kc x NR sliver in half of L1, read again by every row tile. Measured, Zen 4,
    AVX2, 49x512x4608 (A packed, B copied into panels): kc 160 0.96-0.99x numpy, 512 0.88-0.95x (each panel,
    kc x nc, must then be narrower to stay in L2, and A, from L3, is read once per panel). A sliver four vectors
    wide takes 2/3 of L1 per 32 columns (256 rows at 48 KB): it streams through L1 from L2 beside the row tile.
    Measured, 1024^3, 6x64, 1 core: kc 128 / 192 / 256 / 384 0.90 / 0.93 / 0.98 / 0.99x numpy (1000^3: 0.96 /
    0.95 / 0.95 / 0.96x)."""
    if tile.nr >= 4 * tile.lanes:
        return min(512, max(64, caches.l1d * 2 // 3 // (2 * tile.lanes * 4) // 16 * 16))
    return min(512, max(64, caches.l1d // 2 // (tile.nr * 4) // 16 * 16))


def _panel_depth(tile: GemmTile, caches) -> int:
    """kc of a B copied into panels (sgemm._pack_panel): a kc x NR sliver in two thirds of L1, not half. Each
    micro-kernel call reads and writes C's tile, its rows ldc apart, once per kc, and a deeper block spreads that
    over more FMAs; the panel, in L2, refills the sliver lines that A's row tiles evict. Measured, Zen 4 (L1 32 KB),
    1 core, one process alternating with numpy, three rounds, kc half -> two thirds: AVX2 (4x24) 64x4096x1024 152
    -> 208 0.934-0.948 -> 0.946-0.959x, 48x4608x512 160 -> 176 0.93-0.95 -> 0.97-0.98x, 128x3072x768 0.95-0.97 ->
    0.96-0.97x, 49x512x4608 and 196x256x2304 even; AVX-512 (5x16) 49x512x4608 256 -> 336 1.06-1.11 -> 1.10-1.11x.
    The whole of L1 (kc 344 at 4x24) measured about as two thirds."""
    return min(512, max(64, caches.l1d * 2 // 3 // (tile.nr * 4) // 16 * 16))


PANEL_L2_SHARE = 4
"""With A read in place (PACK_A), a panel of B (kc x nc, _pack_panel) takes at most this share of L2: every row tile
reads each of its slivers, and A's re-reading per panel is cheap from L2. Measured, Zen 4, AVX2, 1 core, one
process alternating with numpy (kc 152-160), against panels as wide as the items allowed: 64x4096x1024 nc 1032
0.89x, 528 0.91x, 408 0.93x, 336 0.96x, 264 0.93-0.94x; 128x3072x768 nc 768 0.91x, 528 0.95x, 408 0.97x, 336
0.96x, 264 0.95x."""


BALANCE_GAIN = 0.98
"""A column width replaces the default only when its items end at most this share of the default's time. At 0.97,
64x4096x1024 on AVX2 (2 threads) kept 384-column panels (11 items: the threads end at 2176 and 1920 columns)
against 264 (16 items, 2112 and 1984): measured, Zen 4, one process alternating, 0.92-0.93x numpy against
0.98-0.99x."""


def column_block_widths(n: int, nc: int, nr: int) -> list[int]:
    """Columns of each of the ceil(n / nc) column blocks of a GEMM: B's slivers evened out over them, the first
    ones a sliver wider where they do not divide (sgemm._define_item), the last ending at n."""
    slivers, blocks = -(-n // nr), -(-n // nc)
    per_block, extra = divmod(slivers, blocks)
    widths = [(per_block + (block < extra)) * nr for block in range(blocks)]
    widths[-1] -= slivers * nr - n
    return widths


def _finish(m: int, n: int, mc: int, nc: int, nr: int, cores: int) -> int:
    """Columns x rows the busiest of `cores` threads computes when the items (row block x column block, in
    order) go to whichever thread is free first, as the GEMM's threads take them."""
    loads = [0] * cores
    for rows in (min(mc, m - i) for i in range(0, m, mc)):
        for columns in column_block_widths(n, nc, nr):
            loads[loads.index(min(loads))] += rows * columns
    return max(loads)


def balanced_columns(m: int, n: int, mc: int, nc: int, nr: int, cores: int, widest: int | None = None) -> int:
    """`nc`, unless another column block (a multiple of nr, at least MIN_COLUMN_SLIVERS slivers, from half of
    `widest` (or nc when narrower) to `widest` columns when given, one item per core at least) lets the threads
    finish sooner by BALANCE_GAIN: then the widest block within BALANCE_GAIN of the soonest finish (a wider panel
    is a longer run of each of B's rows). 512 columns are 21.3 slivers of 24: four items (144, 144, 120, 104)
    leave one of 2 threads 288 columns, two (264, 248) leave it 264. Measured, AVX2 (Zen 1, 2 vCPUs),
    49x512x4608, one process alternating, 2 threads: 43.7 -> 47.7 GFLOP/s (haswell's model 40.8 -> 46.4), 1
    thread 24.7 -> 25.1. Each count of blocks is offered once, at the narrowest nc that gives it (its widest
    block)."""
    if cores <= 1:
        return nc
    times = {nc: _finish(m, n, mc, nc, nr, cores)}
    narrowest = max(MIN_COLUMN_SLIVERS, min(nc, widest // 2) // nr if widest else 0)
    for slivers in range(narrowest, -(-n // nr) + 1):
        width = slivers * nr
        if -(-m // mc) * -(-n // width) < cores or (widest and width > widest):
            break
        if width > nr and -(-n // (width - nr)) == -(-n // width):
            continue   # a narrower nc gives the same blocks
        times[width] = _finish(m, n, mc, width, nr, cores)
    soonest = min(times.values())
    if times[nc] * BALANCE_GAIN <= soonest:
        return nc
    return max(width for width, time in times.items() if time * BALANCE_GAIN <= soonest)


def l2_set_rows(row_bytes: int, block_bytes: int, caches, rows: int | None = None) -> int:
    """The most rows of a block of A read in place (`block_bytes` of each row, rows `row_bytes` apart), up to `rows`
    (the GEMM's M: no block is taller; counting stops there), that L2 holds
    before more of their lines fall into one L2 set than the set has ways. Rows a multiple of 8 KB apart share a
    sixteenth of the sets of a 1 MB 8-way L2 (128 KB a way): an mc x kc block of half of L2 then does not stay there
    for the next sliver of B, and every row tile comes from L3 again. Numpy's arrays of 4 MB or more lie in huge pages
    (madvise), so the virtual addresses decide the sets. Measured, Zen 4 (1 MB, 8 ways), 1 core, 1024x1000x2048 (rows
    8 KB apart, kc 512: 16 rows a set at mc 256), against numpy: AVX2 mc 256 -> 128, two checkouts in turn, each
    in its own process (4 rounds), 0.961-0.974 -> 0.976-0.990x; over random layouts (benchmarks/gemm_layouts.py, 4
    layouts, 2 seeds) 0.970 / 0.969 -> 0.989 / 0.996x; AVX-512 (6x16, mc 210 -> 114) even, 1.02-1.04x. 1024^3 (4 KB
    apart: 8 rows a set at mc 256) measured even at mc 128, and keeps 256."""
    whole = caches.l2 // max(1, block_bytes)
    fits = _l2_set_rows(row_bytes, block_bytes, caches.line_bytes, max(1, caches.l2_way_bytes // caches.line_bytes),
                        caches.l2_ways, min(whole, rows or whole))
    return whole if rows and fits >= rows else fits   # all of the GEMM's rows fit: no bound


@functools.lru_cache(maxsize=256)
def _l2_set_rows(row_bytes: int, block_bytes: int, line: int, sets: int, ways: int, limit: int) -> int:
    lines_per_set = Counter()
    for row in range(limit):
        first, last = row * row_bytes // line, (row * row_bytes + block_bytes - 1) // line
        touched = [(position % sets) for position in range(first, min(last + 1, first + sets))]
        if any(lines_per_set[s] >= ways for s in touched):
            return max(1, row)
        lines_per_set.update(touched)
    return limit


def _blocks(m: int, n: int, k: int, tile: GemmTile, target, batch: int, per_core: int,
            cores: int, depth: int, widest: int | None = None) -> dict[str, int]:
    """mc, kc, nc (module docstring) for kc near `depth` and nc at most `widest`, columns split for `per_core` work
    items per core of `cores`."""
    caches = cache_sizes(target)
    kc = _even(k, depth, 8)
    mc = _even(m, max(tile.mr, min(caches.l2 // 2 // (kc * 4), l2_set_rows(k * 4, kc * 4, caches, m))), tile.mr)
    n_padded = _round_up(n, tile.nr)
    nc = max(tile.nr, min(n_padded, caches.l3 // 4 // (kc * 4) // tile.nr * tile.nr,
                          widest // tile.nr * tile.nr if widest else n_padded))
    nc = _even(n_padded, nc, tile.nr)
    wanted = -(-per_core * cores // batch) if cores > 1 else 1
    row_blocks = -(-m // mc)
    if row_blocks * -(-n // nc) < wanted:   # more column blocks, each at least MIN_COLUMN_SLIVERS wide
        nc = max(min(nc, MIN_COLUMN_SLIVERS * tile.nr),
                 _even(n_padded, _round_up(-(-n_padded * row_blocks // wanted), tile.nr), tile.nr))
    wanted = -(-BALANCED_ITEMS_PER_CORE * cores // batch) if cores > 1 else 1
    column_blocks = -(-n // nc)
    if row_blocks * column_blocks < wanted and m >= 2 * MIN_SPLIT_ROWS:   # tall: more row blocks, cheaply
        rows_wanted = -(-wanted // column_blocks)
        mc = min(mc, _even(m, _round_up(max(MIN_SPLIT_ROWS, -(-m // rows_wanted)), tile.mr), tile.mr))
        row_blocks = -(-m // mc)
        if row_blocks * column_blocks < wanted:   # rows at their floor: the rest from the columns
            nc = max(min(nc, MIN_COLUMN_SLIVERS * tile.nr),
                     _even(n_padded, _round_up(-(-n_padded * row_blocks // wanted), tile.nr), tile.nr))
    wanted = -(-MIN_ITEMS_PER_CORE * cores // batch) if cores > 1 else 1
    if row_blocks * -(-n // nc) < wanted:   # then more row blocks, each at least 2 tiles high
        mc = max(min(mc, 2 * tile.mr), _even(m, _round_up(-(-m * -(-n // nc) // wanted), tile.mr), tile.mr))
    return {"mc": mc, "kc": kc, "nc": nc}


def packed_tiles(target, m: int, n: int, nr: int) -> tuple[str, ...]:
    """The register tiles `nr` columns wide, the default first: those a B packed in nr-wide slivers (nn.dense_pack)
    can run; empty when no candidate tile is that wide."""
    return tuple(tile for tile in register_tiles(target, m, n) if int(tile.split("x")[1]) == nr)


def default_packed_columns(target, m: int, n: int) -> int:
    """nr of the default register tile of an M x N GEMM: the sliver width a constant B is packed in at compile
    time (cpu_llvm_pack_dense_weights)."""
    return int(register_tiles(target, m, n)[0].split("x")[1])


def gemm_space(m: int, n: int, k: int, target, batch: int = 1, nr: int | None = None) -> TuningSpace:
    """Knobs tile, mc, kc, nc of one GEMM, or of each of a batch of them (see the module docstring); with `nr`, of
    a GEMM whose B comes packed in nr-wide slivers (nn.dense_pack: only tiles that wide, no pack_b knob)."""
    tiles = register_tiles(target, m, n) if nr is None else packed_tiles(target, m, n, nr)
    tile = parse_tile(tiles[0], target)
    default = _defaults(m, n, k, tile, target, batch, prepacked=nr is not None)
    mcs = {c for c in (2 * tile.mr, 8 * tile.mr, 16 * tile.mr, 32 * tile.mr, 64 * tile.mr)
           if c <= _round_up(m, tile.mr)}
    kcs = {c for c in (64, 128, 192, 256, 384, 512) if c <= _round_up(k, 8)}
    ncs = {c for c in (4 * tile.nr, 8 * tile.nr, 16 * tile.nr, 64 * tile.nr) if c <= _round_up(n, tile.nr)}
    knobs = (Knob("mc", tuple(sorted(mcs | {default["mc"]})), default["mc"]),
             Knob("kc", tuple(sorted(kcs | {default["kc"]})), default["kc"]),
             Knob("nc", tuple(sorted(ncs | {default["nc"]})), default["nc"]),
             Knob("tile", tiles, tiles[0]))
    if nr is None:
        knobs += (Knob("pack_b", (True, False), _packs_b(m, default["mc"])),)
    return TuningSpace((*knobs, Knob("pack_a", (True, False), PACK_A)))


PACK_ABOVE_ROWS = 64
"""Rows of A from which copying B into slivers pays (measured, 1 thread, CPU time): in place 1.2-1.5x
faster at M = 49 and 64 on AVX-512 (7x32 and 8x32 tiles) and 1.03-1.15x on AVX2 (5x16, 6x16); the copy
1.1x faster at M = 196 on AVX-512 (about even on AVX2)."""


def _packs_b(m: int, mc: int) -> bool:
    """Pack B when more than PACK_ABOVE_ROWS rows reuse each sliver in more than one row block; with a
    single row block every sliver is read once, and B in place (its slivers copied where their rows crowd
    an L1 set) saves packing's extra pass. Measured, 1 core, in place against packed: 192x4096x1024 0.93x
    against 0.84x numpy (AVX-512), 0.91x against 0.84x (AVX2); 196x1000x1024 1.02x against 1.00x; with
    four row blocks (196x256x2304, mc 49) packing wins, 1.01x against 0.94x."""
    return m > PACK_ABOVE_ROWS and -(-m // mc) > 1


PACK_A = False
"""The pack_a knob's default: A is read where it lies, not copied into row tiles first (sgemm.py); the tuner may still
pack it. The micro-kernel prefetches the next row tile in place where K is one block (sgemm._prefetches_a), and an
mc x kc block of A comes from L3 once and stays in L2 for every sliver; packed, A costs one more pass, written to
memory and read back. Measured, Zen 4 (L2 1 MB), two processes alternating (3 rounds at 1024x1000x2048, 2
elsewhere), against numpy, packed -> in place: AVX2 at 2 threads 1024x1000x2048 0.94-0.95 -> 0.96-0.97x, 1024^3
0.96-0.97 -> 0.96-1.00x, 3072x768x768 0.93-0.97 -> 0.97-1.00x, 960^3 and 1000^3 even (0.97-0.99x), 49x512x4608
1.01-1.08 -> 1.04x; at 1 thread 1024x1000x2048 0.96 -> 0.98x, 1024^3 and 3072x768x768 even (0.97-1.02x); AVX-512 at
2 threads 1024x1000x2048 0.99-1.00 -> 1.02-1.04x, 49x512x4608 1.09-1.13 -> 1.16-1.28x, 1024^3 even; at 1 thread
1024^3 1.01-1.03 -> 1.06-1.09x, 3072x768x768 1.02-1.03 -> 1.06-1.08x, 1024x1000x2048 0.99-1.00 -> 1.03x. Packing had
won on Sapphire Rapids (KVM, L2 2 MB) before the micro-kernel prefetched the next row tile (AVX-512 1024^3 0.59 ->
0.80x numpy, AVX2 1000^3 0.86 -> 0.91x): that host has not been measured since."""


def gemm_plan(m: int, n: int, k: int, target, config, b_layout: str, batch: int = 1,
              nr: int | None = None) -> GemmPlan:
    """The GemmPlan of a config of gemm_space (mc and nc rounded to the chosen tile); `nr`: the sliver width of a B
    that comes packed (b_layout "packed"), which the tile must have."""
    prepacked = b_layout == "packed"
    if prepacked and nr is None:
        raise ValueError("gemm_plan: a packed B needs its sliver width nr")
    tiles = packed_tiles(target, m, n, nr) if prepacked else register_tiles(target, m, n)
    tile = parse_tile(config.get("tile") or tiles[0], target)
    if prepacked and tile.nr != nr:
        raise ValueError(f"gemm_plan: tile {tile.mr}x{tile.nr} does not read B packed in slivers of {nr}")
    default = _defaults(m, n, k, tile, target, batch, prepacked=prepacked)
    mc = _round_up(int(config.get("mc", default["mc"])), tile.mr)
    nc = _round_up(int(config.get("nc", default["nc"])), tile.nr)
    pack_b = bool(config.get("pack_b", _packs_b(m, mc))) or b_layout != "kn"
    kc = int(config.get("kc", default["kc"]))
    pack_a = bool(config.get("pack_a", PACK_A)) and k > 0
    pack_panels = not pack_b and copies_panels(m, n, k, tile, kc, cache_sizes(target))
    return GemmPlan(tile=tile, m=m, n=n, k=k, mc=mc, nc=nc, kc=kc, b_layout=b_layout, pack_b=pack_b,
                    pack_panels=pack_panels,
                    copy_slivers=not pack_b and not pack_panels and crowds_l1_sets(n, kc, cache_sizes(target)),
                    batch=batch, pack_a=pack_a,
                    nc_single=_single_panel_columns(m, n, k, tile, target, batch, config, default)
                    if pack_panels else 0)


def _single_panel_columns(m: int, n: int, k: int, tile: GemmTile, target, batch: int, config,
                          default: dict[str, int]) -> int:
    """The column block of a GEMM that copies panels of a B read in place, for a call that finds itself on one
    thread (GemmPlan.single_blocks; 0: the plan's own): the analytic nc for one core, unless the config sets mc,
    nc or kc to other than their defaults (a tuned record was measured with its blocks at its thread count).
    Split for several threads, each panel is a shorter run of each of B's rows, which comes from memory. Measured,
    Zen 1 (2 vCPUs), 1 thread, one process alternating both plans: 49x512x4608 -mcpu=haswell (4x24, nc 264 ->
    528) 1.04-1.05x faster, native (4x16, 128 -> 512) 1.02-1.08x, 64x768x3072 (192 -> 768) 1.02-1.05x;
    196x256x2304, 197x768x3072, 64x256x1024 and 49x2048x512 even within the noise. Without a cap on the panel,
    128x3072x768 (768 -> 3072 columns, a 1.9 MB panel) ran 0.96x. Not for packed B: 1024^3, 1000^3 and
    3072x768x768 ran 0.96-0.98x as fast with the one-core row and column blocks (344 x 1032 for 256 x 264 at
    1024^3). `default`: the blocks of the target's cores (_defaults)."""
    tuned = any(int(config.get(key, default[key])) != default[key] for key in ("mc", "nc", "kc"))
    if _cores(target) <= 1 or tuned:
        return 0
    single = _defaults(m, n, k, tile, target, batch, cores=1)
    if (single["mc"], single["kc"]) != (default["mc"], default["kc"]):
        return 0
    # (the one-core panel, like every panel, stays in PANEL_L2_SHARE of L2: _defaults)
    return single["nc"] if single["nc"] > default["nc"] else 0


def packs_panels(n: int, k: int, caches) -> bool:
    """Whether a B read in place is copied into panels first (sgemm._pack_panel: each work item's kc x nc block,
    a row at a time), rather than read by the micro-kernel where it lies. When B is larger than half of L2 it
    comes from memory, where a sliver's rows, a page or more apart, arrive one miss at a time while the panel's
    rows stream. A smaller B is read from L2 in place, or, where its rows crowd the L1 sets (crowds_l1_sets),
    copied a sliver at a time just before use: a GPT block (64 tokens, 256 features, its B 0.25-1 MB) ran
    1.02-1.03x slower with panels there, whose copy is read from L2 rather than L1.
    Measured, 1 core, Sapphire Rapids (KVM), each sliver copied alone (the rule before) against panels: AVX2
    48x4608x512 0.63 -> 0.82x numpy, 64x4096x1024 0.71 -> 0.89x; in place (no copy) against panels: AVX2
    49x512x4608 0.66-0.80 -> 0.79-0.87x, 64x4096x1024 0.32 -> 0.89x, AVX-512 49x512x4608 1.09 -> 1.36x,
    64x4096x1024 0.45 -> 1.26x; but a B in L2 loses: 64x256x1024 1.01 -> 0.92x, 16x512x512 0.94 -> 0.85x."""
    return k * n * 4 > caches.l2 // 2


def copies_panels(m: int, n: int, k: int, tile: GemmTile, kc: int, caches) -> bool:
    """packs_panels, unless a single row tile reads B (M <= mr: a GEMV-like layer at batch 1) and its rows do not
    crowd the L1 sets (crowds_l1_sets): each float of B is then read once, and copied first it would be read
    twice and written once. Measured, Zen 4, 1 core, one process alternating, panels against in place, GFLOP/s:
    AVX-512 1x1000x1024 11.7 -> 21.7 (2 cores 15.0 -> 23.5), 4x1000x1024 38.3 -> 72.9, 1x1000x4096 8.3 -> 10.8;
    AVX2 1x1000x1024 7.6 -> 20.6. Rows that crowd one set lose in place: 1x4096x1024 10.1 -> 6.1, 1x2048x2048
    8.3 -> 5.6."""
    if m <= tile.mr and not crowds_l1_sets(n, kc, caches):
        return False
    return packs_panels(n, k, caches)


def crowds_l1_sets(n: int, kc: int, caches) -> bool:
    """Whether the kc rows of a sliver, n * 4 bytes apart, put more lines into one L1 set than the set has ways
    (rows 16 KB apart: every row in one set), so that they evict each other before the next row tile reads
    them again. Measured, 1 core, AVX2, 64 x N x 1024 read in place: N = 4000 0.97x numpy, N = 4096 0.68x."""
    sets = max(1, caches.l1d_way_bytes // 64)
    rows_per_set = Counter((row * n * 4 // 64) % sets for row in range(kc))   # a row's own lines: other sets
    return max(rows_per_set.values()) > caches.l1d_ways


@functools.cache
def sgemm_intrinsic(plan: GemmPlan):
    """The te intrinsic computing one whole GEMM of `plan` (shapes fixed), or its whole batch, implemented
    by sgemm.py."""
    from tensorkiln import te
    from tensorkiln.sdk.intrinsic_impl import SourceImpl

    k = te.reduce_axis((0, plan.k), name="k")
    g = plan.batch
    if g > 1 and plan.b_layout == "nk":
        a, w = te.placeholder((g, plan.m, plan.k), name="A"), te.placeholder((g, plan.n, plan.k), name="W")
        c = te.compute((g, plan.m, plan.n), lambda b, i, j: te.sum(a[b, i, k] * w[b, j, k], axis=k), name="C")
    elif g > 1:
        a, b = te.placeholder((g, plan.m, plan.k), name="A"), te.placeholder((g, plan.k, plan.n), name="B")
        c = te.compute((g, plan.m, plan.n), lambda x, i, j: te.sum(a[x, i, k] * b[x, k, j], axis=k), name="C")
    elif plan.b_layout == "packed":
        nr = plan.tile.nr
        a, bp = te.placeholder((plan.m, plan.k), name="A"), te.placeholder((plan.slivers, plan.k, nr), name="Bp")
        c = te.compute((plan.m, plan.n), lambda i, j: te.sum(a[i, k] * bp[j // nr, k, j % nr], axis=k), name="C")
    elif plan.b_layout == "nk":
        a, w = te.placeholder((plan.m, plan.k), name="A"), te.placeholder((plan.n, plan.k), name="W")
        c = te.compute((plan.m, plan.n), lambda i, j: te.sum(a[i, k] * w[j, k], axis=k), name="C")
    else:
        a, b = te.placeholder((plan.m, plan.k), name="A"), te.placeholder((plan.k, plan.n), name="B")
        c = te.compute((plan.m, plan.n), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    name = plan.symbol.removeprefix("tk_")
    attrs = {"mr": plan.tile.mr, "nr": plan.tile.nr, "mc": plan.mc, "nc": plan.nc, "kc": plan.kc,
             "dtype": "float32"}
    return te.decl_tensor_intrin(c, name, attrs=attrs,
                                 implementations={"cpu_llvm": SourceImpl("llvm", sgemm_source(plan), plan.symbol,
                                                                     vectorized=True)})
