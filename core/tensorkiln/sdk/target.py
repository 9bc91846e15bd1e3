"""TargetSpec (what a plugin provides) and Target (what a user asked for).

`tensorkiln.target("llvm -mcpu=native")` resolves the name through installed
plugins (aliases included) and validates the options against the manifest.
"""
from __future__ import annotations

import hashlib
import json
import shlex
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir.errors import TargetError
from .codegen import Emitter, RuntimeLoader
from .manifest import PluginManifest

__all__ = ["TargetSpec", "Target", "parse_target_string", "capabilities_fingerprint"]


@dataclass(frozen=True, eq=False)
class TargetSpec:
    """The dynamic part of a plugin's declaration: its manifest plus its code.

    Built by the plugin (`target.py`) and returned from its `tensorkiln_targets`
    hook. `emitter` and `loader` stay None while the plugin has no code generator;
    the manifest must then say `available = false` with the reason.

    `refine_capabilities(target) -> Capabilities`, when given, returns what this
    target with its options can do on this host (the vector width and register count
    of the host CPU, or of `-mcpu`): the manifest declares the static ceiling, the
    target's `capabilities` are the refined ones.

    `host_fingerprint(target) -> str`, when given, names everything this plugin's strategies
    and schedules read from the host for that target beyond its string and capabilities (the
    resolved CPU, its cache sizes): two hosts that lower a group differently must give different
    strings. The core then caches this target's lowered groups across compiles and processes
    (compiler/lowering_cache.py); a target without one is lowered on every compile.
    """

    manifest: PluginManifest
    emitter: Emitter | None = None
    loader: RuntimeLoader | None = None
    refine_capabilities: Callable[["Target"], Any] | None = None
    host_fingerprint: Callable[["Target"], str] | None = None
    distribution: str = ""
    manifest_hash: str = ""

    @property
    def name(self) -> str:
        return self.manifest.plugin.name

    @property
    def is_available(self) -> bool:
        return self.manifest.plugin.available and self.emitter is not None and self.loader is not None

    def require_available(self) -> None:
        """Raise TargetError when this target cannot compile yet."""
        if not self.is_available:
            reason = self.manifest.plugin.unavailable_reason or "the plugin provides no emitter or runtime loader"
            raise TargetError(f"target {self.name!r} is not available yet: {reason}")


_REFINED: dict[tuple[int, str], tuple[TargetSpec, Any]] = {}


def parse_target_string(text: str) -> tuple[str, dict[str, str | bool]]:
    """"llvm -mcpu=native -opt" -> ("llvm", {"mcpu": "native", "opt": True})."""
    words = shlex.split(text)
    if not words:
        raise TargetError("empty target string; write a target name such as 'llvm' or 'opencl'")
    name, options = words[0], {}
    for word in words[1:]:
        if not word.startswith("-"):
            raise TargetError(f"target {text!r}: option {word!r} must start with '-', e.g. -mcpu=native")
        key, has_value, value = word.lstrip("-").partition("=")
        options[key.replace("-", "_")] = value if has_value else True
    return name, options


def _coerce(target: str, key: str, value: Any, kind: str, choices: tuple[str, ...]) -> Any:
    try:
        if kind == "int":
            value = int(value)
        elif kind == "bool":
            value = value if isinstance(value, bool) else str(value).lower() in ("1", "true", "yes", "on")
        else:
            value = str(value)
    except ValueError:
        raise TargetError(f"target {target!r}: option -{key}={value!r} must be of type {kind}") from None
    if choices and str(value) not in choices:
        raise TargetError(f"target {target!r}: option -{key}={value!r} must be one of {', '.join(choices)}")
    return value


@dataclass(frozen=True, eq=False)
class Target:
    """A resolved target: the plugin's spec plus validated options.

    str(target) gives the canonical form, e.g. "cpu_llvm -mcpu=native".
    """

    spec: TargetSpec
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def manifest(self) -> PluginManifest:
        return self.spec.manifest

    @property
    def capabilities(self):
        """The manifest's capabilities, refined for these options on this host by the plugin."""
        if self.spec.refine_capabilities is None:
            return self.spec.manifest.capabilities
        key = (id(self.spec), str(self))
        cached = _REFINED.get(key)
        if cached is None or cached[0] is not self.spec:
            cached = (self.spec, self.spec.refine_capabilities(self))
            _REFINED[key] = cached
        return cached[1]

    @classmethod
    def from_spec(cls, spec: TargetSpec, options: dict[str, Any]) -> "Target":
        declared = spec.manifest.options
        checked: dict[str, Any] = {}
        for key, value in options.items():
            if key not in declared:
                accepted = ", ".join(f"-{k}" for k in declared) or "none"
                raise TargetError(f"target {spec.name!r} has no option -{key}; accepted options: {accepted}")
            decl = declared[key]
            checked[key] = _coerce(spec.name, key, value, decl.type, decl.choices)
        for key, decl in declared.items():
            if key not in checked and decl.default is not None:
                checked[key] = decl.default
        return cls(spec, checked)

    def __str__(self) -> str:
        parts = [self.name]
        for key, value in sorted(self.options.items()):
            parts.append(f"-{key}" if value is True else f"-{key}={value}")
        return " ".join(parts)

    def __repr__(self) -> str:
        return f"Target({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Target) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))


def capabilities_fingerprint(target) -> str:
    """Hash of the capabilities the plugin resolved for `target` (vector width, registers, dtypes, ...)."""
    capabilities = getattr(target, "capabilities", None)
    dump = capabilities.model_dump(mode="json") if hasattr(capabilities, "model_dump") else repr(capabilities)
    return hashlib.sha256(json.dumps(dump, sort_keys=True, default=str).encode()).hexdigest()[:16]
