"""Schedule libraries a target plugin may opt into (none is applied unless a plugin registers it).

- `common`: helpers every schedule needs (lanes of a dtype, divisors, fusing for
  compute_at, injective and reduction stages at the root);
- `fused`: `schedule_fused(outputs, target, table, config)` walks a fused group and calls
  the plugin's schedule for its anchor tag (the table is the plugin's knowledge);
- `gpu`: a complete library for targets with thread axes (`gpu_strategies(target)`
  returns OpImplementations for every op; opencl registers it, and cuda can).
"""
from .common import (as_outputs, can_parallel, divisor_at_most, extent_of, fuse_all, fuse_for_attach,
                     inline_injective, power_of_two_lanes, reduces_outer_only, resolve_target, schedule_injective_stage,
                     schedule_reduce_stage, vector_lanes, vectorize_inner)
from .fused import INJECTIVE_KEY, REDUCE_KEY, find_anchor, output_of, schedule_fused

__all__ = ["as_outputs", "can_parallel", "divisor_at_most", "extent_of", "fuse_all", "fuse_for_attach",
           "inline_injective", "power_of_two_lanes", "reduces_outer_only", "resolve_target",
           "schedule_injective_stage", "schedule_reduce_stage",
           "vector_lanes", "vectorize_inner", "INJECTIVE_KEY", "REDUCE_KEY", "find_anchor", "output_of",
           "schedule_fused"]
