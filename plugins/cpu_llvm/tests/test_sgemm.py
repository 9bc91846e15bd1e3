"""The whole-GEMM call (sgemm.py) at shapes no register tile divides, against numpy.

Each case builds one nn.matmul / nn.dense group the way tk.compile does (the strategy's
compute and schedule, optionally with other knob values) and checks it at 1 and 2
threads, for the host's ISA and AVX2 (-mcpu=haswell).
"""
from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln.compiler.strategy import select
from tensorkiln_cpu_llvm.host import cache_sizes, parse_size
from tensorkiln_cpu_llvm.sgemm import GemmPlan, sgemm_source
from tensorkiln_cpu_llvm.strategies.gemm_blocking import gemm_plan, gemm_space, register_tiles
from tensorkiln_cpu_llvm.ukernels import GemmTile

RNG = np.random.default_rng(7)


def _build(m, n, k, target_text, dense=False, config=None):
    target = tk.target(target_text)
    a = graph.var("A", shape=(m, k))
    call = graph.nn.dense(a, graph.var("B", shape=(n, k))) if dense else \
        graph.nn.matmul(a, graph.var("B", shape=(k, n)))
    ta = te.placeholder((m, k), name="A")
    tb = te.placeholder((n, k) if dense else (k, n), name="B")
    choice = select([call], [call.op.compute([ta, tb], call.attrs, call.checked_type)], target)
    assert choice.name == ("cpu_llvm.dense_ukernel" if dense else "cpu_llvm.matmul_ukernel")
    knobs = {**choice.config, **(config or {})}
    if knobs.get("tile") == "widest":   # the host's widest register tile (the test runs on AVX2 hosts too)
        knobs["tile"] = max(register_tiles(target), key=lambda t: int(t.split("x")[1]))
    c = choice.implementation.compute([ta, tb], call.attrs, call.checked_type, target, knobs)
    module = tk.build(choice.implementation.schedule([c], target, knobs), [ta, tb, c], target=target, name="gemm")
    return module, knobs


def _check(module, m, n, k, dense=False):
    a = RNG.standard_normal((m, k), dtype=np.float32)
    b = RNG.standard_normal((n, k) if dense else (k, n), dtype=np.float32)
    expected = a @ (b.T if dense else b)
    for threads in (1, 2):
        module.loaded.set_num_threads(threads)      # this module only: no process-wide setting left behind
        out = np.full((m, n), np.nan, np.float32)
        module(a, b, out)
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("m, n, k, target, dense, config", [
    (1, 40, 29, "llvm", False, None),                     # one row, ragged sliver, B in place
    (3, 70, 513, "llvm -mcpu=haswell", False, None),
    (37, 45, 29, "llvm", False, None),                    # every edge at once
    (37, 45, 29, "llvm", True, None),                     # dense: W[N, K] packed by a transposing copy
    (53, 97, 300, "llvm -mcpu=haswell", False, {"kc": 64, "mc": 12, "nc": 32}),   # several K and row blocks
    (49, 130, 700, "llvm", False, {"pack_b": False}),     # in place with a ragged last sliver, K blocks, 2 threads
    (100, 64, 33, "llvm", False, {"tile": "14x32"}),
    (64, 48, 40, "llvm -mcpu=haswell", True, {"tile": "4x24"}),
    # enough work (> 2 x MIN_FLOPS_PER_THREAD) for the 2-thread runs to fork a team
    (131, 150, 270, "llvm -mcpu=haswell", False, {"kc": 64, "mc": 24, "nc": 32}),
    (131, 150, 270, "llvm", True, None),
    # in place with rows 4 KB apart: slivers copied to the stack (gemm_blocking.crowds_l1_sets), K blocks
    (30, 1024, 200, "llvm -mcpu=haswell -l1_cache=32K -l1_ways=8 -l2_cache=64M", False, {"pack_b": False, "kc": 64}),
    # 4160 B apart, 512 rows over a 4-way L1: 8 rows a set, copied; the ragged last sliver (nr 32) from the buffer
    (9, 1040, 600, "llvm -l1_cache=16K -l1_ways=4 -l2_cache=64M", False, {"pack_b": False, "kc": 512}),
    # B larger than half of L2: panels of several column items, K blocks, a ragged last sliver, 2 threads
    (20, 700, 500, "llvm -l2_cache=256K", False, {"pack_b": False, "kc": 128}),
    (45, 333, 260, "llvm -mcpu=haswell -l2_cache=128K", False, {"pack_b": False, "kc": 64, "mc": 24}),
    # packed B with a ragged last sliver
    (20, 16 * 19 + 5, 40, "llvm -mcpu=haswell", False, {"pack_b": True}),
    # A packed into row tiles: a last tile of 1 row (its missing rows copies), K blocks, every B layout path
    (53, 97, 300, "llvm -mcpu=haswell", False, {"pack_a": True, "kc": 64, "mc": 12, "nc": 32}),
    (49, 130, 700, "llvm", False, {"pack_a": True, "pack_b": False}),
    (131, 150, 270, "llvm", True, {"pack_a": True}),
    (97, 200, 130, "llvm", False, {"pack_a": True, "tile": "widest", "kc": 64}),   # 6x64 on AVX-512, 4x24 on AVX2
    (1, 40, 29, "llvm", False, {"pack_a": True}),
])
def test_gemm_matches_numpy_at_awkward_shapes(m, n, k, target, dense, config):
    module, knobs = _build(m, n, k, target, dense, config)
    _check(module, m, n, k, dense)


@settings(max_examples=10, deadline=None)
@given(m=st.integers(4, 150), n=st.integers(16, 200), k=st.integers(1, 300), dense=st.booleans(), data=st.data())
def test_random_gemms_with_random_knobs_match_numpy(m, n, k, dense, data):
    """Any shape, with every knob drawn from its candidates (register tile, blocks, packing of A and B),
    against numpy at 1 and 2 threads, for the host's ISA or AVX2."""
    target = data.draw(st.sampled_from(["llvm", "llvm -mcpu=haswell"]), label="target")
    space = gemm_space(m, n, k, tk.target(target))
    config = {knob.name: data.draw(st.sampled_from(knob.candidates), label=knob.name) for knob in space.knobs}
    module, _ = _build(m, n, k, target, dense, config)
    _check(module, m, n, k, dense)


def _build_batch(g, m, n, k, target_text, config=None):
    target = tk.target(target_text)
    call = graph.nn.matmul(graph.var("A", shape=(g, m, k)), graph.var("B", shape=(g, k, n)))
    ta, tb = te.placeholder((g, m, k), name="A"), te.placeholder((g, k, n), name="B")
    choice = select([call], [call.op.compute([ta, tb], call.attrs, call.checked_type)], target)
    assert choice.name == "cpu_llvm.matmul_ukernel"
    knobs = {**choice.config, **(config or {})}
    c = choice.implementation.compute([ta, tb], call.attrs, call.checked_type, target, knobs)
    return tk.build(choice.implementation.schedule([c], target, knobs), [ta, tb, c], target=target, name="bgemm")


@pytest.mark.parametrize("g, m, n, k, target, config", [
    (4, 68, 196, 68, "llvm -mcpu=haswell", None),          # shufflenet's grouped 1x1 conv: B in place, ragged
    (4, 68, 196, 68, "llvm", {"pack_b": True, "mc": 32}),  # every B packed, slivers numbered across the batch
    (3, 37, 45, 29, "llvm", None),
    (5, 131, 150, 270, "llvm -mcpu=haswell", {"kc": 64, "mc": 24, "nc": 32}),   # 2 threads share the batch
    (2, 9, 1040, 600, "llvm -l1_cache=16K -l1_ways=4 -l2_cache=64M", {"pack_b": False, "kc": 512}),  # copied
    (3, 20, 500, 300, "llvm -l2_cache=256K", {"pack_b": False, "kc": 128}),             # panels of a large B
    (3, 37, 45, 290, "llvm", {"pack_a": True, "kc": 64}),                 # row tiles numbered across the batch
    (3, 70, 100, 64, "llvm -mcpu=haswell", {"pack_a": True, "pack_b": True, "mc": 24}),
])
def test_a_batch_of_gemms_is_one_call(g, m, n, k, target, config):
    """A batch of matmuls runs as one call whose work items span the batch, against numpy."""
    module = _build_batch(g, m, n, k, target, config)
    assert sum("tk_sgemm" in line and f"_g{g}_" in line for line in module.get_source("ll").splitlines()) > 0
    a = RNG.standard_normal((g, m, k), dtype=np.float32)
    b = RNG.standard_normal((g, k, n), dtype=np.float32)
    for threads in (1, 2):
        module.loaded.set_num_threads(threads)
        out = np.full((g, m, n), np.nan, np.float32)
        module(a, b, out)
        np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("n, kc, ways, copies", [(1024, 344, 12, True), (4096, 176, 12, True), (512, 384, 12, True),
                                                 (1000, 344, 12, False), (4000, 344, 12, False), (1040, 64, 8, False),
                                                 (1040, 512, 4, True)])
def test_b_is_copied_in_panels_when_it_outgrows_l2_else_slivers_when_its_rows_crowd_one_l1_set(n, kc, ways, copies):
    """crowds_l1_sets against a count of the rows of a kc-row sliver in each set of a 4 KB-way L1; a B read in
    place is copied into panels when it is more than half of L2, whatever its rows, else a sliver at a time
    when its rows crowd."""
    from tensorkiln_cpu_llvm.strategies.gemm_blocking import crowds_l1_sets

    caches = cache_sizes(tk.target(f"llvm -l1_cache={4 * ways}K -l1_ways={ways}"))
    crowded = max(sum(1 for row in range(kc) if (row * n * 4 // 64) % 64 == s) for s in range(64))
    assert crowds_l1_sets(n, kc, caches) == copies == (crowded > ways)
    for l2, large in (("64M", False), ("256K", True)):   # B is kc x n: 0.25-2.8 MB
        plan = gemm_plan(64, n, kc, tk.target(f"llvm -mcpu=haswell -l1_cache={4 * ways}K -l1_ways={ways} "
                                              f"-l2_cache={l2}"), {"pack_b": False, "kc": kc}, "kn")
        assert plan.pack_panels == large and ("_panels_" in plan.symbol) == large
        assert plan.copy_slivers == (copies and not large) and ("_copied_" in plan.symbol) == plan.copy_slivers


@pytest.mark.parametrize("m, n, panels", [(1, 1000, False), (4, 1000, False), (5, 1000, True), (1, 1024, True),
                                           (1, 4096, True)])
def test_a_b_read_by_one_row_tile_is_not_copied_into_panels_unless_its_rows_crowd_one_l1_set(m, n, panels):
    """A GEMV-like GEMM (M <= mr: one row tile reads each sliver once) reads a large B where it lies: copied into
    panels it would be read twice and written once. Rows n * 4 bytes apart that crowd one L1 set (N = 1024,
    4096) are still copied. Every product matches numpy at 1 and 2 threads."""
    target_text = "llvm -mcpu=haswell -l1_cache=32K -l1_ways=8 -l2_cache=256K"   # B of 300 x 1000+ floats is large
    plan = gemm_plan(m, n, 300, tk.target(target_text), {"tile": "4x24"}, "kn")
    assert not plan.pack_b and plan.pack_panels == panels
    _check(_build(m, n, 300, target_text, config={"tile": "4x24"})[0], m, n, 300)


def test_register_tile_and_a_packing_follow_the_cpu_and_the_caches():
    """6x64 where two 512-bit FMA pipes need fewer loads per FMA (unless it pads N by more than a sixteenth),
    6x16 where one 512-bit FMA issues a cycle (ONE_FMA512_TILE_ROWS); A read in place by default (PACK_A), packed
    when the config asks."""
    caches = "-l1_cache=48K -l2_cache=2M -l3_cache=32M"
    assert gemm_plan(1024, 1024, 1024, tk.target(f"llvm -mcpu=skylake-avx512 {caches}"), {}, "kn").tile == \
        GemmTile(6, 64, 16)
    assert gemm_plan(1024, 1024, 1024, tk.target(f"llvm -mcpu=znver4 {caches}"), {}, "kn").tile == GemmTile(6, 16, 16)
    assert gemm_plan(28, 784, 28, tk.target(f"llvm -mcpu=znver4 {caches}"), {}, "kn").tile == GemmTile(4, 16, 16)
    assert gemm_plan(1024, 40, 1024, tk.target(f"llvm -mcpu=skylake-avx512 {caches}"), {}, "kn").tile.nr == 32
    assert gemm_plan(1024, 1024, 1024, tk.target(f"llvm -mcpu=haswell {caches}"), {}, "kn").tile == GemmTile(4, 24, 8)
    target = tk.target(f"llvm -mcpu=haswell {caches}")
    # A comes from L3 once per block and stays in L2 for every sliver, its next row tile prefetched: in place,
    # whatever its size or B's width
    for m, n, k in ((1024, 1024, 1024), (256, 1024, 256), (3136, 24, 256), (3136, 384, 256), (49, 512, 4608)):
        assert not gemm_plan(m, n, k, target, {}, "kn").pack_a
    assert gemm_plan(1024, 1024, 1024, target, {"pack_a": True}, "kn").pack_a
    with pytest.raises(ValueError, match="pack_a needs K > 0"):
        GemmPlan(tile=GemmTile(4, 24, 8), m=16, n=64, k=0, mc=16, nc=48, kc=8, pack_a=True)
    assert "_pa_" in gemm_plan(1024, 1024, 1024, target, {"pack_a": True}, "kn").symbol


@pytest.mark.parametrize("m, n, half_width, full_width", [
    (49, 512, "4x16", "4x24"),      # 24-column slivers pad N to 528
    (196, 256, "4x16", "6x16"),     # 264: 11 slivers, split 6 / 5 over two threads; 198 x 256 is less
    (3072, 768, "4x24", "4x24"),    # neither pads
    (1000, 1000, "4x24", "4x24"),   # both pad N to 1008
    (64, 4096, "4x24", "4x24"),     # 4104 against 4096: under a fiftieth
    (64, 256, "4x16", "4x24"),      # 6x16 pads M to 66 as much as 4x24 pads N to 264
])
def test_avx2_takes_the_register_tile_that_pads_least(m, n, half_width, full_width):
    """The AVX2 tile that pads M x N least is the default (gemm_blocking.PADDING_GAIN): of 4x24 and 6x16 (12
    accumulators), and 4x16 too where host.CpuFacts.fma256_pipes is 1 (Zen 1 splits 256-bit operations in
    halves: 8 accumulators are enough); 2 on Haswell."""
    from tensorkiln_cpu_llvm.host import cpu_facts

    zen1, haswell = tk.target("llvm -mcpu=znver1"), tk.target("llvm -mcpu=haswell")
    assert (cpu_facts(zen1).fma256_pipes, cpu_facts(haswell).fma256_pipes) == (1, 2)
    assert cpu_facts(tk.target("llvm -mcpu=skylake-avx512")).fma256_pipes == 2
    assert register_tiles(zen1, m, n)[0] == half_width
    assert register_tiles(haswell, m, n)[0] == full_width
    assert sorted(register_tiles(zen1, m, n)) == sorted(register_tiles(haswell, m, n))   # the same candidates


def test_a_stand_in_scheduling_model_keeps_the_host_cpus_pipes(monkeypatch):
    """With -mcpu=native on a Zen 1 host, LLVM schedules for haswell (host._TUNING_STAND_INS), but the
    facts are the host's: one 256-bit FMA a cycle."""
    from tensorkiln_cpu_llvm import host

    monkeypatch.setattr(host, "_host_cpu", lambda: ("znver1", "+avx,+avx2,+fma,-avx512f"))
    config = host.machine_config(tk.target("llvm"))
    assert (config.cpu, config.tuned_from) == ("haswell", "znver1")
    assert host.cpu_facts(tk.target("llvm")).fma256_pipes == 1


def test_a_plan_counts_its_work_and_refuses_blocks_off_the_tile():
    plan = GemmPlan(tile=GemmTile(4, 16, 8), m=5, n=20, k=1, mc=8, nc=16, kc=8)
    assert (plan.row_blocks, plan.column_blocks, plan.items, plan.slivers, plan.ragged) == (1, 2, 2, 2, True)
    in_place = GemmPlan(tile=GemmTile(4, 16, 8), m=5, n=20, k=1, mc=8, nc=16, kc=8, pack_b=False)
    assert in_place.packed_slivers == 1          # only the ragged last sliver is copied
    with pytest.raises(ValueError, match="multiple of mr=4"):
        GemmPlan(tile=GemmTile(4, 16, 8), m=5, n=20, k=1, mc=6, nc=16, kc=8)
    with pytest.raises(ValueError, match="read in place"):
        GemmPlan(tile=GemmTile(4, 16, 8), m=5, n=20, k=1, mc=8, nc=16, kc=8, b_layout="nk", pack_b=False)


def test_blocking_follows_the_caches_and_target_options():
    target = tk.target("llvm -mcpu=haswell -l1_cache=16K -l2_cache=256K")
    assert cache_sizes(target).l1d == 16 * 1024 and cache_sizes(target).l2 == 256 * 1024
    small = gemm_plan(1024, 1024, 1024, target, {}, "kn")
    large = gemm_plan(1024, 1024, 1024, tk.target("llvm -mcpu=haswell -l1_cache=64K -l2_cache=2M"), {}, "kn")
    assert (small.tile.mr, small.tile.nr) == (4, 24)
    assert small.kc < large.kc and small.mc < large.mc                  # bigger caches, bigger blocks
    # a packed B's sliver streams from L2 beside the row tile: one and a half times L1 at most
    assert small.pack_b and 16 * 1024 // 2 < small.kc * small.tile.nr * 4 <= 16 * 1024 * 3 // 2
    # blocks even out over awkward extents: 1000 rows are not one block of mc and a sliver
    plan = gemm_plan(1000, 1000, 1000, target, {}, "kn")
    assert plan.m - (plan.row_blocks - 1) * plan.mc > plan.mc // 2
    space = gemm_space(1000, 1000, 1000, target)
    assert {knob.name for knob in space.knobs} == {"mc", "kc", "nc", "tile", "pack_b", "pack_a"}
    assert parse_size("48K") == 49152 and parse_size("32768K") == 32 << 20 and parse_size("1M") == 1 << 20


def test_a_b_read_in_place_keeps_its_sliver_in_l1_and_its_panel_in_l2():
    """A B read in place is read again by every row tile: its kc x nr sliver fills two thirds of L1 at most when it
    is copied into panels (_panel_depth; half when read where it lies), not the deeper block of a packed B. Copied
    into panels, each kc x nc panel takes a quarter of L2 at most (PANEL_L2_SHARE), at one thread and at two, A
    in L2 (64 x 1024) or beyond it (49 x 4608). Both plans match numpy."""
    from tensorkiln_cpu_llvm.strategies.gemm_blocking import PANEL_L2_SHARE

    l1, l2 = 32 * 1024, 1 << 20
    for threads in (1, 2):
        target_text = f"llvm -mcpu=haswell -num_threads={threads} -l1_cache=32K -l2_cache=1M"
        packed = gemm_plan(1024, 1024, 1024, tk.target(target_text), {}, "kn")
        narrow = gemm_plan(64, 4096, 1024, tk.target(target_text), {}, "kn")
        wide = gemm_plan(49, 512, 4608, tk.target(target_text), {}, "kn")
        assert packed.pack_b and packed.kc * packed.tile.nr * 4 > l1 // 2
        for plan in (narrow, wide):
            assert plan.pack_panels and l1 // 2 < plan.kc * plan.tile.nr * 4 <= l1 * 2 // 3
        for plan in (narrow, wide):
            assert not plan.pack_a and plan.kc * max(plan.nc, plan.single_blocks[1]) * 4 <= l2 // PANEL_L2_SHARE
    _check(_build(64, 4096, 1024, target_text)[0], 64, 4096, 1024)


def test_a_panel_prefetches_the_next_panel_into_l2_while_it_computes():
    """A GEMM copying panels of a B read in place asks for the next block of K's rows of its panel (into L2,
    locality 2) while the current panel computes, sliver by sliver; with a single block of K there is no next
    panel. The products are right with a ragged last block of K, at 1 and 2 threads."""
    from tensorkiln_cpu_llvm.sgemm import NEXT_PANEL_LOCALITY

    target_text = "llvm -mcpu=haswell -l2_cache=256K"
    asked = f"i32 0, i32 {NEXT_PANEL_LOCALITY}, i32 1)"
    module, knobs = _build(20, 700, 500, target_text, config={"pack_b": False, "kc": 128})   # 4 blocks of K
    assert asked in module.get_source("ll")
    _check(module, 20, 700, 500)
    single, _ = _build(20, 700, 120, target_text, config={"pack_b": False, "kc": 128})     # one block of K
    assert asked not in single.get_source("ll")
    _check(single, 20, 700, 120)


def test_a_bad_cache_option_is_a_clear_error():
    with pytest.raises(tk.ir.TensorkilnError, match="l2_cache=lots"):
        cache_sizes(tk.target("llvm -l2_cache=lots"))


def test_host_caches_are_read_from_sysfs_with_the_l1_and_l2_ways(tmp_path):
    from tensorkiln_cpu_llvm.host import _host_caches

    for index, (level, kind, size, ways) in enumerate([("1", "Data", "48K", "12"), ("1", "Instruction", "32K", "8"),
                                                       ("2", "Unified", "1024K", "16"), ("3", "Unified", "32768K", "16")]):
        folder = tmp_path / f"index{index}"
        folder.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size), ("ways_of_associativity", ways)):
            (folder / name).write_text(text + "\n")
    caches = _host_caches(str(tmp_path))
    assert (caches.l1d, caches.l2, caches.l3, caches.l1d_ways) == (48 * 1024, 1024 * 1024, 32 * 1024 * 1024, 12)
    assert caches.l1d_way_bytes == 4096
    assert (caches.l2_ways, caches.l2_way_bytes) == (16, 64 * 1024)


def test_l2_ways_option_overrides_the_host_and_is_checked():
    from tensorkiln.ir.errors import TargetError

    assert cache_sizes(tk.target("llvm -l2_cache=1M -l2_ways=16")).l2_way_bytes == 64 * 1024
    with pytest.raises(TargetError, match="l2_ways=0: the L2 associativity must be a positive"):
        cache_sizes(tk.target("llvm -l2_ways=0"))


@pytest.mark.parametrize("k, kc, ways", [(2048, 512, 8), (1024, 512, 8), (1024, 384, 8), (1000, 504, 8),
                                          (2048, 512, 16), (4096, 128, 4), (768, 384, 8)])
def test_a_row_block_takes_no_more_rows_than_the_l2_sets_they_fall_into_hold(k, kc, ways):
    """l2_set_rows against a count of the lines of each row of an mc x kc block of A (rows k floats apart) in each
    set of a 1 MB L2: the rows it allows fill no set past its ways, one more row would (unless the block is
    all of L2). The default mc of a GEMM with such a K stays within them."""
    from tensorkiln_cpu_llvm.strategies.gemm_blocking import l2_set_rows

    target = tk.target(f"llvm -mcpu=haswell -l2_cache=1M -l2_ways={ways}")
    caches = cache_sizes(target)
    sets = 1024 * 1024 // 64 // ways

    def fullest(rows, depth=kc):
        counts = [0] * sets
        for row in range(rows):
            for line in range(row * k * 4 // 64, (row * k * 4 + depth * 4 - 1) // 64 + 1):
                counts[line % sets] += 1
        return max(counts)

    rows = l2_set_rows(k * 4, kc * 4, caches)
    assert fullest(rows) <= ways
    assert rows == 1024 * 1024 // (kc * 4) or fullest(rows + 1) > ways
    # counting stops at the GEMM's M: the same bound when M rows overfill a set, none when they all fit
    for m in (rows - 1, rows + 1):
        assert l2_set_rows(k * 4, kc * 4, caches, m) == (rows if m > rows else 1024 * 1024 // (kc * 4))
    plan = gemm_plan(1024, 1000, k, target, {}, "kn")
    assert fullest(plan.mc, plan.kc) <= ways


@pytest.mark.parametrize("cores, m, n, l2, rows, columns", [
    # AVX2's 4x24 tile: N = 256 is 11 slivers, at most 6 column blocks of two
    (2, 64, 256, "2M", 1, 6),      # 6 items, 3 per core: rows stay whole (B read once)
    (2, 64, 4096, "16M", 1, 8),    # columns give the 4 per core wanted
    (2, 64, 4096, "2M", 1, 6),     # B (4 MB) from memory into panels: 2 per core at least, longer runs of
                                   # its rows, each in a quarter of L2 (A in L2: PANEL_L2_SHARE)
    (2, 64, 32, "2M", 4, 1),       # one sliver: rows split until 2 items per core
    (4, 64, 256, "2M", 2, 6),      # 4 cores: 6 column blocks, then rows for 2 per core
    (1, 64, 256, "2M", 1, 1)])     # one core: one item
def test_work_items_split_columns_first_and_rows_only_below_two_per_core(cores, m, n, l2, rows, columns):
    """gemm_blocking: columns are split up to WORK_ITEMS_PER_CORE items per core (at least two slivers
    each; PANEL_ITEMS_PER_CORE when each item copies its panel of a B from memory), rows only while there
    are fewer than MIN_ITEMS_PER_CORE (each row block reads all of B again); the products are right at 1
    and 2 threads."""
    target_text = f"llvm -mcpu=haswell -num_threads={cores} -l2_cache={l2}"
    plan = gemm_plan(m, n, 256, tk.target(target_text), {}, "kn")
    assert plan.pack_panels == (n * 256 * 4 > parse_size(l2) // 2)
    assert (plan.row_blocks, plan.column_blocks) == (rows, columns)
    _check(_build(m, n, 256, target_text)[0], m, n, 256)


def test_a_tall_gemm_is_cut_into_enough_work_items_for_every_core():
    """Work is handed out an item at a time, so the last item runs alone: a tall GEMM splits its rows (in
    blocks of hundreds) until each core has BALANCED_ITEMS_PER_CORE items; a short one keeps its rows whole."""
    from tensorkiln_cpu_llvm.strategies.gemm_blocking import BALANCED_ITEMS_PER_CORE, MIN_SPLIT_ROWS

    caches = "-l1_cache=32K -l2_cache=1M -l3_cache=32M"
    for cpu in ("skylake-avx512", "znver4"):   # the 6x64 and the 6x16 register tile
        # one thread: blocks follow the caches alone (an mc x kc block of A in half of L2, all columns; K = 1000,
        # whose rows do not crowd L2's sets, l2_set_rows)
        alone = gemm_plan(1024, 1024, 1000, tk.target(f"llvm -mcpu={cpu} {caches} -num_threads=1"), {}, "kn")
        assert alone.column_blocks == 1 and alone.mc * alone.kc * 4 <= (1 << 20) // 2
        assert alone.items < BALANCED_ITEMS_PER_CORE
        for cores in (2, 4):
            target = tk.target(f"llvm -mcpu={cpu} {caches} -num_threads={cores}")
            tall = gemm_plan(1024, 1024, 1000, target, {}, "kn")
            # rows split for balance stay MIN_SPLIT_ROWS high (or the caches' block, when that is lower)
            assert tall.items >= BALANCED_ITEMS_PER_CORE * cores and tall.mc >= min(MIN_SPLIT_ROWS, alone.mc)
            assert tall.m - (tall.row_blocks - 1) * tall.mc > tall.mc // 2          # even blocks
            short = gemm_plan(196, 1024, 256, target, {}, "kn")
            assert short.row_blocks == 1


def test_a_model_whose_a_outgrows_l2_reads_it_in_place_and_matches_numpy():
    """tk.compile of dense + bias + relu with A (600 x 1024 floats, 2.4 MB) beyond half of a 1 MB L2 and 400
    outputs: the strategy's default reads A in place (PACK_A; its blocks come from L3 once each), and the whole
    group matches numpy at 1 and 2 threads."""
    x = RNG.standard_normal((600, 1024), dtype=np.float32)
    w = RNG.standard_normal((400, 1024), dtype=np.float32)
    bias = RNG.standard_normal(400, dtype=np.float32)
    dense = graph.nn.dense(graph.var("x", shape=(600, 1024)), graph.const(w))
    lib = tk.compile(graph.nn.relu(graph.nn.bias_add(dense, graph.const(bias))), "llvm -l2_cache=1M")
    # (the constant weight is packed at compile time: the group runs as an nn.dense_pack)
    gemms = ("cpu_llvm.dense_ukernel", "cpu_llvm.matmul_ukernel", "cpu_llvm.dense_pack_ukernel")
    (strategy,) = [s for s in lib.summary()["strategies"].values() if s["strategy"] in gemms]
    assert strategy["config"]["pack_a"] is False
    before = tk.runtime.get_num_threads()
    for threads in (1, 2):
        tk.runtime.set_num_threads(threads)
        try:
            got = lib.run({"x": x})[0]
        finally:
            tk.runtime.set_num_threads(0)        # the modules loaded so far back to all cores
            tk.runtime.set_num_threads(before)   # and no override left for later ones (their -num_threads)
        np.testing.assert_allclose(got, np.maximum(x @ w.T + bias, 0), rtol=1e-4, atol=1e-3)


def test_the_micro_kernel_prefetches_the_next_row_tile_only_when_it_reads_a_in_place_in_one_block():
    """In place with K in one block (kc >= K), each step of the k loop prefetches a line of the next mr rows
    (ukernels.next_tile_rows); from a packed tile it does not (one stream, which the hardware follows), nor with K
    in several blocks (the next tile's block is rows K apart: the same line at every step). The prefetch reaches
    past the last row tile, which runs all the same: a prefetch never faults."""
    target = tk.target("llvm -mcpu=haswell")
    for k, pack_a, expected in ((256, False, True), (256, True, False), (4096, False, False)):
        plan = gemm_plan(3136, 48, k, target, {"pack_a": pack_a}, "kn")
        assert not plan.pack_panels and (plan.kc >= k) is (k == 256)
        source = sgemm_source(plan)
        # llvm.prefetch(address, read 0 / write 1, locality 3, data 1): A's are reads, C's tile writes
        assert ("i32 0, i32 3, i32 1)" in source) is expected
        assert "i32 1, i32 3, i32 1)" in source
    for k in (256, 1000):
        module, _ = _build(3136 // 4 + 3, 24, k, "llvm -mcpu=haswell", config={"pack_a": False})
        _check(module, 3136 // 4 + 3, 24, k)


@pytest.mark.parametrize("n, edge", [(49, 8), (40, 16), (47, None), (48, None), (25, 8)])
def test_the_ragged_last_sliver_computes_whole_vectors_only(n, edge):
    """With 24-column slivers (AVX2 4x24), a last sliver of n % 24 columns runs a register tile of those columns
    rounded up to vectors of 8 (GemmPlan.edge_tile; none when that is the whole sliver), B packed, in place and
    copied in panels, and every product matches numpy at 1 and 2 threads."""
    target_text = "llvm -mcpu=haswell -l2_cache=64K"   # B of 49 x 1024 floats is copied in panels
    for config in ({"tile": "4x24", "pack_b": True}, {"tile": "4x24", "pack_b": False}):
        plan = gemm_plan(13, n, 1024, tk.target(target_text), config, "kn")
        assert plan.edge_tile == (GemmTile(4, edge, 8) if edge else None)
        module, _ = _build(13, n, 1024, target_text, config=config)
        assert (".micro_edge" in module.get_source("ll")) == bool(edge)
        _check(module, 13, n, 1024)
    assert gemm_plan(13, 49, 1024, tk.target(target_text), {"tile": "4x24", "pack_b": False}, "kn").pack_panels


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 7, 9, 13])
def test_k_loop_unrolled_by_four_with_any_remainder(k):
    """ukernels.accumulate_over_k steps K_UNROLL k at a time, then one at a time: every depth below,
    at and past a multiple of four gives numpy's product, A packed or in place, B packed or in place."""
    for config in ({"pack_a": True, "pack_b": True}, {"pack_a": False, "pack_b": False}):
        module, _ = _build(13, 40, k, "llvm -mcpu=haswell", config=config)
        _check(module, 13, 40, k)


def test_panel_columns_are_split_for_the_threads_to_finish_together():
    """B's slivers are evened out over the column blocks (the first ones a sliver wider), so the items, taken by
    whichever thread is free, leave no thread much more than its share: 4096 columns in blocks of at most 264 are
    11 of 264 and 5 of 240 or 232, not 15 of 264 and one of 136. With B copied in panels, the count of blocks is
    chosen among those at most `widest` wide; one core keeps the default."""
    from tensorkiln_cpu_llvm.strategies.gemm_blocking import balanced_columns, column_block_widths

    assert column_block_widths(4096, 264, 24) == [264] * 11 + [240] * 4 + [232]
    assert column_block_widths(512, 144, 24) == [144, 144, 120, 104]
    assert column_block_widths(25, 24, 24) == [24, 1]
    for n, nc, nr in ((4096, 264, 24), (1000, 96, 16), (49, 24, 24), (3072, 384, 32), (7, 8, 8)):
        widths = column_block_widths(n, nc, nr)
        assert sum(widths) == n and len(widths) == -(-n // nc) and max(widths) <= nc
        assert all(w % nr == 0 for w in widths[:-1]) and max(widths[:-1] or [0]) - min(widths[:-1] or [0]) <= nr

    def busiest(n, nc, nr, threads):   # items in order, each to the thread free first
        loads = [0] * threads
        for width in column_block_widths(n, nc, nr):
            loads[loads.index(min(loads))] += width
        return max(loads)

    for m, n, nc, widest in ((49, 512, 144, None), (64, 4096, 264, 315), (64, 4096, 384, 431), (196, 256, 72, None)):
        chosen = balanced_columns(m, n, m, nc, 24, 2, widest)
        assert chosen % 24 == 0 and (widest is None or chosen <= widest)
        assert busiest(n, chosen, 24, 2) <= (n / 2 + 24) / 0.98   # within a sliver of half, by BALANCE_GAIN
    assert balanced_columns(49, 512, 52, 144, 24, 1) == 144
    assert balanced_columns(64, 4096, 64, 384, 24, 2) == 2064       # two blocks, (2064, 2032)
    assert balanced_columns(64, 4096, 64, 384, 24, 2, widest=431) == 360   # 12 blocks of 328-360, not 11 of 384


@pytest.mark.parametrize("kc, tile, lines", [(256, "4x16", 257), (128, "4x24", 193), (208, "4x24", 312)])
def test_panel_slivers_do_not_lie_a_multiple_of_1_kb_apart(kc, tile, lines):
    """A panel's slivers lie kc x nr floats apart, a line (16 floats) more where that is a multiple of 16 lines,
    so the copy's writes of one row into every sliver spread over the L1 sets: 256 x 16 floats (256 lines,
    4 KB multiples) are 257 lines apart, 128 x 24 (192 lines) 193, 208 x 24 stays at 312. The product matches
    numpy at 1 and 2 threads."""
    target_text = "llvm -mcpu=haswell -l2_cache=1M"   # B of 256 x 1024 floats is copied in panels
    config = {"tile": tile, "kc": kc}
    plan = gemm_plan(64, 1024, 256, tk.target(target_text), config, "kn")
    assert plan.pack_panels and plan.panel_sliver_floats == 16 * lines
    assert plan.panel_floats == plan.panel_sliver_floats * max(plan.nc, plan.single_blocks[1]) // plan.tile.nr
    _check(_build(64, 1024, 256, target_text, config=config)[0], 64, 1024, 256)


def test_one_thread_takes_the_whole_row_of_panels_it_would_split_for_two():
    """A GEMM copying panels of a B read in place splits N into column blocks for the threads; a call that finds
    itself on one thread takes the one-core column block (as wide as N while the panel fits L2) at run time,
    and both thread counts match numpy. A tuned record's own blocks are kept at every thread count."""
    target_text = "llvm -mcpu=haswell -num_threads=2 -l2_cache=2M"   # a 208 x 528 panel is a fifth of L2
    plan = gemm_plan(49, 512, 2048, tk.target(target_text), {}, "kn")
    assert plan.pack_panels and plan.nc == 144 and plan.single_blocks == (plan.mc, 528)
    assert (plan.items, plan.single.items) == (4, 1) and plan.panel_floats == plan.panel_sliver_floats * 528 // 24
    assert plan.symbol.endswith(f"_s{plan.mc}x528")
    module, _ = _build(49, 512, 2048, target_text)
    assert plan.symbol in module.get_source("ll")
    _check(module, 49, 512, 2048)
    tuned = gemm_plan(49, 512, 2048, tk.target(target_text), {"nc": 120}, "kn")
    assert tuned.nc == 120 and not tuned.splits_for_threads
    # one core: nothing to choose
    assert not gemm_plan(49, 512, 2048, tk.target("llvm -mcpu=haswell -num_threads=1 -l2_cache=512K"), {},
                         "kn").splits_for_threads
    with pytest.raises(ValueError, match="nc=100 of nr=24"):
        GemmPlan(tile=GemmTile(4, 24, 8), m=5, n=200, k=1, mc=8, nc=48, kc=8, nc_single=100)
