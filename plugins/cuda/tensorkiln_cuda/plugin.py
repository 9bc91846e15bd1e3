"""Hook implementations of the cuda plugin (entry point tensorkiln.plugins: cuda)."""
from tensorkiln.sdk import hookimpl

from .target import CUDA


@hookimpl
def tensorkiln_targets():
    return [CUDA]
