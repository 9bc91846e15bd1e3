"""Target and intrinsic lookup for users: `tk.target(...)`, `tk.targets()`, `tk.intrinsic(...)`."""
from __future__ import annotations

from typing import Any

from .ir.errors import TargetError
from .sdk.plugin_manager import registry
from .sdk.target import Target

__all__ = ["target", "targets", "intrinsics", "intrinsic"]


def target(text: "str | Target") -> Target:
    """Resolve "llvm -mcpu=native" (name or alias plus options) to a validated Target."""
    return registry().target(text)


def targets() -> list[str]:
    """Canonical names of the installed targets."""
    return registry().names()


def intrinsics(target_text: "str | Target") -> list[Any]:
    """Every tensor intrinsic registered for `target` by any installed plugin."""
    resolved = target(target_text)
    return registry().call("tensorkiln_intrinsics", resolved)


def intrinsic(name: str, target: "str | Target" = "cpu_llvm") -> Any:
    """The intrinsic called `name` on `target`; the error lists the registered ones."""
    found = intrinsics(target)
    for intrin in found:
        if intrin.name == name:
            return intrin
    names = ", ".join(sorted(i.name for i in found)) or "none"
    raise TargetError(f"no intrinsic {name!r} for target {target!s}; registered: {names}")
