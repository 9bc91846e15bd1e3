"""Hook implementations of the cpu_llvm plugin (entry point tensorkiln.plugins: cpu_llvm)."""
from tensorkiln.sdk import hookimpl

from .target import CPU_LLVM


@hookimpl
def tensorkiln_targets():
    return [CPU_LLVM]
