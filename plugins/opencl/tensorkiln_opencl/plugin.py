"""Hook implementations of the opencl plugin (entry point tensorkiln.plugins: opencl)."""
from tensorkiln.sdk import hookimpl

from .target import OPENCL


@hookimpl
def tensorkiln_targets():
    return [OPENCL]


@hookimpl
def tensorkiln_intrinsics(target):
    if target.name != OPENCL.name:
        return []
    from .intrinsics import opencl_intrinsics
    return opencl_intrinsics(target)
