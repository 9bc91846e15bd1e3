"""Discover, validate and load target plugins from the `tensorkiln.plugins` entry points.

Loading runs in phases per plugin, and a failure in one phase skips only that
plugin, recording a `PluginError` (plugin, phase or field, reason, fix):

1. locate  — find `manifest.toml` in the entry point's package, without importing it
2. manifest — parse and validate it with the pydantic models
3. sdk_api — check the plugin's SDK range includes this core
4. import  — import the hook module and register it with pluggy (`check_pending`)
5. targets — call `tensorkiln_targets()` and check each TargetSpec against the manifest

Two plugins claiming one target name (or alias) are both refused for that name.

Vendor code never ends the process: any exception from a plugin's import or hooks,
`SystemExit` included (everything but KeyboardInterrupt), is caught per plugin. At load
the plugin is skipped; later, a hook that fails (`call`, `call_each`) disables its
plugin for the process: a `PluginWarning` names plugin, hook and reason, the
`PluginError` joins `errors` (listed by `tensorkiln targets`), its hooks are
unregistered and its targets removed, and the other plugins' results are used.
"""
from __future__ import annotations

import dataclasses
import hashlib
import importlib
import importlib.metadata as metadata
import importlib.util
import tomllib
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

import pluggy
from pydantic import ValidationError

from .. import SDK_API_VERSION, __version__
from ..ir.errors import PluginError, TargetError, TensorkilnError
from ..ir.pass_infra import add_pass_source
from .hookspecs import PROJECT_NAME, TensorkilnHookSpecs
from .manifest import PluginManifest
from .target import Target, TargetSpec, parse_target_string

__all__ = ["ENTRY_POINT_GROUP", "PluginRegistry", "LoadedPlugin", "PluginWarning", "registry", "reload_plugins",
           "read_manifest", "validate_manifest"]

ENTRY_POINT_GROUP = "tensorkiln.plugins"
MANIFEST_FILE = "manifest.toml"


class PluginWarning(UserWarning):
    """A plugin misbehaved after loading (a hook raised) and is disabled for this process."""


@dataclass
class LoadedPlugin:
    """A plugin that passed every phase; `hook_name` is its name in the pluggy manager."""

    entry_point: str
    distribution: str
    module: Any
    manifest: PluginManifest
    targets: list[TargetSpec] = field(default_factory=list)
    hook_name: str = ""


def validate_manifest(data: dict, plugin: str) -> PluginManifest:
    """Validate raw manifest data; a problem raises PluginError naming the field."""
    try:
        return PluginManifest.model_validate(data)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise PluginError(plugin, f"manifest field {where}", first["msg"],
                          f"correct '{where}' in {MANIFEST_FILE} (see the manifest schema in sdk_docs)") from None


def read_manifest(path: Path, plugin: str) -> tuple[PluginManifest, str]:
    """Read and validate a manifest file; returns it and the sha256 of its bytes."""
    raw = path.read_bytes()
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise PluginError(plugin, "manifest", f"{path} is not valid TOML: {error}", "fix the TOML syntax") from None
    return validate_manifest(data, plugin), hashlib.sha256(raw).hexdigest()


def _locate_manifest(ep: metadata.EntryPoint, plugin: str) -> Path:
    """Find the manifest next to the entry point's package without importing it."""
    package = ep.module.split(".")[0]
    wanted = f"{package}/{MANIFEST_FILE}"
    dist = ep.dist
    for file in (dist.files or []) if dist is not None else []:
        if str(file).replace("\\", "/") == wanted:
            path = Path(dist.locate_file(file))
            if path.is_file():
                return path
    # Editable installs list no package files; a top-level find_spec imports nothing.
    spec = importlib.util.find_spec(package)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            path = Path(location) / MANIFEST_FILE
            if path.is_file():
                return path
    raise PluginError(plugin, "locate", f"no {MANIFEST_FILE} found in package {package!r}",
                      f"ship {package}/{MANIFEST_FILE} as package data (see `tensorkiln new-plugin`)")


class PluginRegistry:
    """All plugins found in this environment, their targets and their load errors."""

    def __init__(self, entry_points: Iterable[metadata.EntryPoint] | None = None) -> None:
        self.hooks = pluggy.PluginManager(PROJECT_NAME)
        self.hooks.add_hookspecs(TensorkilnHookSpecs)
        self.plugins: list[LoadedPlugin] = []
        self.errors: list[PluginError] = []
        self.targets: dict[str, TargetSpec] = {}
        self._aliases: dict[str, str] = {}
        self._conflicts: dict[str, list[str]] = {}
        self._disabled: dict[str, PluginError] = {}   # target name -> why its plugin was disabled
        if entry_points is None:
            entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
        for ep in sorted(entry_points, key=lambda e: e.name):
            self._load_one(ep)
        self._index_targets()

    def _load_one(self, ep: metadata.EntryPoint) -> None:
        distribution = ep.dist.name if ep.dist is not None else "?"
        plugin = f"{ep.name} ({distribution})"
        hook_name = f"{distribution}:{ep.name}"  # unique even when two plugins reuse a target name
        try:
            manifest, manifest_hash = read_manifest(_locate_manifest(ep, plugin), plugin)
            if not manifest.plugin.supports_sdk(SDK_API_VERSION):
                raise PluginError(
                    plugin, "sdk_api",
                    f"declares sdk_api {manifest.plugin.sdk_api!r}, which excludes this core "
                    f"(tensorkiln {__version__}, SDK API {SDK_API_VERSION})",
                    f"install a {distribution} release built for SDK API {SDK_API_VERSION}, "
                    "or a tensorkiln core inside the plugin's range")
            try:
                module = ep.load()
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # vendor code, sys.exit included: reported, never fatal
                raise PluginError(plugin, "import", f"importing {ep.value!r} raised {type(error).__name__}: {error}",
                                  "fix the plugin's import error (run `python -c 'import "
                                  f"{ep.module}'` to see the traceback)") from None
            try:
                self.hooks.register(module, name=hook_name)
                self.hooks.check_pending()
            except (ValueError, pluggy.PluginValidationError) as error:
                self._unregister(hook_name)
                raise PluginError(plugin, "hooks", str(error), "hook names must match tensorkiln.sdk.hookspecs") from None
            targets = self._collect_targets(module, plugin, manifest, distribution, manifest_hash)
        except PluginError as error:
            self._unregister(hook_name)
            self.errors.append(error)
            return
        self.plugins.append(LoadedPlugin(ep.value, distribution, module, manifest, targets, hook_name))

    def _unregister(self, name: str) -> None:
        module = self.hooks.get_plugin(name)
        if module is not None:
            self.hooks.unregister(module)

    def _collect_targets(self, module, plugin, manifest, distribution, manifest_hash) -> list[TargetSpec]:
        hook = getattr(module, "tensorkiln_targets", None)
        if hook is None:
            raise PluginError(plugin, "targets", "the module implements no tensorkiln_targets hook",
                              "add @hookimpl def tensorkiln_targets(): return [TargetSpec(...)]")
        try:
            specs = list(hook() or [])
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # sys.exit included
            raise PluginError(plugin, "targets", f"tensorkiln_targets() raised {type(error).__name__}: {error}",
                              "make the hook return TargetSpec objects without side effects") from None
        checked = []
        for spec in specs:
            if not isinstance(spec, TargetSpec):
                raise PluginError(plugin, "targets", f"tensorkiln_targets() returned {type(spec).__name__}, not TargetSpec",
                                  "return tensorkiln.sdk.TargetSpec objects")
            if spec.manifest != manifest:
                raise PluginError(plugin, "targets", f"TargetSpec {spec.name!r} does not use the plugin's validated manifest",
                                  "build the TargetSpec from tensorkiln.sdk.load_manifest(__package__)")
            if manifest.plugin.available and (spec.emitter is None or spec.loader is None):
                raise PluginError(plugin, "manifest field plugin.available",
                                  "the manifest says available = true but the TargetSpec has no emitter or loader",
                                  "set available = false with unavailable_reason, or provide both")
            checked.append(dataclasses.replace(spec, distribution=distribution, manifest_hash=manifest_hash))
        return checked

    def _index_targets(self) -> None:
        claims: dict[str, list[tuple[str, TargetSpec]]] = {}
        for loaded in self.plugins:
            for spec in loaded.targets:
                for name in (spec.name, *spec.manifest.plugin.aliases):
                    claims.setdefault(name, []).append((loaded.distribution, spec))
        for name, claimants in claims.items():
            canonical = [c for c in claimants if c[1].name == name]
            if len(claimants) > 1 and (len(canonical) != 1):
                owners = [dist for dist, _ in claimants]
                self._conflicts[name] = owners
                self.errors.append(PluginError(
                    " and ".join(owners), "targets", f"target name {name!r} is claimed by {len(owners)} plugins: "
                    f"{', '.join(owners)}", "uninstall one of them or rename its target"))
                continue
            dist, spec = canonical[0] if canonical else claimants[0]
            if name == spec.name:
                self.targets[name] = spec
            else:
                self._aliases[name] = spec.name

    # -- queries --------------------------------------------------------------------------

    def names(self) -> list[str]:
        return sorted(self.targets)

    def spec(self, name: str) -> TargetSpec:
        if name in self._conflicts:
            raise TargetError(f"target {name!r} is ambiguous: claimed by {', '.join(self._conflicts[name])}; "
                              "uninstall one of these plugins")
        if name in self._disabled:
            raise TargetError(f"target {name!r} is unavailable: its plugin was disabled for this process after "
                              f"{self._disabled[name]}")
        canonical = self._aliases.get(name, name)
        if canonical not in self.targets:
            installed = ", ".join(
                f"{n} (aliases: {', '.join(s.manifest.plugin.aliases)})" if s.manifest.plugin.aliases else n
                for n, s in sorted(self.targets.items())) or "none"
            raise TargetError(f"unknown target {name!r}; installed targets: {installed}. "
                              "Install the plugin that provides it (pip install tensorkiln-<target>)")
        return self.targets[canonical]

    def target(self, text: "str | Target") -> Target:
        if isinstance(text, Target):
            return text
        name, options = parse_target_string(text)
        return Target.from_spec(self.spec(name), options)

    def call(self, hook_name: str, target: Target) -> list:
        """Call a per-target hook on every plugin and flatten the results (pluggy's order: the
        plugin registered last first). A plugin whose hook fails is disabled and skipped."""
        flat: list = []
        for _, result in reversed(self.call_each(hook_name, target=target)):
            if isinstance(result, dict):
                flat.append(result)
            else:
                flat.extend(result)
        return flat

    def call_each(self, hook_name: str, **arguments: Any) -> list[tuple[str, Any]]:
        """(plugin name, result) of each plugin's implementation of `hook_name` that returned
        something, in registration order. Each gets the arguments it names (an implementation
        may accept fewer). A hook that raises anything but KeyboardInterrupt disables its plugin
        (see `disable`) and the others' results are returned."""
        results = []
        for impl in getattr(self.hooks.hook, hook_name).get_hookimpls():
            try:
                result = impl.function(*(arguments[name] for name in impl.argnames))
            except KeyboardInterrupt:
                raise
            except BaseException as error:  # noqa: BLE001 - third-party code, sys.exit included
                self.disable(impl.plugin_name, f"hook {hook_name}", f"{type(error).__name__}: {error}")
                continue
            if result:
                results.append((impl.plugin_name, result))
        return results

    def disable(self, plugin_name: str, phase: str, reason: str) -> PluginError:
        """Disable a plugin that misbehaved after loading, for the rest of the process: warn
        (PluginWarning), record a PluginError in `errors`, unregister its hooks and remove its
        targets. Returns the recorded error. Called by `call_each` and by the compiler when a
        hook's result is unusable."""
        error = PluginError(plugin_name, phase, reason,
                            "fix the plugin or uninstall it; it is disabled until the process restarts")
        self.errors.append(error)
        warnings.warn(str(error), PluginWarning, stacklevel=3)
        self._unregister(plugin_name)
        for loaded in [p for p in self.plugins if p.hook_name == plugin_name]:
            self.plugins.remove(loaded)
            for spec in loaded.targets:
                for name in (spec.name, *spec.manifest.plugin.aliases):
                    self.targets.pop(name, None)
                    self._aliases.pop(name, None)
                    self._disabled[name] = error
        return error


_registry: PluginRegistry | None = None


def registry() -> PluginRegistry:
    """The process-wide plugin registry, loaded on first use."""
    global _registry
    if _registry is None:
        _registry = PluginRegistry()
    return _registry


def _register_plugin_passes() -> None:
    """Call every installed target's `tensorkiln_passes` hook: a plugin registers its passes then (at its first
    compile otherwise), so a PassContext made before any compile may name them."""
    plugins = registry()
    for name in plugins.names():
        try:
            target = plugins.target(name)
        except TensorkilnError:      # a target that cannot resolve here (no device) offers no passes here
            continue
        plugins.call("tensorkiln_passes", target)


add_pass_source(_register_plugin_passes)


def reload_plugins() -> PluginRegistry:
    """Forget loaded plugins and discover again (after installing or removing one)."""
    global _registry
    importlib.invalidate_caches()
    _registry = PluginRegistry()
    return _registry


