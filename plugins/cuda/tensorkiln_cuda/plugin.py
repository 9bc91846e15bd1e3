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


SERIAL_TOPK_MAX_ELEMENTS = 4096
"""topk is a serial heap per row (core ops/sort.py, an extern stage) and the GPU library gives each
row a thread of its own (tensorkiln.sdk.schedules.gpu); past this many elements in a row the CPU is faster."""


def _topk_runs_well(call):
    shape = call.args[0].checked_type.shape
    row = int(shape[call.attrs.axis % len(shape)]) if shape else 1
    if row > SERIAL_TOPK_MAX_ELEMENTS:
        return f"serial_on_one_thread:{row}_elements_per_row>{SERIAL_TOPK_MAX_ELEMENTS}"
    return True


@hookimpl
def tensorkiln_supported_ops(target):
    """Ops the manifest claims ("*") that this plugin sends elsewhere, with the reason."""
    if not _ours(target):
        return {}
    return {"topk": _topk_runs_well, **c_source_op_limits()}
