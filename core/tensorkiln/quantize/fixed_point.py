"""quantize/fixed_point.py: a fixed-point format per kernel tensor, from calibrated ranges.

The plan lives in tensorkiln.passes.fixed_point_plan (the compiler runs it as the
assign_fixed_point pass, so it sits below the compiler); this module keeps its public names
where the precision tools are.
"""
from ..passes.fixed_point_plan import *  # noqa: F401,F403
from ..passes.fixed_point_plan import __all__, fixed_point_reference, group_formats, integer_bits  # noqa: F401
