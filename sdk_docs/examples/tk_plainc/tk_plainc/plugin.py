"""Hook implementations of the plainc plugin (entry point tensorkiln.plugins: plainc).

Only hooks live here; see tensorkiln.sdk.hookspecs (sdk_docs/hooks.md) for the others
(intrinsics, layout preferences, schedule rules, supported-op predicates, passes).
"""
from tensorkiln.sdk import hookimpl

from .target import TARGET


@hookimpl
def tensorkiln_targets():
    return [TARGET]


def _unrolled_injective(outputs, target):
    """Elementwise groups: the innermost axis split by 4 and unrolled (the C compiler then keeps four
    independent operations in flight), other injective stages inlined."""
    from tensorkiln import te
    from tensorkiln.sdk.schedules import divisor_at_most, inline_injective

    s = te.create_schedule([t.op for t in outputs])
    inline_injective(s)
    for out in outputs:
        axis = s[out].op.axis[-1] if s[out].op.axis else None
        if axis is not None and divisor_at_most(int(out.shape[-1]), 4) == 4:
            _, inner = s[out].split(axis, factor=4)
            s[out].unroll(inner)
    return s


@hookimpl
def tensorkiln_schedule_rules(target):
    """A schedule rule overrides one group kind's schedule (here: groups of elementwise ops);
    every other group keeps the core's naive default. Use tensorkiln_strategies for knobs."""
    if target.name != TARGET.name:
        return {}
    return {"injective": _unrolled_injective}
