"""runtime/module.py: `tensorkiln.runtime.Module`: what `tk.build` returns and `load_module` loads again.

    f = tk.build(s, [A, B, C], target="llvm", name="gemm")
    f(a, b, c)                                   # runs the entry kernel "gemm"
    f.get_source(); f.get_source("asm")          # LLVM IR (optimized), assembly
    f.export_library("gemm.so")
    g = tk.runtime.load_module("gemm.so")        # no compiler needed
    t = f.time_evaluator(number=10, repeat=3)(a, b, c); t.median
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from ..ir.errors import ArtifactError, TargetError
from ..sdk.codegen import Artifact, KernelFunction, LoadedModule

__all__ = ["Module", "TimeResult", "load_module"]


@dataclass(frozen=True)
class TimeResult:
    """Seconds per call: one mean per repeat in `results`."""

    results: tuple[float, ...]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.results)

    @property
    def median(self) -> float:
        return statistics.median(self.results)

    @property
    def min(self) -> float:
        return min(self.results)

    def __str__(self) -> str:
        return f"TimeResult(median={self.median * 1e3:.4f} ms, mean={self.mean * 1e3:.4f} ms, repeats={len(self.results)})"


class Module:
    """Compiled kernels loaded on a device, with an entry kernel that `module(...)` runs."""

    def __init__(self, loaded: LoadedModule, target: Any = None, entry_name: str | None = None) -> None:
        self.loaded = loaded
        self.target = target
        names = self.kernel_names
        if entry_name is None or entry_name not in names:
            entry_name = names[0] if names else None
        self.entry_name = entry_name

    @property
    def artifact(self) -> Artifact:
        return self.loaded.artifact

    @property
    def kernel_names(self) -> list[str]:
        return [k.name for k in self.artifact.kernels]

    def __call__(self, *args: Any) -> None:
        self.get_function(self.entry_name)(*args)

    def get_function(self, name: str) -> KernelFunction:
        """The kernel `name`; KeyError lists the kernels of this module."""
        if name not in self.kernel_names:
            raise KeyError(f"module has no kernel {name!r}; it has {self.kernel_names}")
        return self.loaded.get_function(name)

    def __getitem__(self, name: str) -> KernelFunction:
        return self.get_function(name)

    def get_source(self, fmt: str | None = None) -> str:
        """The main source (e.g. LLVM IR) or another view such as "asm".

        Views that cost compile time (assembly) are rendered on request by the loaded module's
        `render_source(fmt)` when the artifact does not carry them.
        """
        if fmt in (None, "", self.artifact.format, "ll", "llvm"):
            return self.artifact.source
        if fmt in self.artifact.sources:
            return self.artifact.sources[fmt]
        render = getattr(self.loaded, "render_source", None)
        text = render(fmt) if render is not None else None
        if text is None:
            views = [self.artifact.format, *self.artifact.sources, *getattr(self.loaded, "rendered_views", ())]
            raise KeyError(f"no {fmt!r} source; available: {views}")
        return text

    def export_library(self, path: str) -> None:
        self.loaded.export_library(str(path))

    def time_evaluator(self, name: str | None = None, number: int = 10, repeat: int = 3) -> Callable[..., TimeResult]:
        """A function that runs kernel `name` (default: the entry) `repeat` x `number` times and returns times."""
        kernel = name or self.entry_name
        self.get_function(kernel)  # fail now for a wrong name

        def evaluate(*args: Any) -> TimeResult:
            return TimeResult(tuple(self.loaded.time_function(kernel, args, number, repeat)))

        return evaluate

    def set_num_threads(self, count: int) -> None:
        """Threads for this module's parallel loops (0 = all cores), where the loader supports it."""
        setter = getattr(self.loaded, "set_num_threads", None)
        if setter is None:
            raise TargetError(f"target {self.target} has no thread setting ({type(self.loaded).__name__} has no set_num_threads)")
        setter(count)

    def __repr__(self) -> str:
        return f"<tensorkiln.runtime.Module {self.kernel_names} target={self.artifact.target!r}>"


def load_module(path: str, entry_name: str | None = None) -> Module:
    """Load a library written by `Module.export_library`; needs no compiler or plugin code."""
    from ..sdk.native import load_native_library

    text = str(path)
    if not text.endswith((".so", ".dylib", ".dll")):
        raise ArtifactError(f"load_module: {text!r} is not a shared library (.so); write one with "
                            "Module.export_library(path)")
    return Module(load_native_library(text), target=None, entry_name=entry_name)
