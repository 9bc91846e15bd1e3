"""PlaincEmitter: tir PrimFuncs -> C99, all inherited from tensorkiln.sdk.CSourceEmitter.

A C dialect overrides data, not traversal: `help(CSourceEmitter)` lists the override
points (types, qualifiers, thread indices, pragmas, math).
"""
from tensorkiln.sdk import CSourceEmitter


class PlaincEmitter(CSourceEmitter):
    target_name = "plainc"
    artifact_format = "c"
    parallel_pragma = None   # no OpenMP: the manifest claims max_threads = 1
