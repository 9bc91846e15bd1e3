"""kernel_cache.py: cpu_llvm's compiled modules cached by a structural hash of their kernels, in memory and on disk.

LLVM's optimisation and code generation are most of a cold compile. `LLVMEmitter.emit`
looks its kernels up here first; the key is a SHA-256 over everything the object code
depends on:

- each kernel's printed tir (`tir.format_func`: names, buffers, loop nest) and the
  source of every tensor intrinsic it calls;
- the target string and its machine configuration (triple, CPU, features, opt level);
- the versions of tensorkiln, llvmlite and LLVM, and a digest of this plugin's own
  source files (a changed emitter never reuses an old object).

Hits in this process come from memory (MEMORY_ENTRIES, least recently used dropped); other
processes read `<directory>/<key>.json` plus `<key>.o`, written atomically and kept under
TENSORKILN_CACHE_MAX_MB (tensorkiln.sdk.CacheDirectory: the least recently used go first). The
directory is $TENSORKILN_CACHE_DIR/cpu_llvm, else ~/.cache/tensorkiln/cpu_llvm.
TENSORKILN_KERNEL_CACHE=0 turns the cache off (and the core's lowering cache, which spares a
compile the lowering this key needs), and it is bypassed while LLVM remarks are asked for (they
come from running LLVM).
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import struct
from pathlib import Path
from typing import Callable, Sequence

from tensorkiln.sdk import MemoryAndDiskCache, cache_root, caches_enabled

__all__ = ["KernelCache", "kernel_cache", "cache_key", "pack_parts", "unpack_parts", "CACHE_FORMAT"]

CACHE_FORMAT = 2
MEMORY_ENTRIES = 256
"""Entries kept in memory: a module compiled in chunks is an entry per chunk (about a dozen)."""


@functools.cache
def _plugin_digest() -> str:
    digest = hashlib.sha256()
    for path in sorted(Path(__file__).parent.rglob("*.py")) + sorted(Path(__file__).parent.glob("*.toml")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


@functools.cache
def _versions() -> str:
    import llvmlite
    import llvmlite.binding as llvm

    import tensorkiln
    return f"{getattr(tensorkiln, '__version__', '?')}|{llvmlite.__version__}|{llvm.llvm_version_info}"


def cache_key(funcs: Sequence, target, config, intrinsic_source: Callable[[object], str], kind: str = "module") -> str:
    """The SHA-256 (hex) of everything the module's object code depends on (see the module docstring).
    `kind` tells apart entries of one kernel list that hold different things (a whole module, or one
    chunk of a module compiled in chunks)."""
    from tensorkiln import tir

    digest = hashlib.sha256()
    digest.update(f"{CACHE_FORMAT}|{kind}|{_versions()}|{_plugin_digest()}|{target}|{config}".encode())
    for func in funcs:
        digest.update(b"\0kernel\0" + tir.format_func(func).encode())
        for name, intrin in sorted(func.tensor_intrinsics().items()):
            digest.update(f"\0intrinsic {name}\0{intrinsic_source(intrin)}".encode())
    return digest.hexdigest()


_PART_LENGTH = struct.Struct("<q")


def pack_parts(*parts: bytes | None) -> bytes:
    """Several byte strings (None allowed) as one cache binary; `unpack_parts` gives them back."""
    return b"".join(_PART_LENGTH.pack(-1) if part is None else _PART_LENGTH.pack(len(part)) + part for part in parts)


def unpack_parts(data: bytes) -> list[bytes | None]:
    parts, offset = [], 0
    while offset < len(data):
        (length,) = _PART_LENGTH.unpack_from(data, offset)
        offset += _PART_LENGTH.size
        if length < 0:
            parts.append(None)
            continue
        parts.append(bytes(data[offset:offset + length]))
        offset += length
    return parts


class KernelCache(MemoryAndDiskCache):
    """Compiled modules by key: {"source", "sources", "metadata"} (plain JSON data) plus the object bytes."""

    def __init__(self, directory: Path | None) -> None:
        super().__init__(directory, MEMORY_ENTRIES)

    def get(self, key: str) -> tuple[dict, bytes] | None:
        return self.lookup(key)

    def put(self, key: str, record: dict, binary: bytes) -> None:
        self.remember(key, (record, binary))
        if self.store is not None:
            # the object first: a reader that finds the JSON finds a complete object beside it; a read-only or
            # full disk costs the next process a compile, nothing else
            self.store.write(f"{key}.o", binary)
            self.store.write(f"{key}.json", json.dumps({**record, "format": CACHE_FORMAT}).encode())

    def _load(self, key: str) -> tuple[dict, bytes] | None:
        text, binary = self.store.read(f"{key}.json"), self.store.read(f"{key}.o")
        if text is None or binary is None:
            return None      # absent, or half of it pruned: compile again (and write it again)
        try:
            record = json.loads(text)
        except ValueError:
            return None      # a damaged entry: compile again (and overwrite it)
        if record.get("format") != CACHE_FORMAT:
            return None
        return record, binary


@functools.cache
def _cache_for(directory: str | None) -> KernelCache:
    return KernelCache(Path(directory) if directory else None)


def kernel_cache() -> KernelCache | None:
    """The process's cache per the environment (None when TENSORKILN_KERNEL_CACHE=0)."""
    if not caches_enabled():
        return None
    return _cache_for(os.path.join(cache_root(), "cpu_llvm"))
