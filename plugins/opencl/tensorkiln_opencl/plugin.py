"""Hook implementations of the opencl plugin (entry point tensorkiln.plugins: opencl)."""
from tensorkiln.sdk import c_source_op_limits, hookimpl

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


@hookimpl
def tensorkiln_supported_ops(target):
    """Ops the manifest claims ("*") that this plugin sends elsewhere for a reason of their shape."""
    if not _ours(target):
        return {}
    from tensorkiln.sdk.schedules.gpu import gpu_op_limits
    return {**gpu_op_limits("work_item"), **c_source_op_limits()}
