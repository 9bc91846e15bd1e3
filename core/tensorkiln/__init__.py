"""tensorkiln: an end-to-end deep-learning compiler built as an SDK for hardware vendors.

    import tensorkiln as tk
    tk.target("llvm -mcpu=native")           # a validated Target
    tk.build(schedule, [A, B, C], target="llvm")
    lib = tk.compile(tk.frontend.from_onnx("model.onnx"), target="cpu_llvm")
"""
from __future__ import annotations

import importlib

__version__ = "0.1.0"
SDK_API_VERSION = "1.0"

# Subpackages and functions load on first use: `import tensorkiln` stays cheap and a
# broken optional part (a missing system library) cannot break `tensorkiln targets`.
_LAZY = {
    "te": ("tensorkiln.te", None),
    "tir": ("tensorkiln.tir", None),
    "sdk": ("tensorkiln.sdk", None),
    "graph": ("tensorkiln.graph", None),
    "frontend": ("tensorkiln.frontend", None),
    "passes": ("tensorkiln.passes", None),
    "ops": ("tensorkiln.ops", None),
    "runtime": ("tensorkiln.runtime", None),
    "conformance": ("tensorkiln.conformance", None),
    "lower": ("tensorkiln.te.lower", "lower"),
    "build": ("tensorkiln.build_module", "build"),
    "compile": ("tensorkiln.compiler", "compile"),
    "onnx_backend": ("tensorkiln.onnx_backend", None),
    "target": ("tensorkiln.target_lookup", "target"),
    "targets": ("tensorkiln.target_lookup", "targets"),
    "intrinsic": ("tensorkiln.target_lookup", "intrinsic"),
    "intrinsics": ("tensorkiln.target_lookup", "intrinsics"),
}

__all__ = ["__version__", "SDK_API_VERSION", *_LAZY]


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'tensorkiln' has no attribute {name!r}")
    module_name, attribute = _LAZY[name]
    module = importlib.import_module(module_name)
    value = module if attribute is None else getattr(module, attribute)
    globals()[name] = value
    return value


def __dir__():
    return sorted(__all__)
