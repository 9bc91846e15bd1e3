"""Hook implementations of the opencl plugin (entry point tensorkiln.plugins: opencl)."""
from tensorkiln.sdk import hookimpl

from .target import OPENCL


@hookimpl
def tensorkiln_targets():
    return [OPENCL]
