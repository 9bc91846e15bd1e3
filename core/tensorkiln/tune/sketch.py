"""tune/sketch.py: the generated (Ansor-style) search space, from the schedule library.

The sketch itself is tensorkiln.sdk.schedules.generated (the compiler applies generated records
without the tuner); tune.Task(space="generated") searches it.
"""
from ..sdk.schedules.generated import (  # noqa: F401
    GENERATED, GENERATED_NAME, generated_space, schedule_generated, tile_candidates,
)

__all__ = ["GENERATED", "GENERATED_NAME", "generated_space", "schedule_generated", "tile_candidates"]
