"""A vendor ships a plugin without touching this repository: pip install, discover, list, remove."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "tkvendor-npu"
version = "0.2.0"
dependencies = ["tensorkiln>=0.1"]

[project.entry-points."tensorkiln.plugins"]
vendor_npu = "tkvendor_npu.plugin"

[tool.setuptools]
packages = ["tkvendor_npu"]

[tool.setuptools.package-data]
tkvendor_npu = ["manifest.toml"]
"""

MANIFEST = """\
[plugin]
name = "vendor_npu"
aliases = ["npu"]
version = "0.2.0"
sdk_api = ">=1.0,<2"
device_kind = "accelerator"
available = false
unavailable_reason = "demo plugin: declarations only"

[capabilities]
dtypes = ["int8", "float32"]
vector_width_bits = 1024
"""

PLUGIN = """\
from tensorkiln.sdk import TargetSpec, hookimpl, load_manifest

NPU = TargetSpec(manifest=load_manifest(__file__))


@hookimpl
def tensorkiln_targets():
    return [NPU]
"""


def _pip(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args],
                   check=True, capture_output=True, text=True)


def _listed_targets() -> dict:
    out = subprocess.run([sys.executable, "-m", "tensorkiln.cli", "targets", "--json"],
                         check=True, capture_output=True, text=True).stdout
    return {row["target"]: row for row in json.loads(out)["targets"]}


@pytest.fixture
def vendor_project(tmp_path):
    package = tmp_path / "tkvendor_npu"
    package.mkdir()
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (package / "__init__.py").write_text("")
    (package / "manifest.toml").write_text(MANIFEST)
    (package / "plugin.py").write_text(PLUGIN)
    yield tmp_path
    subprocess.run([sys.executable, "-m", "pip", "uninstall", "-y", "-q", "tkvendor-npu"], capture_output=True)


def test_pip_installed_plugin_is_discovered_listed_and_removed(vendor_project):
    assert "vendor_npu" not in _listed_targets()
    # --no-deps: tensorkiln is already installed; --no-build-isolation: no network needed for setuptools
    _pip("install", "--no-deps", "--no-build-isolation", str(vendor_project))
    listed = _listed_targets()
    assert listed["vendor_npu"]["distribution"] == "tkvendor-npu"
    assert listed["vendor_npu"]["aliases"] == ["npu"]
    assert listed["vendor_npu"]["capabilities"]["vector_width_bits"] == 1024
    assert "cpu_llvm" in listed  # in-tree plugins are unaffected
    _pip("uninstall", "-y", "tkvendor-npu")
    assert "vendor_npu" not in _listed_targets()
