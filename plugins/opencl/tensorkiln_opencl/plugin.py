"""Hook implementations of the opencl plugin (entry point tensorkiln.plugins: opencl)."""
from tensorkiln.sdk import hookimpl

from .target import OPENCL


def _ours(target) -> bool:
    return target.name == OPENCL.name


@hookimpl
def tensorkiln_targets():
    return [OPENCL]


@hookimpl
def tensorkiln_intrinsics(target):
    if not _ours(target):
        return []
    from .intrinsics import opencl_intrinsics
    return opencl_intrinsics(target)


@hookimpl
def tensorkiln_strategies(target):
    """The SDK's GPU schedule library (tensorkiln.sdk.schedules.gpu), with its knobs, for every op."""
    if not _ours(target):
        return []
    from tensorkiln.sdk.schedules.gpu import gpu_strategies
    return gpu_strategies(target, prefix="opencl")
