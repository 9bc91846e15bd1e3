"""The manifest level's strategy checks: what a plugin's `tensorkiln_strategies` and `tensorkiln_schedule_rules`
return for its own target is keyed by registered op names, anchor tags or "injective".

A throw-away hook module is registered on the live plugin manager under a name in cpu_llvm's
distribution, which is how the kit tells a target's own hooks from a vendor's additions.
"""
from __future__ import annotations

import types

import pytest

import tensorkiln as tk
from tensorkiln.conformance import catalogue, run_check
from tensorkiln.sdk import OpImplementation, hookimpl
from tensorkiln.sdk.plugin_manager import registry

CPU = tk.target("cpu_llvm")


def _schedule(outputs, target, config):
    return None


@pytest.fixture
def own_hooks():
    """own_hooks(strategies=[...], rules={...}): hooks counted as cpu_llvm's own for one test."""
    registered = []

    def register(strategies=(), rules=None):
        module = types.ModuleType(f"tk_test_own_hooks_{len(registered)}")
        module.tensorkiln_strategies = hookimpl(lambda target: list(strategies))
        module.tensorkiln_schedule_rules = hookimpl(lambda target: dict(rules or {}))
        registry().hooks.register(module, name=f"{CPU.spec.distribution}:{module.__name__}")
        registered.append(module)
    yield register
    for module in registered:
        registry().hooks.unregister(module)


def _run(check_id: str):
    (check,) = [c for c in catalogue(CPU, ("manifest",)) if c.id == check_id]
    return run_check(check, CPU)


def test_the_in_tree_strategies_pass():
    assert _run("manifest/strategies").outcome == "passed"
    assert _run("manifest/schedule_rules").outcome == "passed"


def test_an_unknown_key_is_reported_with_plugin_implementation_and_key(own_hooks):
    own_hooks(strategies=[OpImplementation("acme.relu", ("nn.rleu", "injective"), _schedule),
                          OpImplementation("acme.conv", ("conv2d_nhwc",), _schedule)])
    result = _run("manifest/strategies")
    assert (result.outcome, result.kind) == ("failed", "contract")
    assert "tensorkiln_strategies of 'tensorkiln-cpu-llvm': 'acme.relu' is keyed by 'nn.rleu'" in result.message
    assert "acme.conv" not in result.message


def test_something_other_than_an_implementation_is_reported(own_hooks):
    own_hooks(strategies=[{"nn.relu": _schedule}])
    result = _run("manifest/strategies")
    assert result.outcome == "failed" and "dict {'nn.relu'" in result.message
    assert "is not an OpImplementation" in result.message


def test_a_rule_with_an_unknown_key_is_reported(own_hooks):
    own_hooks(rules={"dense_nchw": lambda outputs, target: None})
    result = _run("manifest/schedule_rules")
    assert result.outcome == "failed"
    assert "tensorkiln_schedule_rules: 'dense_nchw' is neither a registered op nor an anchor tag" in result.message
