"""sdk_docs/tutorial.md's plugin (sdk_docs/examples/tk_plainc) installs with pip and passes the kit end to end;
the worked intrinsic of sdk_docs/intrinsics.md runs on it."""
from __future__ import annotations

import re
import shutil

import pytest

from .dists import REPO, conformance_report, pip_install, run_python
from .native_smoke import check_main_kernel_and_graph


@pytest.fixture(scope="module")
def plainc_site(tmp_path_factory):
    """A site folder holding the installed tutorial plugin; "uninstalling" is deleting it."""
    root = tmp_path_factory.mktemp("plainc")
    source = root / "tk_plainc"
    shutil.copytree(REPO / "sdk_docs" / "examples" / "tk_plainc", source)  # pip builds in place; keep the docs clean
    site = root / "site"
    pip_install(source, site)
    yield site
    shutil.rmtree(site)  # nothing outside the temporary folder was touched


def test_tutorial_plugin_passes_the_kit(plainc_site, tmp_path):
    code, report = conformance_report("plainc", "manifest,runtime,te,ops,models", plainc_site, tmp_path,
                                      "--shapes-per-op", "1")
    assert code == 0, [c for c in report["checks"] if c["outcome"] == "failed"]
    assert report["plugin"]["distribution"] == "tk-plainc"
    ran = run_python("import numpy as np, tensorkiln as tk\n"
                     "x = tk.graph.var('x', shape=(4,))\n"
                     "lib = tk.compile(tk.graph.nn.relu(tk.graph.add(x, x)), target='plainc', strict=True)\n"
                     "print(lib(np.array([-1, 0, 1, 2], 'float32')).tolist())\n"
                     "print(sorted({s['strategy'] for s in lib.summary()['strategies'].values()}))", plainc_site)
    assert ran.returncode == 0, ran.stderr
    result, strategies = ran.stdout.strip().splitlines()[-2:]
    assert result == "[0.0, 0.0, 2.0, 4.0]"
    assert strategies.endswith(":rule:injective']"), strategies   # the plugin's schedule rule was used


def test_tutorial_plugin_runs_a_kernel_named_main_and_leaves_no_temp_folder(plainc_site, tmp_path):
    check_main_kernel_and_graph("plainc", plainc_site, tmp_path / "scratch")


def test_the_intrinsics_page_example_runs_on_the_tutorial_plugin(plainc_site):
    """Every python block of sdk_docs/intrinsics.md, run in order; the page's example checks itself with numpy."""
    page = (REPO / "sdk_docs" / "intrinsics.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.S)
    assert len(blocks) >= 2, "sdk_docs/intrinsics.md lost its worked example"
    ran = run_python("\n".join(blocks) + "\nprint('example ok')\n", plainc_site)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert ran.stdout.strip().splitlines()[-1] == "example ok"
