"""Pydantic models for everything a plugin declares statically (its manifest file).

The manifest is a TOML file inside the plugin package (`<package>/manifest.toml`).
The core reads and validates it *before* importing any of the plugin's code, so a
plugin built for another SDK range, or with a malformed declaration, is refused
with an error naming the field, and no vendor code runs.

Example (plugins/cpu_llvm/tensorkiln_cpu_llvm/manifest.toml)::

    [plugin]
    name = "cpu_llvm"
    aliases = ["llvm", "cpu"]
    version = "0.1.0"
    sdk_api = ">=1.0,<2"
    device_kind = "cpu"

    [capabilities]
    dtypes = ["float32", "float64", "int32"]
    vector_width_bits = 256
"""
from __future__ import annotations

import re
from typing import Literal

from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import InvalidVersion, Version
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..ir.dtypes import SCALAR_DTYPES

__all__ = [
    "PluginInfo", "Capabilities", "OptionDecl", "OpSupport", "LayoutPreference", "IntrinsicDecl",
    "PluginManifest", "SCHEDULE_PRIMITIVES", "MEMORY_SCOPES",
]

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

SCHEDULE_PRIMITIVES = (
    "split", "fuse", "reorder", "tile", "unroll", "vectorize", "parallel", "compute_at",
    "compute_inline", "compute_root", "bind", "pragma", "storage_align", "tensorize",
    "cache_read", "cache_write", "prefetch",
    # spatial (FPGA HLS) primitives: loop pipelining and the memory of a dataflow design
    "pipeline", "loop_tripcount", "partition", "stream", "dataflow",
)
SPATIAL_PRIMITIVES = ("pipeline", "loop_tripcount", "partition", "stream", "dataflow")
"""Primitives a target claims only by listing them: the default claim leaves them (and bind and prefetch, whose
hint an emitter must turn into its own instruction) out."""
MEMORY_SCOPES = ("global", "shared", "local")
DEVICE_KINDS = ("cpu", "gpu", "fpga", "accelerator", "simulator")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginInfo(_Strict):
    """Who the plugin is and which core it works with."""

    name: str = Field(description="canonical target name, lower_snake_case (e.g. 'cpu_llvm')")
    aliases: tuple[str, ...] = Field(default=(), description="other names users may write ('llvm', 'cpu')")
    version: str = Field(description="plugin version (PEP 440)")
    sdk_api: str = Field(description="range of tensorkiln SDK API versions this plugin supports, e.g. '>=1.0,<2'")
    device_kind: Literal["cpu", "gpu", "fpga", "accelerator", "simulator"]
    description: str = ""
    available: bool = Field(default=True, description="false while the emitter/loader are not implemented")
    unavailable_reason: str = Field(default="", description="shown when compiling for an unavailable target")

    @field_validator("name")
    @classmethod
    def _name_is_snake_case(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"{value!r} is not lower_snake_case (letters, digits, underscores; starts with a letter)")
        return value

    @field_validator("aliases")
    @classmethod
    def _aliases_are_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for alias in value:
            if not _NAME.match(alias):
                raise ValueError(f"alias {alias!r} is not lower_snake_case")
        return value

    @field_validator("version")
    @classmethod
    def _version_parses(cls, value: str) -> str:
        try:
            Version(value)
        except InvalidVersion:
            raise ValueError(f"{value!r} is not a PEP 440 version such as '0.1.0'") from None
        return value

    @field_validator("sdk_api")
    @classmethod
    def _sdk_api_is_a_range(cls, value: str) -> str:
        try:
            SpecifierSet(value)
        except InvalidSpecifier:
            raise ValueError(f"{value!r} is not a version range such as '>=1.0,<2'") from None
        return value

    @model_validator(mode="after")
    def _reason_when_unavailable(self) -> "PluginInfo":
        if not self.available and not self.unavailable_reason:
            raise ValueError("available = false needs unavailable_reason (what is missing and when it comes)")
        return self

    def supports_sdk(self, sdk_version: str) -> bool:
        return SpecifierSet(self.sdk_api).contains(Version(sdk_version), prereleases=True)


class Capabilities(_Strict):
    """What the hardware can do; the compiler and the conformance kit read these."""

    dtypes: tuple[str, ...] = ("float32",)
    vector_width_bits: int = Field(default=0, ge=0, description="widest SIMD register; 0 = no vectors")
    vector_registers: int = Field(default=0, ge=0, description="SIMD registers a kernel may use; 0 = unknown")
    max_threads: int = Field(default=1, ge=0, description="host threads for parallel loops; 0 = all cores")
    max_threads_per_block: int = Field(default=0, ge=0, description="GPU work-group limit; 0 = not a GPU")
    warp_size: int = Field(default=0, ge=0, description="threads that run in lockstep and exchange values by "
                           "shuffles (NVIDIA: 32); 0 = none declared")
    max_shared_memory_bytes: int = Field(default=0, ge=0)
    memory_scopes: tuple[str, ...] = ("global",)
    thread_axes: tuple[str, ...] = Field(default=(), description="bindable axes, e.g. 'blockIdx.x', 'threadIdx.x'")
    schedule_primitives: tuple[str, ...] = tuple(p for p in SCHEDULE_PRIMITIVES
                                                 if p not in ("bind", "prefetch") and p not in SPATIAL_PRIMITIVES)
    concurrent_kernels: bool = Field(default=False, description="independent kernels may run at the same time")
    export_library: bool = Field(default=False, description="compiled modules can be written as a loadable library")
    alias_buffers: bool = Field(default=False, description="a group that only reshapes may run no kernel, its output "
                                "a view of its input's bytes, and a concatenation may run none, its inputs written "
                                "in its output's bytes: the loader's buffers are host memory the executor may view "
                                "at any planned offset (a multiple of the element size) with any shape "
                                "(compiler/alias_steps.py, compiler/placed_concats.py); False keeps a copy kernel "
                                "for each")

    @field_validator("dtypes")
    @classmethod
    def _known_dtypes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for dtype in value:
            if dtype not in SCALAR_DTYPES or dtype == "handle":
                raise ValueError(f"unknown dtype {dtype!r}; use names such as 'float32', 'int8'")
        return value

    @field_validator("memory_scopes")
    @classmethod
    def _known_scopes(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for scope in value:
            if scope not in MEMORY_SCOPES:
                raise ValueError(f"unknown memory scope {scope!r}; use {', '.join(MEMORY_SCOPES)}")
        return value

    @field_validator("schedule_primitives")
    @classmethod
    def _known_primitives(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for primitive in value:
            if primitive not in SCHEDULE_PRIMITIVES:
                raise ValueError(f"unknown schedule primitive {primitive!r}; use {', '.join(SCHEDULE_PRIMITIVES)}")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> "Capabilities":
        if self.thread_axes and self.max_threads_per_block == 0:
            raise ValueError("thread_axes are declared but max_threads_per_block is 0; set the work-group limit")
        if "bind" in self.schedule_primitives and not self.thread_axes:
            raise ValueError("'bind' is claimed but no thread_axes are declared")
        if "shared" in self.memory_scopes and self.max_shared_memory_bytes == 0:
            raise ValueError("scope 'shared' is declared but max_shared_memory_bytes is 0")
        return self


class OptionDecl(_Strict):
    """A target option users may pass, e.g. `llvm -mcpu=native`."""

    type: Literal["str", "int", "bool"] = "str"
    default: str | int | bool | None = None
    choices: tuple[str, ...] = ()
    help: str = ""


class OpSupport(_Strict):
    """Graph ops the target runs; the rest falls back to an available CPU target (cpu_llvm when installed)."""

    supported: tuple[str, ...] = Field(default=(), description="op names, or '*' for every registered op")
    unsupported: tuple[str, ...] = Field(default=(), description="exceptions when supported is '*'")

    def claims(self, op_name: str) -> bool:
        if op_name in self.unsupported:
            return False
        return "*" in self.supported or op_name in self.supported


class LayoutPreference(_Strict):
    """The layout a target wants for an op's data, honoured by the layout pass."""

    op: str
    layout: str = Field(description="e.g. 'NCHW', 'NHWC', 'NCHW8c'")
    weight_layout: str | None = None

    @field_validator("layout")
    @classmethod
    def _layout_text(cls, value: str) -> str:
        if not re.match(r"^([A-Z]|[0-9]+[a-z])+$", value):
            raise ValueError(f"{value!r} is not a layout string such as 'NCHW' or 'NCHW8c'")
        return value


class IntrinsicDecl(_Strict):
    """A tensor intrinsic the plugin registers, declared statically for docs and the kit."""

    name: str
    description: str = ""
    dtypes: tuple[str, ...] = ("float32",)
    tile: dict[str, int] = Field(default_factory=dict, description="fixed tile extents, e.g. {m = 6, n = 16}")


class PluginManifest(_Strict):
    """The whole static declaration of one target plugin."""

    plugin: PluginInfo
    capabilities: Capabilities = Capabilities()
    options: dict[str, OptionDecl] = Field(default_factory=dict)
    ops: OpSupport = OpSupport()
    layouts: tuple[LayoutPreference, ...] = ()
    intrinsics: tuple[IntrinsicDecl, ...] = ()

    @property
    def name(self) -> str:
        return self.plugin.name
