"""plugin.py: hook implementations of the cpu_llvm plugin (entry point tensorkiln.plugins: cpu_llvm)."""
from tensorkiln.sdk import hookimpl

from .target import CPU_LLVM


@hookimpl
def tensorkiln_targets():
    return [CPU_LLVM]


@hookimpl
def tensorkiln_intrinsics(target):
    if target.name != CPU_LLVM.name:
        return []
    from .intrinsics import cpu_llvm_intrinsics
    return cpu_llvm_intrinsics(target)
