"""conformance/levels/intrinsics.py: every registered intrinsic, tensorized, against its own te description.

For each intrinsic `tensorkiln.intrinsics(target)` returns, the kit builds a
*matching compute*: the description's body over a larger iteration space (each
data axis several tiles long, symbolic extents bound to concrete values), with new
placeholders sized from the description's index expressions. It splits every
axis by the tile, tensorizes the inner tile, builds the kernel for the target and
compares with the same compute evaluated in numpy (lowered without tensorize and
run by `tensorkiln.tir.interpret`).

Every shape variant, the first included (`--shapes-per-op 1`), exercises the
calling convention in full: data axes span several tiles, so row strides differ
from the tile's width, and the reduction (symbolic K or not) spans several tiles,
so the intrinsic is called with accumulate=0 for the first and accumulate=1 for
the others. The output starts filled with random values, so a kernel that always
accumulates fails as surely as one that never does.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..catalogue import Check, CheckFailure, KitOptions, stage
from ..compare import assert_close

__all__ = ["checks", "matching_compute"]

_SYMBOLIC_VALUES = (4, 7, 16)
# Tiles along each data axis, per shape variant: never one along the first two axes, so a 2-D
# output's row stride is always a multiple (>1) of the tile's width.
_REPS = ((2, 3, 2, 2), (3, 2, 1, 3), (2, 4, 3, 1))
# Tiles along each reduce axis, per shape variant: the reduction is always split.
_REDUCE_REPS = (2, 3, 2)


def _int_value(extent: Any, bindings: dict) -> int:
    from ...tir import nodes as n
    from ...tir.arith import as_int, simplify_expr
    from ...tir.visit import substitute

    if isinstance(extent, int):
        return extent
    value = as_int(simplify_expr(substitute(extent, {v: n.IntImm("int32", b) for v, b in bindings.items()})))
    if value is None:
        raise CheckFailure("compile", f"cannot evaluate the description extent {extent} with {bindings}")
    return value


def matching_compute(intrin: Any, variant: int) -> dict:
    """A compute matching `intrin`'s description at shape `variant`; returns its parts (see module docstring)."""
    from ... import te
    from ...te.expr import Reduce, TensorRead
    from ...tir import nodes as n
    from ...tir.arith import const_bounds
    from ...tir.visit import rewrite

    desc = intrin.op
    bindings = {v: _SYMBOLIC_VALUES[(variant + i) % 3] + i for i, v in enumerate(intrin.extent_vars)}
    reps = _REPS[variant % len(_REPS)]
    data_tiles = [_int_value(a.dom.extent, bindings) for a in desc.axis]
    reduce_tiles = [_int_value(r.dom.extent, bindings) for r in desc.reduce_axis]
    data_extents = [t * reps[d % len(reps)] for d, t in enumerate(data_tiles)]
    reduce_extents = [t * _REDUCE_REPS[variant % len(_REDUCE_REPS)] for t in reduce_tiles]
    new_reduce = [te.reduce_axis((0, e), name=f"r{i}") for i, e in enumerate(reduce_extents)]
    placeholders: dict[int, Any] = {}
    state: dict[str, Any] = {}

    def body(*axis_vars):
        mapping = {a.var: v for a, v in zip(desc.axis, axis_vars)}
        mapping.update({r.var: nr.var for r, nr in zip(desc.reduce_axis, new_reduce)})
        mapping.update({v: n.IntImm("int32", b) for v, b in bindings.items()})
        bounds = {v: (0, e - 1) for v, e in zip(axis_vars, data_extents)}
        bounds.update({nr.var: (0, e - 1) for nr, e in zip(new_reduce, reduce_extents)})
        reads: dict[int, list] = {}

        def visit_indices(expr):
            def pre(x):
                if isinstance(x, n.Var):
                    return mapping.get(x)
                if isinstance(x, TensorRead):
                    indices = tuple(rewrite(i, pre=pre) for i in x.indices)
                    reads.setdefault(id(x.tensor), []).append((x.tensor, indices))
                    return TensorRead(x.tensor, indices)
                return None
            return rewrite(expr, pre=pre)

        source = desc.body.source if isinstance(desc.body, Reduce) else desc.body
        substituted = visit_indices(source)
        for key, found in reads.items():
            tensor = found[0][0]
            shape = []
            for dim in range(len(tensor.shape)):
                highs = [const_bounds(indices[dim], bounds) for _, indices in found]
                if any(h is None for h in highs):
                    raise CheckFailure("compile", f"cannot bound the index of {tensor.name} dimension {dim}")
                shape.append(max(h[1] for h in highs) + 1)
            placeholders[key] = te.placeholder(tuple(shape), tensor.dtype, name=f"{tensor.name}_big")

        def replace(x):
            if isinstance(x, TensorRead) and id(x.tensor) in placeholders:
                return TensorRead(placeholders[id(x.tensor)], x.indices)
            return None
        substituted = rewrite(substituted, pre=replace)
        if isinstance(desc.body, Reduce):
            condition = None if desc.body.condition is None else visit_indices(desc.body.condition)
            return desc.body.combiner(substituted, axis=new_reduce, where=condition)
        return substituted

    output = te.compute(tuple(data_extents), body, name=f"{intrin.name}_match")
    state.update(
        output=output, inputs=[placeholders[id(t)] for t in intrin.inputs if id(t) in placeholders],
        data_tiles=data_tiles, reduce_tiles=reduce_tiles, bindings={v.name: b for v, b in bindings.items()})
    return state


def _tensorized_schedule(parts: dict, intrin: Any):
    from ... import te

    output = parts["output"]
    s = te.create_schedule(output.op)
    outers, inners = [], []
    for axis, tile in zip(output.op.axis, parts["data_tiles"]):
        outer, inner = s[output].split(axis, factor=tile)
        outers.append(outer)
        inners.append(inner)
    reduce_outers, reduce_inners = [], []
    for axis, tile in zip(output.op.reduce_axis, parts["reduce_tiles"]):
        outer, inner = s[output].split(axis, factor=tile)
        reduce_outers.append(outer)
        reduce_inners.append(inner)
    s[output].reorder(*outers, *reduce_outers, *inners, *reduce_inners)
    s[output].tensorize(inners[0], intrin)
    return s


def _expected(parts: dict, arrays: list[np.ndarray]) -> np.ndarray:
    from ... import te, tir

    output = parts["output"]
    func = te.lower(te.create_schedule(output.op), [*parts["inputs"], output], name="reference")
    out = np.zeros(tuple(output.shape), _np(output.dtype))
    tir.interpret(func, *arrays, out)
    return out


def _np(dtype: str):
    from ...ir.dtypes import to_numpy
    return to_numpy(dtype)


def _layout_text(parts: dict) -> str:
    """How the matching compute exercises the calling convention, for failure messages."""
    output = parts["output"]
    tiles = [int(e) // t for e, t in zip(output.shape, parts["data_tiles"])]
    text = f"{'x'.join(map(str, tiles))} output tiles of {'x'.join(map(str, parts['data_tiles']))}"
    reduce = [int(r.dom.extent) // t for r, t in zip(output.op.reduce_axis, parts["reduce_tiles"])]
    if reduce:
        text += f", reduction in {'x'.join(map(str, reduce))} tiles (calls with accumulate=1)"
    return text


def _check(intrin_name: str, variant: int, seed: int):
    def run(target: Any) -> None:
        import tensorkiln as tk
        from .runtime import random_array

        intrin = tk.intrinsic(intrin_name, target)
        with stage("compile"):
            parts = matching_compute(intrin, variant)
            s = _tensorized_schedule(parts, intrin)
            module = tk.build(s, [*parts["inputs"], parts["output"]], target=target, name=f"tensorize_{variant}")
        rng = np.random.default_rng(seed + variant)
        arrays = [random_array(tuple(t.shape), t.dtype, rng) for t in parts["inputs"]]
        expected = _expected(parts, arrays)
        # Not zeros: a kernel that adds into the output even when accumulate=0 must show.
        out = random_array(expected.shape, parts["output"].dtype, rng).astype(expected.dtype)
        implementation = intrin.implementations.get(target.name)
        symbol = getattr(implementation, "symbol", None)
        source = module.artifact.source or ""
        if symbol and source and symbol not in source and intrin.name not in source:
            raise CheckFailure("compile", f"the kernel does not call {intrin_name} ({symbol}); tensorize was lost")
        with stage("run"):
            module(*arrays, out)
        reduce_size = int(np.prod([r.dom.extent for r in parts["output"].op.reduce_axis] or [1]))
        rtol = 1e-5 * max(1, reduce_size) ** 0.5 * 10
        assert_close(out, expected, rtol, rtol, what=f"{intrin_name} tensorized at {tuple(parts['output'].shape)} "
                     f"(extents {parts['bindings']}; {_layout_text(parts)})")
    return run


def checks(target: Any, options: KitOptions) -> list[Check]:
    import tensorkiln as tk

    if "tensorize" not in target.capabilities.schedule_primitives:
        return [Check("intrinsics/*", "intrinsics", True, "registered intrinsics match their te descriptions",
                      skip_reason="the target does not claim 'tensorize'")]
    try:
        registered = tk.intrinsics(target)
    except Exception as error:  # a broken hook is a finding of this level
        message = f"tensorkiln.intrinsics({target.name!r}) raised {type(error).__name__}: {error}"

        def failing(_target: Any) -> None:
            raise CheckFailure("contract", message)
        return [Check("intrinsics/registry", "intrinsics", True, "intrinsics can be listed", failing)]
    if not registered:
        return [Check("intrinsics/*", "intrinsics", True, "registered intrinsics match their te descriptions",
                      skip_reason="no intrinsic is registered for the target")]
    found = []
    variants = max(1, min(3, options.shapes_per_op))
    for intrin in sorted(registered, key=lambda i: i.name):
        for variant in range(variants):
            found.append(Check(f"intrinsics/{intrin.name}/{variant}", "intrinsics", True,
                               f"{intrin.name} tensorized at shape variant {variant} matches its te description",
                               _check(intrin.name, variant, options.seed)))
    return found
