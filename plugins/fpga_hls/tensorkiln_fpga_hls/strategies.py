"""strategies.py: how fpga_hls schedules fused groups: pipelined loop nests with declared knobs.

Every group starts from the core's naive schedule (injective stages inlined, so an
epilogue is computed in the anchor's loop body, as an HLS design would chain it) and then:
- the innermost loop of each root stage is pipelined with II = `reuse_factor` (hls4ml's
  name: how many cycles one multiplier is reused; 1 = fully parallel);
- a reduction loop is split by `unroll` and the inner part unrolled (that many
  multipliers side by side), the outer part pipelined with an II of at least `unroll`,
  since its operands arrive through one m_axi port each.
Both are tuning knobs, so the tuner can search them with the estimator (estimate.py) as
the cost; the defaults are the smallest design that pipelines at all.
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.ops import naive_schedule, tags
from tensorkiln.sdk import INJECTIVE, Knob, OpImplementation, TuningSpace

__all__ = ["fpga_strategies", "schedule_pipelined"]

REUSE_FACTORS = (1, 2, 4, 8)
UNROLL_FACTORS = (1, 2, 4, 8)


def _space(workload, target) -> TuningSpace:
    return TuningSpace((Knob("reuse_factor", REUSE_FACTORS, default=1), Knob("unroll", UNROLL_FACTORS, default=1)))


def _extent(iv) -> int | None:
    extent = getattr(iv.dom, "extent", None) if iv.dom is not None else None
    return getattr(extent, "value", extent) if isinstance(getattr(extent, "value", extent), int) else None


def schedule_pipelined(outputs, target, config) -> te.Schedule:
    """The naive schedule with the innermost loop of each root stage pipelined (see module docstring)."""
    s = naive_schedule(outputs, target)
    ii, unroll = int(config.get("reuse_factor", 1)), int(config.get("unroll", 1))
    for stage in s.stages:
        if stage.attach_type != "root" or not stage.leaf_iter_vars:
            continue
        innermost = stage.leaf_iter_vars[-1]
        extent = _extent(innermost)
        if innermost.kind == "reduce" and unroll > 1 and extent and extent % unroll == 0 and extent > unroll:
            outer, inner = stage.split(innermost, factor=unroll)
            stage.unroll(inner)
            innermost = outer
            ii = max(ii, unroll)   # each m_axi operand is read `unroll` times per iteration through one port
        stage.pipeline(innermost, ii)
    return s


def fpga_strategies(target) -> list[OpImplementation]:
    """The implementations of the fpga_hls target (called by its tensorkiln_strategies hook)."""
    return [OpImplementation("fpga_hls.pipelined", (*tags.ANCHOR_TAGS, INJECTIVE), schedule_pipelined,
                             space=_space, priority=1)]
