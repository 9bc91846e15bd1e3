"""conformance/levels/models.py: small models end to end (MLP, residual CNN, attention) vs the reference.

Each model is compiled at the default opt level (fusion, memory reuse, layout
preferences) without strict mode: ops the target does not claim may fall back, as
users would run it. Each check reports the model's share of ops that ran on the
target (`lib.placement()`) as facts, and fails below `KitOptions.min_target_share`
(`--min-target-share`). A model with no op on the target at all fails.

`models/layout_preferences` compiles the residual CNN with the target's layout
preferences applied (manifest and hooks): a preference alter_layout cannot honour
fails naming the op and layout; an honoured one must reach the target's convs and
give the reference's results.
"""
from __future__ import annotations

from typing import Any

from ..catalogue import Check, CheckFailure, KitOptions, stage
from ..compare import assert_close
from ..models import MODELS, residual_cnn

__all__ = ["checks", "placement_facts"]

_RTOL = 1e-4


def _on_target(step_target: str, target: Any) -> bool:
    return step_target.split()[0] == target.name


def placement_facts(lib: Any, target: Any) -> dict:
    """{"ops", "ops_on_target", "target_share", "fallbacks": {op: "target (reason)"}} of a CompiledModel."""
    steps = lib.placement()
    total = sum(len(step["ops"]) for step in steps)
    on_target = sum(len(step["ops"]) for step in steps if _on_target(step["target"], target))
    fallbacks: dict[str, str] = {}
    for step in steps:
        if not _on_target(step["target"], target):
            for op in step["ops"]:
                where = step["target"].split()[0]
                fallbacks.setdefault(op, f"{where} ({step['fallback_reason'] or 'follows its group'})")
    return {"ops": total, "ops_on_target": on_target, "target_share": round(on_target / total, 4) if total else 0.0,
            "fallbacks": fallbacks}


def _share_text(name: str, facts: dict, target: Any) -> str:
    fell_back = ", ".join(f"{op} on {where}" for op, where in facts["fallbacks"].items()) or "none"
    return (f"{name}: {facts['ops_on_target']} of {facts['ops']} ops ({facts['target_share']:.0%}) ran on "
            f"{target.name}; fell back: {fell_back}")


def _check(name: str, seed: int, min_share: float):
    def run(target: Any) -> dict:
        import tensorkiln as tk
        from ...graph import evaluate

        mod, inputs = MODELS[name](seed)
        expected = evaluate(mod, inputs)
        with stage("compile"):
            lib = tk.compile(mod, target=target)
        facts = placement_facts(lib, target)
        try:
            if facts["ops_on_target"] == 0:
                raise CheckFailure("compile", f"no kernel of {name} was placed on {target.name}; placement: "
                                   f"{lib.placement()}")
            with stage("run"):
                outputs = lib.run(inputs)
            assert_close(outputs, expected if isinstance(expected, list) else [expected], _RTOL, _RTOL, what=name)
            if facts["target_share"] < min_share:
                raise CheckFailure("coverage", f"{_share_text(name, facts, target)}; below the required "
                                   f"minimum share {min_share:.0%} (--min-target-share {min_share:g})")
        except CheckFailure as failure:
            failure.facts = facts
            raise
        return facts
    return run


def _conv_layouts(lib: Any) -> list[str]:
    """Output layouts of the nn.conv2d calls of a CompiledModel's final graph (fused groups included): the
    data layout, or the out_layout of a first conv that reads NCHW data into a blocked layout."""
    from ...graph import Call, post_order
    from ...graph.registry import Op

    return [node.attrs.out_layout or node.attrs.data_layout
            for node in post_order(lib.graph.main.body, into_functions=True)
            if isinstance(node, Call) and isinstance(node.op, Op) and node.op.name == "nn.conv2d"]


def _layout_check(seed: int):
    def run(target: Any) -> dict:
        import tensorkiln as tk
        from ...graph import evaluate
        from ...passes import PassContext
        from ...graph import data_layout_block
        from ...passes.alter_layout import check_preference, layout_preferences

        preferences = layout_preferences(target)
        problems = [f"{op} {layout}: {reason}" for op, (layout, weight) in preferences.items()
                    if (reason := check_preference(op, layout, weight))]
        if problems:
            raise CheckFailure("contract", f"layout preferences of {target.name} the core cannot honour, ignored "
                               f"when compiling: {'; '.join(problems)}")
        layout, weight = preferences["nn.conv2d"]
        mod, inputs = residual_cnn(seed, channels=max(8, data_layout_block(layout)))   # NCHW16c: 16 channels
        expected = evaluate(mod, inputs)
        # The preference as a config entry: applied whatever alter_layout's cost guard would decide,
        # so the target's kernels in this layout are exercised on a model this small.
        context = PassContext(config={"alter_layout": {"nn.conv2d": (layout, weight)}})
        with stage("compile"):
            lib = tk.compile(mod, target=target, context=context)
        layouts = _conv_layouts(lib)
        if any(found != layout for found in layouts):
            raise CheckFailure("contract", f"nn.conv2d: {target.name} prefers {layout}, but the compiled residual "
                               f"CNN has convs in {sorted(set(layouts))}")
        conv_steps = [step for step in lib.placement() if "nn.conv2d" in step["ops"]]
        on_target = [step for step in conv_steps if _on_target(step["target"], target)]
        if not on_target:
            where = ", ".join(sorted({f"{s['target']} ({s['fallback_reason']})" for s in conv_steps}))
            raise CheckFailure("contract", f"nn.conv2d: {target.name} prefers {layout}, but no conv ran on it "
                               f"(placed on {where})")
        with stage("run"):
            outputs = lib.run(inputs)
        assert_close(outputs, [expected], _RTOL, _RTOL, what=f"residual_cnn with nn.conv2d in {layout}")
        return {"layout": layout, "weight_layout": weight or "", "convs": len(layouts),
                "conv_kernels_on_target": len(on_target)}
    return run


def checks(target: Any, options: KitOptions) -> list[Check]:
    from ...passes.alter_layout import layout_preferences

    if "float32" not in target.capabilities.dtypes:
        reason = "the target does not claim float32"
        return [Check(f"models/{name}", "models", True, f"{name} end to end matches the reference",
                      skip_reason=reason) for name in (*MODELS, "layout_preferences")]
    found = [Check(f"models/{name}", "models", True, f"{name} end to end matches the reference; share of ops on "
                   "the target", _check(name, options.seed, options.min_target_share)) for name in MODELS]
    text = "a conv model compiled with the target's layout preferences runs them on the target, correctly"
    try:
        preferences = layout_preferences(target)
    except Exception as error:  # a plugin's tensorkiln_layout_preferences hook: a finding, not a crash of the kit
        message = f"listing the layout preferences raised {type(error).__name__}: {error}"

        def failing(_target: Any) -> None:
            raise CheckFailure("contract", message)
        return [*found, Check("models/layout_preferences", "models", True, text, failing)]
    if not preferences:
        found.append(Check("models/layout_preferences", "models", True, text,
                           skip_reason="the target states no layout preference (manifest [[layouts]] or "
                                       "tensorkiln_layout_preferences)"))
    elif set(preferences) == {"nn.conv2d"} and preferences["nn.conv2d"][0] == "NCHW" \
            and preferences["nn.conv2d"][1] in (None, "OIHW"):
        found.append(Check("models/layout_preferences", "models", True, text,
                           skip_reason="the target prefers the graph's own layout (NCHW): nothing to convert"))
    else:
        found.append(Check("models/layout_preferences", "models", True, text, _layout_check(options.seed)))
    return found
