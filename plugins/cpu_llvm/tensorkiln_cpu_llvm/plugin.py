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


@hookimpl
def tensorkiln_layout_preferences(target):
    """NHWC convolutions when the target's CPU has vector registers of 256 bits or more.

    The NHWC conv schedule (strategies/anchors.py) vectorizes over output channels, which
    are contiguous in NHWC, and keeps a register tile of output positions x channel
    vectors; with 128-bit or no vectors the tile is too small to pay for the layout
    transforms at the region's edges, and NCHW (vectorized over the output width) stays.
    """
    if not _ours(target):
        return []
    from tensorkiln.sdk import LayoutPreference

    from .host import cpu_facts
    if cpu_facts(target).vector_bits < 256:
        return []
    return [LayoutPreference(op="nn.conv2d", layout="NHWC", weight_layout="HWIO")]


@hookimpl
def tensorkiln_passes(target):
    """cpu_llvm's graph passes (passes.py): constant dense weights pre-transposed for the micro-kernel."""
    if not _ours(target):
        return []
    from .passes import PASSES
    return list(PASSES)
