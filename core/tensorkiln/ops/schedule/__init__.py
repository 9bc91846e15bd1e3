"""The core's one default schedule: naive and correct, with no hardware knowledge.

A target that declares no strategy for a group gets `naive_schedule`: injective
intermediates are inlined (so a fused group is one loop nest per reduction plus its
output), and every loop stays serial and scalar. Targets make it fast through their
`tensorkiln_strategies` hook (see tensorkiln.sdk.strategy), never by changes here.
"""
from .naive import naive_schedule

__all__ = ["naive_schedule"]
