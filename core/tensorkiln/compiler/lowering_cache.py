"""compiler/lowering_cache.py: lowered groups (GroupKernel) cached by their workload, in memory and on disk.

Lowering (te compute -> schedule -> loop passes) is half of a compile whose object code the
target's own kernel cache already holds: that cache is keyed by the lowered loop IR, so a hit
there still paid for lowering. This cache is asked first, before lowering: a group compiled before,
in this process or another, comes back as its GroupKernel without being lowered again.

The key is a SHA-256 over everything lowering reads:

- the group function's text with its parameters renamed by position (`graph.printer.workload_text`:
  ops, attributes, types and shapes) plus the exact bytes of its constants and of any array
  attribute (the text rounds or elides them);
- the target string, its capabilities, and the target's `TargetSpec.host_fingerprint` (what
  its schedules read from this host beyond the string: the CPU, its caches). A target whose
  plugin gives no host fingerprint is never cached: the core cannot know what its schedules read;
- the compile's PassContext: opt level, disabled passes, per-pass config (JSON only: a config
  holding other objects turns the cache off for that compile) and verification;
- the source of the core and of every plugin loaded from an entry point (their Python files'
  and manifests' bytes), their distributions' versions, and the versions of Python and numpy.

Not cached: a compile with a tuning database (its records choose the knobs), a compile
whose context carries pass instruments of its own (they expect to see the loop passes run),
and any group while a plugin registered by hand (a test, a notebook) is in the registry (its code
is not in the key). A lowered group that cannot be pickled (a tensor intrinsic holding a
lambda) is lowered every time. Monkeypatching a schedule function is invisible to the key: set
TENSORKILN_LOWERING_CACHE=0 while doing that.

Where: $TENSORKILN_CACHE_DIR/lowered, else ~/.cache/tensorkiln/lowered, one `<key>.pkl` per group
written atomically, the folder kept under TENSORKILN_CACHE_MAX_MB (sdk/cache_dir.py: the least
recently used entries go first); MEMORY_ENTRIES kept in memory. Entries are
pickles, read back only from this user's own cache directory, which also holds the object code
that compiled models load and run (the same trust). TENSORKILN_LOWERING_CACHE=0 turns this cache
off; TENSORKILN_KERNEL_CACHE=0 turns off every compile cache (this one and the targets' kernel
caches: every compile is cold).
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import pickle
import sys
from pathlib import Path

import numpy as np

from ..graph import Call, Constant, Function, post_order
from ..graph.printer import workload_text
from ..ir.pass_infra import PassContext
from ..sdk.cache_dir import MemoryAndDiskCache, cache_root, caches_enabled
from ..sdk.target import capabilities_fingerprint

__all__ = ["LoweringCache", "lowering_cache", "group_key", "CACHE_FORMAT", "LOWERING_CACHE_ENV", "MEMORY_ENTRIES"]

CACHE_FORMAT = 1
LOWERING_CACHE_ENV = "TENSORKILN_LOWERING_CACHE"
MEMORY_ENTRIES = 1024
"""Groups kept in memory (a model has up to a few hundred distinct groups)."""


def _tree_digest(directory: Path, digest) -> None:
    """Every Python file and manifest under `directory` (a package), names and bytes."""
    for path in sorted([*directory.rglob("*.py"), *directory.rglob("*.toml")]):
        digest.update(str(path.relative_to(directory)).encode() + b"\0")
        digest.update(path.read_bytes())


@functools.cache
def _core_digest() -> str:
    import tensorkiln
    digest = hashlib.sha256(f"{tensorkiln.__version__}|{sys.version}|{np.__version__}".encode())
    _tree_digest(Path(tensorkiln.__file__).parent, digest)
    return digest.hexdigest()


@functools.cache
def _plugin_digest(module_file: str, distribution: str) -> str:
    """The digest of a plugin's package (the directory of the module its entry point names) and version."""
    from importlib import metadata
    try:
        version = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        version = "?"
    digest = hashlib.sha256(f"{distribution}=={version}".encode())
    _tree_digest(Path(module_file).parent, digest)
    return digest.hexdigest()


def _plugins_digest() -> str | None:
    """The digest of every registered plugin's code, or None when one was registered by hand (no entry point)."""
    from ..sdk.plugin_manager import registry
    plugins = registry()
    loaded = {id(p.module): p for p in plugins.plugins}
    parts = []
    for module in plugins.hooks.get_plugins():
        plugin = loaded.get(id(module))
        if plugin is None or not getattr(module, "__file__", None):
            return None
        parts.append(f"{plugin.hook_name}:{_plugin_digest(module.__file__, plugin.distribution)}")
    return "|".join(sorted(parts))


def _exact_values(function: Function, digest) -> None:
    """The bytes the printed text rounds or elides: constants, and array attributes."""
    def attr_value(value) -> None:
        if isinstance(value, np.ndarray):
            digest.update(f"{value.dtype}{value.shape}".encode() + np.ascontiguousarray(value).tobytes())
        elif isinstance(value, (tuple, list)):
            for item in value:
                attr_value(item)
        elif isinstance(value, float):
            digest.update(repr(value).encode())

    for node in post_order(function.body):
        if isinstance(node, Constant):
            value = np.asarray(node.value)
            digest.update(f"\0const {value.dtype}{value.shape}\0".encode() + np.ascontiguousarray(value).tobytes())
        elif isinstance(node, Call) and node.attrs is not None:
            for _, value in node.attrs.non_default_items():
                attr_value(value)


def _context_text(context: PassContext) -> str | None:
    """The context's part of the key (its instruments only observe), or None when its config is not JSON."""
    try:
        config = json.dumps(context.config, sort_keys=True)
    except (TypeError, ValueError):
        return None
    return f"opt={context.opt_level}|disabled={sorted(context.disabled)}|config={config}|verify={context.verify}"


def group_key(function: Function, target, context: PassContext) -> str | None:
    """The cache key of lowering `function` for `target` under `context` (module docstring), or None:
    not cacheable."""
    host = getattr(target.spec, "host_fingerprint", None)
    context_text = _context_text(context)
    if host is None or context_text is None:
        return None
    plugins = _plugins_digest()
    if plugins is None:
        return None
    digest = hashlib.sha256(f"{CACHE_FORMAT}|{_core_digest()}|{plugins}|{target}|{capabilities_fingerprint(target)}|"
                            f"{host(target)}|{context_text}\0".encode())
    digest.update(workload_text(function).encode())
    _exact_values(function, digest)
    return digest.hexdigest()


class LoweringCache(MemoryAndDiskCache):
    """GroupKernels by key: in memory (least recently used dropped first) and as pickles in `directory`."""

    def __init__(self, directory: Path | None) -> None:
        super().__init__(directory, MEMORY_ENTRIES)

    def get(self, key: str, name: str):
        """The GroupKernel stored under `key`, renamed `name` (a group's kernel name depends on its model), or None."""
        kernel = self.lookup(key)
        if kernel is None or kernel.name == name:
            return kernel
        return dataclasses.replace(kernel, name=name, func=dataclasses.replace(kernel.func, name=name))

    def put(self, key: str, kernel) -> None:
        try:
            data = pickle.dumps(kernel, protocol=pickle.HIGHEST_PROTOCOL)
        except (pickle.PicklingError, TypeError, AttributeError):
            return   # e.g. a tensor intrinsic holding a lambda: this group is lowered every time
        self.remember(key, kernel)
        if self.store is not None:
            self.store.write(f"{key}.pkl", data)   # a read-only or full disk costs the next process a lowering

    def _load(self, key: str):
        data = self.store.read(f"{key}.pkl")
        if data is None:
            return None
        try:
            return pickle.loads(data)
        except Exception:   # damaged, or written by other code under the same key: lower again (and overwrite)
            return None


@functools.cache
def _cache_for(directory: str) -> LoweringCache:
    return LoweringCache(Path(directory))


def lowering_cache() -> LoweringCache | None:
    """The process's cache per the environment (None when TENSORKILN_LOWERING_CACHE=0 or TENSORKILN_KERNEL_CACHE=0)."""
    if os.environ.get(LOWERING_CACHE_ENV, "1").strip().lower() in ("0", "off", "no", "false") or not caches_enabled():
        return None
    return _cache_for(os.path.join(cache_root(), "lowered"))
