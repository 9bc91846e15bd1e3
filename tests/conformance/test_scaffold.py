"""`tensorkiln new-plugin` output installs with pip and passes the kit's manifest and runtime levels."""
from __future__ import annotations

from pathlib import Path

import pytest

from tensorkiln.conformance.scaffold import scaffold_files, scaffold_plugin

from .dists import REPO, conformance_report, pip_install, run_cli
from .native_smoke import check_main_kernel_and_graph


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
    # a kernel named `main` (C calls it main_1) and a graph run; loading leaves no temp folder
    check_main_kernel_and_graph("kiln_test_npu", site, tmp_path / "scratch")


def test_the_scaffold_loader_is_a_few_lines_on_the_sdk():
    runtime = scaffold_files("acme_c")["tensorkiln_acme_c/runtime.py"]
    assert "typedef struct" not in runtime and "mkdtemp" not in runtime
    assert "build_native_module" in runtime


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


def test_new_plugin_help_names_the_default_folder_scaffold_plugin_writes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    written = scaffold_plugin("my_npu")
    assert written == Path("tensorkiln-my-npu") and written.is_dir()
    shown = run_cli(["new-plugin", "--help"], tmp_path)
    assert "./tensorkiln-my-npu" in " ".join(shown.stdout.split()), shown.stdout
