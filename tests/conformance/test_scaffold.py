"""`tensorkiln new-plugin` output installs with pip and passes the kit's manifest and runtime levels."""
from __future__ import annotations

import pytest

from tensorkiln.conformance.scaffold import scaffold_files, scaffold_plugin

from .dists import REPO, conformance_report, pip_install, run_cli


def test_scaffolded_plugin_installs_and_passes_manifest_and_runtime(tmp_path):
    source = scaffold_plugin("kiln_test_npu", tmp_path / "dist")
    site = tmp_path / "site"
    pip_install(source, site)
    listed = run_cli(["targets", "--json"], site)
    assert '"kiln_test_npu"' in listed.stdout
    code, report = conformance_report("kiln_test_npu", "manifest,runtime", site, tmp_path)
    assert code == 0, [c for c in report["checks"] if c["outcome"] == "failed"]
    assert report["summary"]["total"]["passed"] >= 20
    assert report["plugin"]["distribution"] == "tensorkiln-kiln-test-npu"


def test_new_plugin_command_writes_the_distribution(tmp_path):
    result = run_cli(["new-plugin", "my_npu", "--dir", str(tmp_path / "out")], tmp_path)
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "tensorkiln_my_npu" / "manifest.toml").is_file()
    assert "entry-points.\"tensorkiln.plugins\"" in (tmp_path / "out" / "pyproject.toml").read_text()


def test_new_plugin_refuses_a_bad_name():
    with pytest.raises(ValueError, match=r"'My-NPU' must be lower_snake_case"):
        scaffold_files("My-NPU")


def test_tutorial_example_is_the_scaffold_output():
    """sdk_docs/examples/tk_plainc is `scaffold_plugin("plainc", ..., package="tk_plainc")`, kept in sync."""
    example = REPO / "sdk_docs" / "examples" / "tk_plainc"
    for relative, text in scaffold_files("plainc", package="tk_plainc").items():
        assert (example / relative).read_text() == text, (
            f"{relative} differs from the scaffold; regenerate with scaffold_plugin('plainc', "
            "'sdk_docs/examples/tk_plainc', package='tk_plainc', overwrite=True)")
