"""compiler/strategy.py: which implementation, compute and knob values `tk.compile` gives each fused group.

The contract is exercised the way a vendor uses it: throw-away plugin modules registered on
the live plugin manager declare `tensorkiln_strategies` / `tensorkiln_schedule_rules` for
cpu_llvm, and `tk.compile` must pick them by key, condition and priority, use their compute
and knob values, report the choice in `lib.summary()["strategies"]`, and disable (warn about, then skip) a plugin
whose hook raises or returns something unusable. The core's naive default is checked on the tutorial plugin (sdk_docs/examples/
tk_plainc) without its schedule rule: a real target that declares no strategies. cpu_llvm's own implementations are
tested in plugins/cpu_llvm/tests/test_cpu_llvm_strategies.py, opencl's in plugins/opencl/tests.
"""
from __future__ import annotations

import importlib
import itertools
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, te
from tensorkiln.compiler.strategy import NAIVE, implementations_for, select
from tensorkiln.ir.errors import ScheduleError
from tensorkiln.sdk import RULE_PRIORITY, OpImplementation
from tensorkiln.sdk import plugin_manager
from tensorkiln.sdk.plugin_manager import registry, reload_plugins

REPO = Path(__file__).resolve().parents[2]
LLVM = tk.target("llvm")
RNG = np.random.default_rng(11)

COMMON = '''
from tensorkiln import te
from tensorkiln.ops import naive_schedule
from tensorkiln.sdk import Knob, OpImplementation, TuningSpace, hookimpl

CALLS = []


def split_schedule(outputs, target, config):
    """The naive schedule with each output's innermost axis split by the "split" knob."""
    CALLS.append(("schedule", dict(config)))
    s = naive_schedule(outputs)
    for out in outputs:
        s[out].split(s[out].op.axis[-1], factor=config.get("split", 1))
    return s


def split_space(workload, target):
    return TuningSpace((Knob("split", (1, 2, 4, 8), default=4),))


def even_rows(call, target):
    return True if int(call.checked_type.shape[-1]) % 2 == 0 else "acme needs an even last axis"


def scaled_dense(inputs, attrs, out_type, target, config):
    """dense times the "scale" knob: visible in the result, so a test can tell it was used."""
    CALLS.append(("compute", target.name, dict(config)))
    data, weight = inputs
    k = te.reduce_axis((0, int(data.shape[1])), name="k")
    product = te.compute(tuple(out_type.shape), lambda i, j: te.sum(data[i, k] * weight[j, k], axis=k),
                         name="T_acme_dense", tag="dense")
    return te.compute(product.shape, lambda i, j: product[i, j] * config["scale"], name="T_acme_scale",
                      tag="elemwise")


def scale_space(workload, target):
    return TuningSpace((Knob("scale", (2.0, 3.0), default=2.0),))


def record(name):
    def rule(outputs, target):
        CALLS.append(("rule", name, tuple(t.op.name for t in outputs)))
        return naive_schedule(outputs)
    return rule
'''

_NAMES = itertools.count()


@pytest.fixture
def install_plugin(tmp_path, monkeypatch):
    """install_plugin(hooks) -> module: a throw-away plugin registered on the live plugin manager.

    A fresh module name per call, so nothing a previous plugin declared can be reused by mistake."""
    monkeypatch.syspath_prepend(str(tmp_path))
    installed = []

    def install(hooks: str):
        name = f"tk_test_strategies_{next(_NAMES)}"
        (tmp_path / f"{name}.py").write_text(COMMON + textwrap.dedent(hooks))
        module = importlib.import_module(name)
        registry().hooks.register(module, name=name)
        installed.append(module)
        return module
    implementations_for(LLVM)  # what any earlier compile did: a plugin registered now must still be seen
    yield install
    names = {module.__name__ for module in installed}
    for module in installed:
        if registry().hooks.is_registered(module):   # a misbehaving one was unregistered when disabled
            registry().hooks.unregister(module)
        sys.modules.pop(module.__name__, None)
    registry().errors[:] = [e for e in registry().errors if e.plugin not in names]


def _only(lib) -> dict:
    (strategy,) = lib.summary()["strategies"].values()
    return strategy


def _relu_model(width: int = 16):
    return graph.nn.relu(graph.var("x", shape=(4, width)))


def _relu_input(width: int = 16):
    return RNG.uniform(-1, 1, size=(4, width)).astype("float32")


STRATEGIES_HOOK = '''
@hookimpl
def tensorkiln_strategies(target):
    if target.name != "cpu_llvm":
        return []
    return [{implementations}]
'''


def _strategies(implementations: str) -> str:
    return STRATEGIES_HOOK.format(implementations=implementations)


# ---- what the installed plugins declare ---------------------------------------------------------


def test_cpu_llvm_declares_its_implementations_through_the_hook():
    found = {impl.name: impl for impl in implementations_for(LLVM)}
    assert {"cpu_llvm.dense_ukernel", "cpu_llvm.dense_split", "cpu_llvm.conv2d_nhwc",
            "cpu_llvm.injective"} <= set(found)
    assert all(isinstance(impl, OpImplementation) for impl in found.values())
    assert {impl.plugin for impl in found.values()} == {"tensorkiln-cpu-llvm:cpu_llvm"}
    assert not [impl for impl in implementations_for(LLVM) if impl.name.startswith("opencl.")]


def test_summary_reports_every_field_of_the_choice():
    lib = tk.compile(_relu_model(), LLVM)
    strategy = _only(lib)
    assert set(strategy) == {"target", "ops", "strategy", "key", "config", "plugin", "space_size", "rejected",
                             "lowering_cache"}
    assert strategy["lowering_cache"] in ("hit", "miss")   # cpu_llvm names its host facts: cached
    assert (strategy["strategy"], strategy["key"], strategy["ops"]) == ("cpu_llvm.injective", "injective", ["nn.relu"])
    assert strategy["target"] == str(LLVM) and strategy["space_size"] == 1 and strategy["config"] == {}


# ---- a plugin's strategies ----------------------------------------------------------------------


def test_a_plugin_strategy_with_a_higher_priority_is_used_with_its_knob_defaults(install_plugin):
    plugin = install_plugin(_strategies(
        'OpImplementation("acme.relu", ("nn.relu", "injective"), split_schedule, space=split_space, priority=50)'))
    lib = tk.compile(_relu_model(), LLVM)
    strategy = _only(lib)
    assert (strategy["strategy"], strategy["plugin"]) == ("acme.relu", plugin.__name__)
    assert strategy["config"] == {"split": 4}
    assert strategy["space_size"] == 4
    assert ("schedule", {"split": 4}) in plugin.CALLS
    data = _relu_input()
    np.testing.assert_array_equal(lib(data), np.maximum(data, 0))


def test_a_plugin_registered_after_a_compile_is_used_by_the_next_one(install_plugin):
    assert _only(tk.compile(_relu_model(), LLVM))["strategy"] == "cpu_llvm.injective"
    install_plugin(_strategies(
        'OpImplementation("acme.relu", ("injective",), split_schedule, space=split_space, priority=50)'))
    assert _only(tk.compile(_relu_model(), LLVM))["strategy"] == "acme.relu"


def test_a_condition_that_returns_a_reason_rejects_the_implementation(install_plugin):
    install_plugin(_strategies('OpImplementation("acme.relu", ("nn.relu", "injective"), split_schedule, '
                               'space=split_space, condition=even_rows, priority=50)'))
    odd = tk.compile(_relu_model(15), LLVM)
    strategy = _only(odd)
    assert strategy["strategy"] == "cpu_llvm.injective"
    assert ["acme.relu", "acme needs an even last axis"] in strategy["rejected"]
    data = _relu_input(15)
    np.testing.assert_array_equal(odd(data), np.maximum(data, 0))
    assert _only(tk.compile(_relu_model(16), LLVM))["strategy"] == "acme.relu"


def test_a_compute_override_replaces_the_anchor_ops_compute(install_plugin):
    plugin = install_plugin(_strategies('OpImplementation("acme.dense", ("nn.dense",), split_schedule, '
                                        'compute=scaled_dense, space=scale_space, priority=50)'))
    x, w = RNG.uniform(-1, 1, size=(8, 16)).astype("float32"), RNG.uniform(-1, 1, size=(4, 16)).astype("float32")
    lib = tk.compile(graph.nn.relu(graph.nn.dense(graph.var("x", shape=(8, 16)), graph.const(w))), LLVM)
    strategy = _only(lib)
    assert (strategy["strategy"], strategy["key"], strategy["config"]) == ("acme.dense", "nn.dense", {"scale": 2.0})
    assert ("compute", "cpu_llvm", {"scale": 2.0}) in plugin.CALLS
    np.testing.assert_allclose(lib(x), np.maximum(2.0 * (x @ w.T), 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("order, chosen", [
    ('("acme.low", 30), ("acme.high", 60)', "acme.high"),
    ('("acme.high", 60), ("acme.low", 30)', "acme.high"),
    ('("acme.first", 30), ("acme.second", 30)', "acme.first"),     # a tie: the first declared
])
def test_the_highest_priority_wins_and_a_tie_keeps_the_first(install_plugin, order, chosen):
    install_plugin(f'''
    @hookimpl
    def tensorkiln_strategies(target):
        if target.name != "cpu_llvm":
            return []
        return [OpImplementation(name, ("injective",), split_schedule, priority=priority)
                for name, priority in ({order},)]
    ''')
    lib = tk.compile(_relu_model(), LLVM)
    assert _only(lib)["strategy"] == chosen
    data = _relu_input()
    np.testing.assert_array_equal(lib(data), np.maximum(data, 0))


@pytest.mark.parametrize("hook, returned", [("tensorkiln_strategies", "[]"), ("tensorkiln_schedule_rules", "{}")])
@pytest.mark.parametrize("failure, reason", [('raise RuntimeError("libacme.so not found")',
                                              "RuntimeError: libacme.so not found"),
                                             ('import sys; sys.exit(3)', "SystemExit: 3")])
def test_a_hook_that_raises_disables_its_plugin_and_cpu_llvm_still_compiles(install_plugin, hook, returned,
                                                                            failure, reason):
    # before: the compile for the built-in cpu_llvm failed with the plugin's error (or sys.exit ended it)
    plugin = install_plugin(f'''
    CALLED = []

    @hookimpl
    def {hook}(target):
        CALLED.append(target.name)
        {failure}
        return {returned}
    ''')
    with pytest.warns(plugin_manager.PluginWarning, match=rf"plugin '{plugin.__name__}' \(hook {hook}\): {reason}"):
        lib = tk.compile(_relu_model(), LLVM)
    data = _relu_input()
    np.testing.assert_array_equal(lib(data), np.maximum(data, 0))
    [error] = [e for e in registry().errors if e.plugin == plugin.__name__]
    assert (error.phase, error.reason) == (f"hook {hook}", reason) and "disabled" in error.fix
    assert not registry().hooks.is_registered(plugin)    # disabled for the process: never called again
    tk.compile(_relu_model(32), LLVM)
    assert plugin.CALLED == ["cpu_llvm"]


@pytest.mark.parametrize("hook, returned, what", [
    ("tensorkiln_strategies", '[{"nn.relu": split_schedule}]', "returned a dict, not an OpImplementation"),
    ("tensorkiln_schedule_rules", '["injective"]', "returned a list, not a dict of schedule rules")])
def test_a_hook_that_returns_something_else_disables_its_plugin(install_plugin, hook, returned, what):
    plugin = install_plugin(f'''
    @hookimpl
    def {hook}(target):
        return {returned}
    ''')
    with pytest.warns(plugin_manager.PluginWarning, match=rf"plugin '{plugin.__name__}' \(hook {hook}\): {what}"):
        lib = tk.compile(_relu_model(), LLVM)
    data = _relu_input()
    np.testing.assert_array_equal(lib(data), np.maximum(data, 0))
    assert not registry().hooks.is_registered(plugin)


# ---- knob values from a tuned record ------------------------------------------------------------


def _dense_group(rows=64, units=256, reduction=128):
    """(calls, outputs) of a one-dense group, the outputs built with the op's own compute."""
    call = graph.nn.dense(graph.var("x", shape=(rows, reduction)), graph.var("w", shape=(units, reduction)))
    x = te.placeholder((rows, reduction), "float32", name="x")
    w = te.placeholder((units, reduction), "float32", name="w")
    return [call], [call.op.compute([x, w], call.attrs, call.checked_type)]


def test_tuned_knob_values_replace_the_defaults():
    calls, outputs = _dense_group()
    default = select(calls, outputs, LLVM)
    assert default.name == "cpu_llvm.dense_ukernel" and default.config == default.space.default_config()
    other = next(value for value in default.space.knobs[0].candidates if value != default.config["mc"])
    tuned = select(calls, outputs, LLVM, configs=lambda implementation, space: {"mc": other})
    assert tuned.config == {**default.config, "mc": other}


def test_a_tuned_value_outside_the_space_names_the_implementation_and_knob():
    calls, outputs = _dense_group()
    with pytest.raises(ScheduleError, match=r"cpu_llvm.dense_ukernel: knob 'mc': 7 is not one of its candidates"):
        select(calls, outputs, LLVM, configs=lambda implementation, space: {"mc": 7})


# ---- schedule rules: schedule-only overrides ----------------------------------------------------


def _rules(table: str) -> str:
    return f'''
    @hookimpl
    def tensorkiln_schedule_rules(target):
        if target.name != "cpu_llvm":
            return {{}}
        return {table}
    '''


def test_a_rule_overrides_the_targets_strategy_for_its_key(install_plugin):
    plugin = install_plugin(_rules('{"injective": record("injective")}'))
    lib = tk.compile(_relu_model(), LLVM)
    strategy = _only(lib)
    assert (strategy["strategy"], strategy["plugin"]) == (f"{plugin.__name__}:rule:injective", plugin.__name__)
    assert [call[:2] for call in plugin.CALLS] == [("rule", "injective")]
    data = _relu_input()
    np.testing.assert_array_equal(lib(data), np.maximum(data, 0))


def test_a_rule_beats_a_compute_strategy_and_keeps_the_ops_own_compute(install_plugin):
    """RULE_PRIORITY (100) is above cpu_llvm's micro-kernel (20): the rule schedules the core's dense."""
    assert RULE_PRIORITY > max(impl.priority for impl in implementations_for(LLVM))
    plugin = install_plugin(_rules('{"nn.dense": record("nn.dense")}'))
    w = RNG.uniform(-1, 1, size=(32, 16)).astype("float32")
    lib = tk.compile(graph.nn.dense(graph.var("x", shape=(8, 16)), graph.var("w", shape=(32, 16))), LLVM)
    assert _only(lib)["strategy"] == f"{plugin.__name__}:rule:nn.dense"
    assert plugin.CALLS == [("rule", "nn.dense", ("T_dense",))]
    x = RNG.uniform(-1, 1, size=(8, 16)).astype("float32")
    np.testing.assert_allclose(lib(x=x, w=w), x @ w.T, rtol=1e-5, atol=1e-5)


def test_a_rule_keyed_by_an_elementwise_op_name_applies_to_its_group(install_plugin):
    plugin = install_plugin(_rules('{"exp": record("exp")}'))
    lib = tk.compile(graph.exp(graph.var("x", shape=(4, 16))), LLVM)
    assert _only(lib)["strategy"] == f"{plugin.__name__}:rule:exp"
    data = _relu_input()
    np.testing.assert_allclose(lib(data), np.exp(data), rtol=1e-6)
    assert _only(tk.compile(graph.tanh(graph.var("x", shape=(4, 16))), LLVM))["strategy"] == "cpu_llvm.injective"


# ---- the naive default: a real target without strategies ----------------------------------------


@pytest.fixture(scope="module")
def plainc(tmp_path_factory):
    """The tutorial plugin (sdk_docs/examples/tk_plainc) with only its targets hook (its schedule rule for
    elementwise groups removed), found through a .dist-info in a tmp folder."""
    root = tmp_path_factory.mktemp("plainc_plugin")
    shutil.copytree(REPO / "sdk_docs" / "examples" / "tk_plainc" / "tk_plainc", root / "tk_plainc")
    (root / "tk_plainc" / "plugin.py").write_text(
        "from tensorkiln.sdk import hookimpl\n\nfrom .target import TARGET\n\n\n"
        "@hookimpl\ndef tensorkiln_targets():\n    return [TARGET]\n")
    info = root / "tk_plainc-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tk-plainc\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tensorkiln.plugins]\nplainc = tk_plainc.plugin\n")
    files = [str(p.relative_to(root)) for p in (root / "tk_plainc").rglob("*") if p.is_file()]
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in [*files, f"{info.name}/METADATA",
                                                               f"{info.name}/entry_points.txt"]))
    sys.path.insert(0, str(root))
    previous = plugin_manager.registry()
    try:
        assert "plainc" in reload_plugins().names(), plugin_manager.registry().errors
        yield tk.target("plainc")
    finally:
        sys.path.remove(str(root))
        for name in [m for m in sys.modules if m == "tk_plainc" or m.startswith("tk_plainc.")]:
            sys.modules.pop(name)
        # Put the very same registry back: other tests hold its TargetSpecs and compare by identity.
        plugin_manager._registry = previous


def test_a_target_without_strategies_gets_the_core_naive_default(plainc):
    assert implementations_for(plainc) == []
    x = graph.var("x", shape=(4, 8))
    lib = tk.compile(graph.nn.relu(graph.add(x, x)), target=plainc, strict=True)
    strategy = _only(lib)
    assert (strategy["strategy"], strategy["plugin"], strategy["config"]) == (NAIVE, "tensorkiln", {})
    assert strategy["target"].startswith("plainc")
    data = RNG.uniform(-1, 1, size=(4, 8)).astype("float32")
    np.testing.assert_array_equal(lib(data), np.maximum(data + data, 0))


def test_a_fallback_group_gets_the_cpu_targets_strategy(plainc):
    """dense is not in plainc's manifest: it runs on cpu_llvm, with cpu_llvm's implementation."""
    w = RNG.uniform(-1, 1, size=(32, 16)).astype("float32")
    x = graph.var("x", shape=(8, 16))
    lib = tk.compile(graph.nn.relu(graph.add(graph.nn.dense(x, graph.const(w)), graph.const(1.0))), target=plainc)
    by_target = {entry["target"].split()[0]: entry["strategy"] for entry in lib.summary()["strategies"].values()}
    assert by_target["cpu_llvm"].startswith("cpu_llvm.") and by_target["plainc"] == NAIVE
    data = RNG.uniform(-1, 1, size=(8, 16)).astype("float32")
    np.testing.assert_allclose(lib(data), np.maximum(data @ w.T + 1.0, 0), rtol=1e-5, atol=1e-5)
