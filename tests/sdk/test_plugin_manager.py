"""Plugin discovery and every failure behaviour of loading (issue #2)."""
from __future__ import annotations

import importlib.metadata as metadata
import sys

import pytest

import tensorkiln
from tensorkiln.ir.errors import TargetError
from tensorkiln.sdk import PluginRegistry

from .fake_plugins import write_plugin

IN_TREE = {"cpu_llvm", "opencl", "cuda", "fpga_hls"}


@pytest.fixture
def plugin_dir(tmp_path, monkeypatch):
    """A folder on sys.path where tests drop fake plugin distributions."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in list(sys.modules):
        if name.startswith("tkfake_"):
            del sys.modules[name]


def test_in_tree_plugins_are_discovered_with_validated_manifests():
    reg = PluginRegistry()
    assert IN_TREE <= set(reg.names())
    assert reg.errors == []
    for name in IN_TREE:
        spec = reg.targets[name]
        assert spec.manifest.plugin.name == name
        assert len(spec.manifest_hash) == 64
        assert spec.distribution.startswith("tensorkiln-")


def test_fake_plugin_is_discovered_through_entry_points(plugin_dir):
    write_plugin(plugin_dir, "tkfake_good", "fake_npu", aliases=("npu",))
    reg = PluginRegistry()
    assert "fake_npu" in reg.names()
    assert reg.target("npu").name == "fake_npu"
    assert reg.spec("fake_npu").distribution == "tkfake-good"


def test_sdk_range_excluding_this_core_is_refused_before_import(plugin_dir):
    write_plugin(plugin_dir, "tkfake_old", "old_npu", sdk_api=">=0.1,<0.5",
                 extra="raise RuntimeError('vendor code must not run for an incompatible plugin')")
    reg = PluginRegistry()
    assert "old_npu" not in reg.names()
    [error] = [e for e in reg.errors if "old_npu" in e.plugin]
    assert error.phase == "sdk_api"
    message = str(error)
    assert ">=0.1,<0.5" in message and tensorkiln.__version__ in message and tensorkiln.SDK_API_VERSION in message
    assert "tkfake_old" not in sys.modules


def test_plugin_raising_at_import_is_reported_and_others_keep_working(plugin_dir):
    write_plugin(plugin_dir, "tkfake_broken", "broken_npu", extra="raise ImportError('libvendor.so not found')")
    write_plugin(plugin_dir, "tkfake_fine", "fine_npu")
    reg = PluginRegistry()
    assert "fine_npu" in reg.names() and IN_TREE <= set(reg.names())
    [error] = [e for e in reg.errors if "broken_npu" in e.plugin]
    assert error.phase == "import"
    assert "libvendor.so not found" in error.reason and "ImportError" in error.reason


def test_invalid_manifest_names_the_field(plugin_dir):
    bad = """
[plugin]
name = "bad_npu"
version = "0.1"
sdk_api = ">=1.0,<2"
device_kind = "toaster"
"""
    write_plugin(plugin_dir, "tkfake_badmanifest", "bad_npu", manifest=bad)
    reg = PluginRegistry()
    assert "bad_npu" not in reg.names()
    [error] = [e for e in reg.errors if "bad_npu" in e.plugin]
    assert error.phase == "manifest field plugin.device_kind"
    assert "cpu" in error.reason  # pydantic lists the accepted kinds


def test_manifest_with_inconsistent_capabilities_is_refused(plugin_dir):
    bad = """
[plugin]
name = "gpu_npu"
version = "0.1"
sdk_api = ">=1.0,<2"
device_kind = "gpu"
available = false
unavailable_reason = "test"

[capabilities]
thread_axes = ["threadIdx.x"]
"""
    write_plugin(plugin_dir, "tkfake_caps", "gpu_npu", manifest=bad)
    reg = PluginRegistry()
    [error] = [e for e in reg.errors if "gpu_npu" in e.plugin]
    assert "max_threads_per_block" in error.reason


def test_malformed_toml_is_reported(plugin_dir):
    write_plugin(plugin_dir, "tkfake_toml", "toml_npu", manifest="[plugin\nname = ")
    reg = PluginRegistry()
    [error] = [e for e in reg.errors if "toml_npu" in e.plugin]
    assert error.phase == "manifest" and "not valid TOML" in error.reason


def test_misspelled_hook_fails_at_load(plugin_dir):
    code = """
from tensorkiln.sdk import hookimpl

@hookimpl
def tensorkiln_target():
    return []
"""
    write_plugin(plugin_dir, "tkfake_typo", "typo_npu", plugin_code=code)
    reg = PluginRegistry()
    [error] = [e for e in reg.errors if "typo_npu" in e.plugin]
    assert error.phase == "hooks" and "tensorkiln_target" in error.reason


def test_available_manifest_without_emitter_is_refused(plugin_dir):
    manifest = """
[plugin]
name = "liar_npu"
version = "0.1"
sdk_api = ">=1.0,<2"
device_kind = "cpu"
"""
    write_plugin(plugin_dir, "tkfake_liar", "liar_npu", manifest=manifest)
    reg = PluginRegistry()
    [error] = [e for e in reg.errors if "liar_npu" in e.plugin]
    assert error.phase == "manifest field plugin.available"


def test_two_plugins_claiming_one_target_name_is_a_clear_error(plugin_dir):
    write_plugin(plugin_dir, "tkfake_clash_a", "clash_npu")
    write_plugin(plugin_dir, "tkfake_clash_b", "clash_npu")
    reg = PluginRegistry()
    assert "clash_npu" not in reg.names()
    [error] = [e for e in reg.errors if "clash_npu" in e.reason]
    assert "tkfake-clash-a" in str(error) and "tkfake-clash-b" in str(error)
    with pytest.raises(TargetError, match=r"'clash_npu' is ambiguous: claimed by tkfake-clash-a, tkfake-clash-b"):
        reg.target("clash_npu")


def test_plugin_claiming_an_in_tree_name_conflicts(plugin_dir):
    write_plugin(plugin_dir, "tkfake_impostor", "opencl")
    reg = PluginRegistry()
    with pytest.raises(TargetError, match="ambiguous"):
        reg.target("opencl")
    assert "cpu_llvm" in reg.names()  # the rest keeps working


def test_registry_accepts_explicit_entry_points(plugin_dir):
    write_plugin(plugin_dir, "tkfake_only", "only_npu")
    eps = [ep for ep in metadata.entry_points(group="tensorkiln.plugins") if ep.name == "only_npu"]
    reg = PluginRegistry(entry_points=eps)
    assert reg.names() == ["only_npu"]


# -- plugin isolation: vendor code never ends the process ------------------------------------

def test_plugin_calling_sys_exit_at_import_is_reported_and_others_keep_working(plugin_dir):
    # before: SystemExit is no Exception, so it went through the loader and ended the process
    write_plugin(plugin_dir, "tkfake_exits", "exiting_npu", extra="import sys; sys.exit('vendor runtime missing')")
    write_plugin(plugin_dir, "tkfake_fine", "fine_npu")
    reg = PluginRegistry()
    assert "fine_npu" in reg.names() and IN_TREE <= set(reg.names())
    [error] = [e for e in reg.errors if "exiting_npu" in e.plugin]
    assert error.phase == "import" and error.reason.endswith("raised SystemExit: vendor runtime missing")


def test_plugin_calling_sys_exit_in_tensorkiln_targets_is_reported(plugin_dir):
    write_plugin(plugin_dir, "tkfake_exits_late", "late_npu", plugin_code=(
        "import sys\nfrom tensorkiln.sdk import hookimpl\n\n@hookimpl\ndef tensorkiln_targets():\n    sys.exit(4)\n"))
    reg = PluginRegistry()
    [error] = [e for e in reg.errors if "late_npu" in e.plugin]
    assert (error.phase, error.reason) == ("targets", "tensorkiln_targets() raised SystemExit: 4")
    assert IN_TREE <= set(reg.names())


def test_a_hook_failing_after_load_disables_its_plugin_for_the_process(plugin_dir):
    from tensorkiln.sdk.plugin_manager import PluginWarning

    write_plugin(plugin_dir, "tkfake_flaky", "flaky_npu", extra=(
        "import sys\nCALLS = []\n\n@hookimpl\ndef tensorkiln_supported_ops(target):\n"
        "    CALLS.append(target.name)\n    sys.exit('no device')\n"))
    reg = PluginRegistry()
    assert "flaky_npu" in reg.names()
    opencl = reg.target("opencl")
    with pytest.warns(PluginWarning, match=r"plugin 'tkfake-flaky:flaky_npu' \(hook tensorkiln_supported_ops\): "
                                           r"SystemExit: no device"):
        tables = reg.call("tensorkiln_supported_ops", opencl)   # the other plugins' answers still come back
    assert len(tables) == 1 and tables[0]   # opencl's own table
    [error] = [e for e in reg.errors if e.plugin == "tkfake-flaky:flaky_npu"]
    assert error.phase == "hook tensorkiln_supported_ops" and "disabled" in error.fix
    with pytest.raises(TargetError, match=r"target 'flaky_npu' is unavailable: its plugin was disabled"):
        reg.spec("flaky_npu")
    reg.call("tensorkiln_supported_ops", opencl)
    assert sys.modules["tkfake_flaky.plugin"].CALLS == ["opencl"]   # never called again
    assert reg.target("cpu_llvm").name == "cpu_llvm"


def test_tensorkiln_targets_lists_a_plugin_that_exits_at_import(plugin_dir):
    import json
    import os
    import subprocess

    write_plugin(plugin_dir, "tkfake_exits", "exiting_npu", extra="import sys; sys.exit(2)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_dir), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "tensorkiln.cli", "targets", "--json"], capture_output=True,
                          text=True, env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert IN_TREE <= {row["target"] for row in report["targets"]}
    [error] = [e for e in report["errors"] if "exiting_npu" in e["plugin"]]
    assert error["phase"] == "import" and "SystemExit: 2" in error["reason"]
