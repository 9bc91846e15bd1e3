"""plugin.py: hook implementations of the cpu_llvm plugin (entry point tensorkiln.plugins: cpu_llvm)."""
from tensorkiln.sdk import hookimpl

from .target import CPU_LLVM


def _ours(target) -> bool:
    return target.name == CPU_LLVM.name


@hookimpl
def tensorkiln_targets():
    return [CPU_LLVM]


@hookimpl
def tensorkiln_intrinsics(target):
    if not _ours(target):
        return []
    from .intrinsics import cpu_llvm_intrinsics
    return cpu_llvm_intrinsics(target)


@hookimpl
def tensorkiln_strategies(target):
    if not _ours(target):
        return []
    from .strategies import cpu_strategies
    return cpu_strategies(target)
