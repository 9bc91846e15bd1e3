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


SERIAL_TOPK_MAX_ELEMENTS = 4096
"""topk is a serial heap per row (core ops/sort.py, an extern stage) and the GPU library gives each
row a work-item of its own (sdk/schedules/gpu.py); past this many elements in a row the CPU is faster."""


def _topk_runs_well(call):
    shape = call.args[0].checked_type.shape
    row = int(shape[call.attrs.axis % len(shape)]) if shape else 1
    if row > SERIAL_TOPK_MAX_ELEMENTS:
        return f"serial_on_one_work_item:{row}_elements_per_row>{SERIAL_TOPK_MAX_ELEMENTS}"
    return True


@hookimpl
def tensorkiln_supported_ops(target):
    """Ops the manifest claims ("*") that this plugin sends elsewhere for a reason of their shape."""
    if not _ours(target):
        return {}
    return {"topk": _topk_runs_well, **c_source_op_limits()}
