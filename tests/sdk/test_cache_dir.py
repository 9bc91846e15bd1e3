"""sdk/cache_dir.py: compile-cache folders written atomically, bounded in size, least recently used dropped first."""
from __future__ import annotations

import os

import pytest

from tensorkiln.sdk import CacheDirectory, cache_root, caches_enabled
from tensorkiln.sdk import cache_dir


def _aged(store: CacheDirectory, name: str, size: int, age: int) -> None:
    """Write `name` with `size` bytes and make it `age` hours old."""
    store.write(name, bytes(size))
    stamp = 1_700_000_000 - age * 3600
    os.utime(store.path / name, (stamp, stamp))


def test_files_round_trip_and_absent_or_unwritable_ones_cost_nothing(tmp_path):
    store = CacheDirectory(tmp_path / "acme")
    assert store.read("missing.bin") is None
    store.write("entry.bin", b"compiled")
    assert store.read("entry.bin") == b"compiled"
    assert [p.name for p in store.path.iterdir()] == ["entry.bin"]     # no temporary file left behind
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    unwritable = CacheDirectory(blocked / "acme")
    unwritable.write("entry.bin", b"x")                                  # no error: the next compile recompiles
    assert unwritable.read("entry.bin") is None


def test_a_folder_over_its_bound_drops_the_least_recently_used_files(tmp_path):
    store = CacheDirectory(tmp_path, max_bytes=1000)
    for index in range(6):                      # 1800 bytes: entry 0 the oldest
        _aged(store, f"entry{index}.bin", 300, age=10 - index)
    assert store.read("entry0.bin") is not None   # used now: the newest
    removed = store.prune()
    kept = sorted(p.name for p in tmp_path.iterdir())
    # under 80% of the bound (800 bytes): two of 300 are kept, the most recently used ones
    assert removed == 4 and kept == ["entry0.bin", "entry5.bin"]
    assert store.prune() == 0


def test_writes_prune_on_the_first_write_and_then_every_so_often(tmp_path, monkeypatch):
    monkeypatch.setattr(cache_dir, "PRUNE_EVERY", 3)
    for index in range(5):
        _aged(CacheDirectory(tmp_path, max_bytes=10**9), f"old{index}.bin", 3000, age=100)
    store = CacheDirectory(tmp_path, max_bytes=10_000)
    store.write("new0.bin", bytes(10))          # the first write of this store prunes: 15 kB > 10 kB
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 8_000
    assert (tmp_path / "new0.bin").exists()
    for index in range(1, 3):
        _aged(store, f"big{index}.bin", 3000, age=50)
    before = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert before > 10_000                      # the second and third writes did not prune
    store.write("new3.bin", bytes(10))          # the fourth write does
    assert sum(p.stat().st_size for p in tmp_path.iterdir()) <= 8_000


def test_the_environment_sets_the_root_the_bound_and_turns_caches_off(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORKILN_CACHE_DIR", str(tmp_path))
    assert cache_root() == str(tmp_path)
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_MB", "5")
    assert CacheDirectory(tmp_path).max_bytes == 5 * 1024 * 1024
    monkeypatch.setenv("TENSORKILN_CACHE_MAX_MB", "lots")
    with pytest.raises(ValueError, match="TENSORKILN_CACHE_MAX_MB='lots'"):
        CacheDirectory(tmp_path)
    monkeypatch.delenv("TENSORKILN_CACHE_MAX_MB")
    assert CacheDirectory(tmp_path).max_bytes == cache_dir.DEFAULT_MAX_MB * 1024 * 1024
    for off in ("0", "off"):
        monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", off)
        assert not caches_enabled()
    monkeypatch.setenv("TENSORKILN_KERNEL_CACHE", "1")
    assert caches_enabled()
