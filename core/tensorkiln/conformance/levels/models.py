"""conformance/levels/models.py: small models end to end (MLP, residual CNN, attention) vs the reference.

Each model is compiled at the default opt level (fusion, memory reuse) without
strict mode: ops the target does not claim may fall back, as users would run it.
A model with no op on the target at all is skipped.
"""
from __future__ import annotations

from typing import Any

from ..catalogue import Check, CheckFailure, KitOptions, stage
from ..compare import assert_close
from ..models import MODELS

__all__ = ["checks"]

_RTOL = 1e-4


def _check(name: str, seed: int):
    def run(target: Any) -> None:
        import tensorkiln as tk
        from ...graph import evaluate

        mod, inputs = MODELS[name](seed)
        expected = evaluate(mod, inputs)
        with stage("compile"):
            lib = tk.compile(mod, target=target)
        if not any(step.target.split()[0] == target.name for step in lib.plan.steps):
            raise CheckFailure("compile", f"no kernel of {name} was placed on {target.name}; placement: "
                               f"{lib.placement()}")
        with stage("run"):
            outputs = lib.run(inputs)
        assert_close(outputs, expected if isinstance(expected, list) else [expected], _RTOL, _RTOL, what=name)
    return run


def checks(target: Any, options: KitOptions) -> list[Check]:
    if "float32" not in target.capabilities.dtypes:
        return [Check(f"models/{name}", "models", True, f"{name} end to end matches the reference",
                      skip_reason="the target does not claim float32") for name in MODELS]
    return [Check(f"models/{name}", "models", True, f"{name} end to end matches the reference", _check(name, options.seed))
            for name in MODELS]
