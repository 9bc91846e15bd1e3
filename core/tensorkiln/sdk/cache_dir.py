"""sdk/cache_dir.py: a compile cache's directory on disk: atomic writes, reads that count as uses, a size bound.

Every compile cache lives in its own folder under `cache_root()` ($TENSORKILN_CACHE_DIR, else
~/.cache/tensorkiln): the core's lowering cache in `lowered/`, a plugin's in a folder named after
it (cpu_llvm's objects in `cpu_llvm/`). A plugin caching its own output uses this class too:

    store = CacheDirectory(Path(cache_root()) / "acme")
    data = store.read(f"{key}.bin")           # None: absent (or unreadable)
    store.write(f"{key}.bin", compiled)        # atomic: a reader never sees half a file

`MemoryAndDiskCache` puts the most recently used values of such a folder in front of it, in memory
(the lowering cache and cpu_llvm's kernel cache are two).

Each folder holds at most TENSORKILN_CACHE_MAX_MB megabytes (default DEFAULT_MAX_MB). A write
now and then (the first of a process, then every PRUNE_EVERY) drops the least recently used files
until the folder is under PRUNE_TO of the bound; a read touches its file, so the entries a
process keeps using are the last to go. Nothing here ever raises for a read-only, full or
vanished folder: a cache that cannot be kept costs the next compile its work, nothing else.
`caches_enabled()` is False when TENSORKILN_KERNEL_CACHE=0 turns every compile cache off.
"""
from __future__ import annotations

import abc
import collections
import os
import tempfile
from pathlib import Path

__all__ = ["CacheDirectory", "MemoryAndDiskCache", "cache_root", "caches_enabled", "cache_limit_bytes", "DEFAULT_MAX_MB", "PRUNE_EVERY",
           "PRUNE_TO"]

DEFAULT_MAX_MB = 2048
"""Megabytes each cache folder may hold: about 300 compiles of densenet121's objects, or 1300 of its lowering."""
PRUNE_EVERY = 64
"""Writes between two size checks of a folder (each lists the folder)."""
PRUNE_TO = 0.8
"""Pruning stops under this share of the bound, so the next writes do not prune again at once."""
_OFF = ("0", "off", "no", "false")


def cache_root() -> str:
    """The folder every compile cache lives under: $TENSORKILN_CACHE_DIR, else ~/.cache/tensorkiln."""
    return os.environ.get("TENSORKILN_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "tensorkiln")


def caches_enabled() -> bool:
    """False when TENSORKILN_KERNEL_CACHE=0 (or off, no, false): every compile is cold."""
    return os.environ.get("TENSORKILN_KERNEL_CACHE", "1").strip().lower() not in _OFF


def cache_limit_bytes() -> int:
    """The bound of each cache folder: TENSORKILN_CACHE_MAX_MB megabytes (a whole number), else DEFAULT_MAX_MB."""
    text = os.environ.get("TENSORKILN_CACHE_MAX_MB", "").strip()
    try:
        megabytes = int(text) if text else DEFAULT_MAX_MB
    except ValueError:
        raise ValueError(f"TENSORKILN_CACHE_MAX_MB={text!r}: expected a whole number of megabytes "
                         f"(default {DEFAULT_MAX_MB})") from None
    return max(0, megabytes) * 1024 * 1024


class CacheDirectory:
    """One cache's folder: `read` and `write` whole files by name, the folder kept under `max_bytes`."""

    def __init__(self, path: Path, max_bytes: int | None = None) -> None:
        self.path = Path(path)
        self.max_bytes = cache_limit_bytes() if max_bytes is None else max_bytes
        self._writes = 0

    def read(self, name: str) -> bytes | None:
        """The file's bytes (and it counts as used now), or None when it is absent or unreadable."""
        target = self.path / name
        try:
            data = target.read_bytes()
        except OSError:
            return None
        try:
            os.utime(target)
        except OSError:
            pass
        return data

    def write(self, name: str, data: bytes) -> None:
        """Write `name` atomically (a temporary file renamed over it); prune the folder now and then."""
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(dir=self.path, prefix=f".{name}", suffix=".part")
            try:
                with os.fdopen(handle, "wb") as stream:
                    stream.write(data)
                os.replace(temporary, self.path / name)
            except BaseException:
                try:
                    os.unlink(temporary)
                except OSError:
                    pass
                raise
        except OSError:
            return
        if self._writes % PRUNE_EVERY == 0:
            self.prune()
        self._writes += 1

    def prune(self) -> int:
        """Drop the least recently used files until the folder is under PRUNE_TO of the bound, if it is over
        the bound; returns how many were removed."""
        entries = []
        try:
            with os.scandir(self.path) as listing:
                for entry in listing:
                    if entry.is_file(follow_symlinks=False):
                        status = entry.stat(follow_symlinks=False)
                        entries.append((status.st_mtime, status.st_size, entry.path))
        except OSError:
            return 0
        total = sum(size for _, size, _ in entries)
        if total <= self.max_bytes:
            return 0
        removed = 0
        for _, size, path in sorted(entries):
            if total <= self.max_bytes * PRUNE_TO:
                break
            try:
                os.unlink(path)
            except OSError:
                continue
            total -= size
            removed += 1
        return removed


class MemoryAndDiskCache(abc.ABC):
    """Values by key: the `memory_entries` most recently used in memory, every one in a CacheDirectory
    (None: memory only). A subclass says how a value is read from the folder (`_load`) and writes it there
    in its `put`; `hits` and `misses` count the lookups."""

    def __init__(self, directory: Path | None, memory_entries: int) -> None:
        self.directory = directory
        self.store = CacheDirectory(directory) if directory is not None else None
        self.memory_entries = memory_entries
        self.memory: collections.OrderedDict = collections.OrderedDict()
        self.hits = self.misses = 0

    def lookup(self, key: str):
        """The value under `key`, from memory or from the folder, or None."""
        value = self.memory.get(key)
        if value is None and self.store is not None:
            value = self._load(key)
        if value is None:
            self.misses += 1
            return None
        self.hits += 1
        self.remember(key, value)
        return value

    def remember(self, key: str, value) -> None:
        """Keep `value` in memory as the most recently used (dropping the least recently used beyond the bound)."""
        self.memory[key] = value
        self.memory.move_to_end(key)
        while len(self.memory) > self.memory_entries:
            self.memory.popitem(last=False)

    @abc.abstractmethod
    def _load(self, key: str):
        """The value stored under `key` in `self.store` (the folder), or None when it is absent or unreadable."""
