"""conformance/levels/ops.py: every graph op the target claims, on a one-op graph, vs the numpy reference.

For each registered op the manifest claims (and the target's supported_ops
predicates accept), at each claimed dtype the op's case and type rule accept and
at `options.shapes_per_op` shape variants: compile with `tk.compile(strict=True)`
(no fallback), run, and compare with `graph.evaluate` using the op's registered
tolerance. An op without an entry in `op_cases.CASES` is reported as "no case";
a claimed dtype outside the kinds its case covers (int32 for a float-only case) is
reported as a skipped `ops/OP/DTYPE` check saying so, never dropped silently.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..catalogue import Check, CheckFailure, KitOptions, stage
from ..compare import assert_close, tolerance_for
from ..op_cases import OpInstance, case_for, kind_of

__all__ = ["checks", "build_one_op_module"]


def build_one_op_module(op_name: str, instance: OpInstance):
    """A graph Module calling `op_name` on one variable per input of `instance`."""
    from ... import graph
    from ...ir.dtypes import from_numpy

    variables = [graph.var(name, shape=array.shape, dtype=from_numpy(array.dtype)) for name, array in instance.inputs]
    return graph.Module.from_expr(graph.call(op_name, *variables, **instance.attrs))


def _predicates(target: Any) -> dict:
    from ...sdk.plugin_manager import registry

    merged: dict = {}
    for table in registry().call("tensorkiln_supported_ops", target):
        merged.update(table)
    return merged


def _run_check(op_name: str, dtype: str, variant: int, seed: int):
    def run(target: Any) -> None:
        import tensorkiln as tk
        from ...graph import evaluate, get_op

        op = get_op(op_name)
        instance = case_for(op_name).make(dtype, variant, np.random.default_rng(seed + variant))
        mod = build_one_op_module(op_name, instance)
        inputs = dict(instance.inputs)
        expected = evaluate(mod, inputs)
        with stage("compile"):
            lib = tk.compile(mod, target=target, strict=True)
        with stage("run"):
            outputs = lib.run(inputs)
        expected_list = expected if isinstance(expected, list) else [expected]
        out_dtype = str(np.asarray(expected_list[0]).dtype)
        rtol, atol = tolerance_for(op, dtype if dtype.startswith("float") else out_dtype)
        # Cancellation in low precision scales with the magnitude of the values involved.
        atol *= max([1.0, *(float(np.max(np.abs(a), initial=0)) for a in expected_list if a.dtype.kind == "f")])
        assert_close(outputs, expected_list, rtol, atol, what=f"{op_name} {dtype} {_describe(instance)}")
    return run


def _describe(instance: OpInstance) -> str:
    shapes = ", ".join(f"{name}{tuple(array.shape)}" for name, array in instance.inputs)
    attrs = ", ".join(f"{k}={v}" for k, v in instance.attrs.items())
    return f"({shapes}{'; ' + attrs if attrs else ''})"


def _applicability(op_name: str, dtype: str, variant: int, seed: int, predicates: dict,
                   declared: frozenset = frozenset()) -> str:
    """"" when the case applies, else why not (type rule, a dtype the target does not declare, predicate)."""
    from ...graph.types import TensorType, TupleType
    from ...ir.errors import TensorkilnError

    instance = case_for(op_name).make(dtype, variant, np.random.default_rng(seed + variant))
    try:
        mod = build_one_op_module(op_name, instance)
    except (TensorkilnError, TypeError, ValueError) as error:
        return f"the op's type rule rejects this case: {str(error).splitlines()[0]}"
    # a case that *chooses* its output dtype (bitcast's or cast's `dtype` attribute) is skipped when the
    # target does not declare that dtype; an op that always yields a dtype the target lacks (argmax's
    # int64) still fails: that is a wrong claim in the manifest
    chosen = instance.attrs.get("dtype")
    result = mod.main.ret_type
    outputs = result.fields if isinstance(result, TupleType) else (result,)
    produced = {t.dtype for t in outputs if isinstance(t, TensorType)}
    if declared and chosen in produced and chosen not in declared:
        return (f"the case asks for output dtype {chosen}, which is not among the dtypes the target declares "
                "(its manifest's dtypes)")
    predicate = predicates.get(op_name)
    if predicate is not None:
        verdict = predicate(mod.main.body)
        if verdict is not True:
            return f"declined by the target's supported_ops predicate: {verdict or 'rejected'}"
    return ""


def checks(target: Any, options: KitOptions) -> list[Check]:
    import tensorkiln.ops  # noqa: F401  (attaches te computes to the registry)
    from ...graph.ops.control_flow import is_control_flow
    from ...graph.registry import list_ops

    claimed_dtypes = [d for d in target.capabilities.dtypes if options.dtypes is None or d in options.dtypes]
    predicates = _predicates(target)
    variants = max(1, min(3, options.shapes_per_op))
    found: list[Check] = []
    for op in list_ops():
        if options.ops is not None and op.name not in options.ops:
            continue
        if is_control_flow(op):   # no kernel: the executor runs it around compiled bodies
            continue
        if not target.manifest.ops.claims(op.name):
            continue
        prefix = f"ops/{op.name}"
        case = case_for(op.name)
        if case is None:
            found.append(Check(prefix, "ops", True, f"{op.name} matches its reference",
                               skip_reason="no case: add an entry to tensorkiln/conformance/op_cases.py"))
            continue
        if op.compute is None:
            found.append(Check(prefix, "ops", True, f"{op.name} matches its reference",
                               skip_reason="the core has no te compute for this op (tensorkiln.ops)"))
            continue
        for dtype in claimed_dtypes:
            if kind_of(dtype) not in case.kinds:
                reason = (f"the kit's case for {op.name} covers {'/'.join(case.kinds)} dtypes only; {dtype} is "
                          "claimed but not checked (extend its entry in tensorkiln/conformance/op_cases.py if the op "
                          "accepts it)")
                found.append(Check(f"{prefix}/{dtype}", "ops", True, f"{op.name} at {dtype} matches its reference",
                                   skip_reason=reason, tags={"op": op.name, "dtype": dtype}))
                continue
            for variant in range(variants):
                check_id = f"{prefix}/{dtype}/{variant}"
                text = f"{op.name} at {dtype}, shape variant {variant}, matches the numpy reference"
                reason = _applicability(op.name, dtype, variant, options.seed, predicates,
                                        frozenset(target.capabilities.dtypes))
                if reason:
                    found.append(Check(check_id, "ops", True, text, skip_reason=reason, tags={"op": op.name}))
                else:
                    found.append(Check(check_id, "ops", True, text, _run_check(op.name, dtype, variant, options.seed),
                                       tags={"op": op.name, "dtype": dtype}))
    return found
