"""Hook implementations of the cuda plugin (entry point tensorkiln.plugins: cuda)."""
from tensorkiln.sdk import c_source_op_limits, hookimpl

from .target import CUDA


def _ours(target) -> bool:
    return target.name == CUDA.name


@hookimpl
def tensorkiln_targets():
    return [CUDA]


@hookimpl
def tensorkiln_strategies(target):
    """The SDK's GPU schedule library (tensorkiln.sdk.schedules.gpu), shared with opencl, plus the
    tensor-core (wmma) dense/matmul strategy for float16 operands."""
    if not _ours(target):
        return []
    from tensorkiln.sdk.schedules.gpu import gpu_strategies

    from .tensorcore import tensorcore_strategies
    return [*tensorcore_strategies(target), *gpu_strategies(target, prefix="cuda")]


@hookimpl
def tensorkiln_intrinsics(target):
    if not _ours(target):
        return []
    from .intrinsics import cuda_intrinsics
    return cuda_intrinsics(target)


@hookimpl
def tensorkiln_supported_ops(target):
    """Ops the manifest claims ("*") that this plugin sends elsewhere, with the reason."""
    if not _ours(target):
        return {}
    from tensorkiln.sdk.schedules.gpu import gpu_op_limits
    return {**gpu_op_limits("thread"), **c_source_op_limits()}
