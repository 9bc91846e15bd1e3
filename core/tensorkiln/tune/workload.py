"""tune/workload.py: the keys a tuning record is stored under.

A record applies to exactly one (workload, target, plugin version, record format):

- `workload_key(function)`: a hash of the group function's text with its parameters
  renamed by position, so the same conv2d + bias + relu group from two models (or two
  places in one model) shares its records;
- `target_key(target)`: the canonical target string with its options, and a fingerprint
  of the capabilities the plugin resolved from it (`-mcpu=native` on two different hosts
  gives two different fingerprints, so a record tuned on one never applies to the other);
- `plugin_version(implementation, target)`: the version of the distribution that
  declared the implementation (its schedules are what the knob values mean).
"""
from __future__ import annotations

import hashlib
from importlib import metadata

from ..graph import Function
from ..graph.printer import workload_text
from ..sdk.target import capabilities_fingerprint as target_fingerprint

__all__ = ["workload_key", "workload_text", "target_key", "target_fingerprint", "plugin_version", "FORMAT_VERSION"]

FORMAT_VERSION = 1
"""Version of the record format (config + trace JSON); a record of another version is never applied."""


def workload_key(function: Function) -> str:
    return hashlib.sha256(workload_text(function).encode()).hexdigest()[:32]


def target_key(target) -> str:
    return str(target)


def plugin_version(implementation, target) -> str:
    """`distribution==version` of the plugin that declared `implementation` (core: tensorkiln's)."""
    plugin = getattr(implementation, "plugin", "") or "tensorkiln"
    distribution = plugin.split(":", 1)[0]
    try:
        return f"{distribution}=={metadata.version(distribution)}"
    except metadata.PackageNotFoundError:   # a plugin registered from a test or notebook
        manifest = getattr(getattr(target, "manifest", None), "plugin", None)
        return f"{distribution}=={getattr(manifest, 'version', 'unknown')}"
