"""Hook implementations of the plainc plugin (entry point tensorkiln.plugins: plainc).

Only hooks live here; see tensorkiln.sdk.hookspecs (sdk_docs/hooks.md) for the others
(intrinsics, layout preferences, schedule rules, supported-op predicates, passes).
"""
from tensorkiln.sdk import hookimpl

from .target import TARGET


@hookimpl
def tensorkiln_targets():
    return [TARGET]
