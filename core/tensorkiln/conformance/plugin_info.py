"""conformance/plugin_info.py: find what belongs to one target's plugin (manifest file, own hooks)."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sdk.plugin_manager import MANIFEST_FILE, registry

__all__ = ["plugin_directory", "manifest_path", "own_hook_results", "describe_device"]


def plugin_directory(target: Any) -> Path | None:
    """The package directory of the plugin providing `target` (where manifest.toml lives)."""
    for loaded in registry().plugins:
        if any(spec.name == target.name for spec in loaded.targets):
            module_file = getattr(loaded.module, "__file__", None)
            return Path(module_file).resolve().parent if module_file else None
    return None


def manifest_path(target: Any) -> Path | None:
    directory = plugin_directory(target)
    if directory is None or not (directory / MANIFEST_FILE).is_file():
        return None
    return directory / MANIFEST_FILE


def own_hook_results(hook_name: str, target: Any) -> list:
    """Results of `hook_name(target=...)` from the target's own plugin only (not from vendors adding to it)."""
    hook = getattr(registry().hooks.hook, hook_name)
    prefix = f"{target.spec.distribution}:"
    results: list = []
    for impl in hook.get_hookimpls():
        if not impl.plugin_name.startswith(prefix):
            continue
        kwargs = {"target": target} if "target" in impl.argnames else {}
        result = impl.function(**kwargs)
        if isinstance(result, dict):
            results.append(result)
        elif result:
            results.extend(result)
    return results


def describe_device(target: Any) -> str:
    """A line describing where the target runs (loader's `describe_device()` when it has one)."""
    import platform

    host = f"{platform.machine()} {platform.system()} {platform.release()}, python {platform.python_version()}"
    loader = target.spec.loader
    describe = getattr(loader, "describe_device", None)
    if callable(describe):
        try:
            return f"{describe()} (host {host})"
        except Exception as error:  # a broken description must not stop the report
            return f"device description failed: {type(error).__name__}: {error} (host {host})"
    return f"{target.manifest.plugin.device_kind} on host {host}"
