"""The SDK a target plugin is written against: hooks, manifest models, codegen bases.

A plugin imports only from here (and the public `tensorkiln.te`, `tensorkiln.tir`
APIs). See sdk_docs/ for the vendor guide.
"""
from pathlib import Path

from .binary_check import check_elf
from .c_source import CSourceEmitter, LaunchGeometry, launch_geometry, parse_thread_tag
from .codegen import Artifact, Emitter, KernelFunction, KernelSignature, LoadedModule, ParamSpec, RuntimeLoader, signature_of
from .hookspecs import hookimpl, hookspec
from .intrinsic_impl import ExternImpl, IntrinsicImpl, SourceImpl, implementation_for
from .native import NativeKernel, NativeModule, TKArg, load_native_library
from .manifest import (
    Capabilities, IntrinsicDecl, LayoutPreference, OpSupport, OptionDecl, PluginInfo, PluginManifest,
)
from .plugin_manager import ENTRY_POINT_GROUP, PluginRegistry, read_manifest, registry, reload_plugins
from .strategy import INJECTIVE, RULE_PRIORITY, Knob, OpImplementation, TuningSpace, Workload
from .target import Target, TargetSpec

__all__ = [
    "hookimpl", "hookspec", "TargetSpec", "Target", "PluginManifest", "PluginInfo", "Capabilities",
    "OptionDecl", "OpSupport", "LayoutPreference", "IntrinsicDecl", "Artifact", "Emitter", "RuntimeLoader",
    "LoadedModule", "KernelFunction", "KernelSignature", "ParamSpec", "signature_of", "ENTRY_POINT_GROUP",
    "PluginRegistry", "registry", "reload_plugins", "load_manifest",
    "CSourceEmitter", "LaunchGeometry", "launch_geometry", "parse_thread_tag",
    "IntrinsicImpl", "SourceImpl", "ExternImpl", "implementation_for",
    "NativeKernel", "NativeModule", "TKArg", "load_native_library",
    "check_elf", "OpImplementation", "Knob", "TuningSpace", "Workload", "INJECTIVE", "RULE_PRIORITY",
]


def load_manifest(package_file: str) -> PluginManifest:
    """Read the manifest beside a plugin module: `load_manifest(__file__)`.

    Called by a plugin's target.py to build its TargetSpec from the same validated
    manifest the core already checked.
    """
    path = Path(package_file).resolve()
    directory = path if path.is_dir() else path.parent
    manifest, _ = read_manifest(directory / "manifest.toml", directory.name)
    return manifest
