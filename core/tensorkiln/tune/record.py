"""tune/record.py: what one measured candidate is, as plain data.

A `MeasureResult` is one trial of a task: the knob values, the schedule trace they
produced (JSON, replayable with `te.replay`), the kernel's features, and either a cost
(median seconds per call) or the reason it has none. Illegal candidates, failed
builds, wrong outputs and time-outs are results too (negative samples for the cost
model), never exceptions.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field

__all__ = ["MeasureResult", "OK", "INVALID", "BUILD_ERROR", "RUN_ERROR", "TIMEOUT", "WRONG_OUTPUT",
           "STOPPED_EARLY", "DUPLICATE", "SLOWER_ON_RECHECK", "UNCONFIRMED"]

OK = "ok"
INVALID = "invalid"              # the config is outside the space or a schedule primitive refused it
BUILD_ERROR = "build_error"      # lowering or the target's emitter failed
RUN_ERROR = "run_error"          # loading or running the kernel failed
TIMEOUT = "timeout"              # the run did not finish in time (its child process was ended)
WRONG_OUTPUT = "wrong_output"    # its output differs from the analytic default's
STOPPED_EARLY = "stopped_early"  # its first run was slower than 3x the best so far
DUPLICATE = "duplicate"          # the same binary as an earlier trial: its cost, not measured again
SLOWER_ON_RECHECK = "slower_on_recheck"   # not faster than the default when both were measured again
UNCONFIRMED = "unconfirmed"      # looked fastest but was not measured again beside the default


@dataclass
class MeasureResult:
    config: dict
    status: str = OK
    cost: float | None = None          # seconds per call, fastest sample (OK and DUPLICATE only)
    costs: tuple = ()                  # each repeat's mean seconds per call
    error: str = ""                    # why it has no cost
    digest: str = ""                   # hash of the compiled binary
    trace: str = ""                    # te trace JSON of its schedule
    features: dict = field(default_factory=dict)
    build_seconds: float = 0.0
    run_seconds: float = 0.0
    trial: int = -1                    # position in the task's tuning history
    record_id: int | None = None       # its row in the tuning database, when stored

    @property
    def valid(self) -> bool:
        return self.status in (OK, DUPLICATE) and self.cost is not None and math.isfinite(self.cost)

    @property
    def score(self) -> float:
        """The cost, infinite for a candidate without one (what tuners minimise)."""
        return self.cost if self.valid else math.inf

    def to_dict(self) -> dict:
        data = asdict(self)
        data["costs"] = list(self.costs)
        return data
