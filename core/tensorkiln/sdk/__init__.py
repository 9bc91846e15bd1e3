"""The SDK a target plugin is written against: hooks, manifest models, codegen bases.

A plugin imports only from here (and the public `tensorkiln.te`, `tensorkiln.tir`
APIs). See sdk_docs/ for the vendor guide.

Names load on first use (PEP 562): the deploy-only runtime imports `tensorkiln.sdk.native`
and `tensorkiln.sdk.codegen` without pulling in pydantic, pluggy or te.
"""
from __future__ import annotations

import importlib
from pathlib import Path

_EXPORTS = {
    "check_elf": "binary_check",
    "CacheDirectory": "cache_dir", "MemoryAndDiskCache": "cache_dir", "cache_root": "cache_dir",
    "caches_enabled": "cache_dir",
    "CSourceEmitter": "c_source", "LaunchGeometry": "c_source", "launch_geometry": "c_source",
    "parse_thread_tag": "c_source", "c_source_op_limits": "c_source",
    "Artifact": "codegen", "Emitter": "codegen", "KernelFunction": "codegen", "KernelSignature": "codegen",
    "LoadedModule": "codegen", "ParamSpec": "codegen", "RuntimeLoader": "codegen", "signature_of": "codegen",
    "hookimpl": "hookspecs", "hookspec": "hookspecs",
    "ExternImpl": "intrinsic_impl", "IntrinsicImpl": "intrinsic_impl", "SourceImpl": "intrinsic_impl",
    "implementation_for": "intrinsic_impl",
    "NativeKernel": "native", "NativeModule": "native", "TKArg": "native", "load_native_library": "native",
    "TKARG_HEADER": "native", "build_native_module": "native_c", "packed_wrappers": "native_c",
    "Capabilities": "manifest", "IntrinsicDecl": "manifest", "LayoutPreference": "manifest", "OpSupport": "manifest",
    "OptionDecl": "manifest", "PluginInfo": "manifest", "PluginManifest": "manifest",
    "ENTRY_POINT_GROUP": "plugin_manager", "PluginRegistry": "plugin_manager", "read_manifest": "plugin_manager",
    "registry": "plugin_manager", "reload_plugins": "plugin_manager",
    "INJECTIVE": "strategy", "RULE_PRIORITY": "strategy", "Knob": "strategy", "OpImplementation": "strategy",
    "TuningSpace": "strategy", "Workload": "strategy",
    "Target": "target", "TargetSpec": "target",
    "FixedPoint": "fixed_point", "TENSOR_FORMATS_ATTR": "fixed_point", "tensor_formats": "fixed_point",
}

__all__ = [
    "CacheDirectory", "MemoryAndDiskCache", "cache_root", "caches_enabled",
    "hookimpl", "hookspec", "TargetSpec", "Target", "PluginManifest", "PluginInfo", "Capabilities",
    "OptionDecl", "OpSupport", "LayoutPreference", "IntrinsicDecl", "Artifact", "Emitter", "RuntimeLoader",
    "LoadedModule", "KernelFunction", "KernelSignature", "ParamSpec", "signature_of", "ENTRY_POINT_GROUP",
    "PluginRegistry", "registry", "reload_plugins", "load_manifest",
    "CSourceEmitter", "LaunchGeometry", "launch_geometry", "parse_thread_tag", "c_source_op_limits",
    "IntrinsicImpl", "SourceImpl", "ExternImpl", "implementation_for",
    "NativeKernel", "NativeModule", "TKArg", "load_native_library", "TKARG_HEADER", "build_native_module",
    "packed_wrappers", "check_elf", "OpImplementation", "Knob", "TuningSpace", "Workload", "INJECTIVE", "RULE_PRIORITY",
    "FixedPoint", "TENSOR_FORMATS_ATTR", "tensor_formats",
]


def __getattr__(name: str):
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module 'tensorkiln.sdk' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)


def load_manifest(package_file: str):
    """Read the manifest beside a plugin module: `load_manifest(__file__)`.

    Called by a plugin's target.py to build its TargetSpec from the same validated
    manifest the core already checked.
    """
    from .plugin_manager import read_manifest

    path = Path(package_file).resolve()
    directory = path if path.is_dir() else path.parent
    manifest, _ = read_manifest(directory / "manifest.toml", directory.name)
    return manifest
