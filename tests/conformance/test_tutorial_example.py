"""sdk_docs/tutorial.md's plugin (sdk_docs/examples/tk_plainc) installs with pip and passes the kit end to end."""
from __future__ import annotations

import shutil

from .dists import REPO, conformance_report, pip_install, run_python


def test_tutorial_plugin_passes_the_kit(tmp_path):
    source = tmp_path / "tk_plainc"
    shutil.copytree(REPO / "sdk_docs" / "examples" / "tk_plainc", source)  # pip builds in place; keep the docs clean
    site = tmp_path / "site"
    pip_install(source, site)
    code, report = conformance_report("plainc", "manifest,runtime,te,ops,models", site, tmp_path,
                                      "--shapes-per-op", "1")
    assert code == 0, [c for c in report["checks"] if c["outcome"] == "failed"]
    assert report["plugin"]["distribution"] == "tk-plainc"
    ran = run_python("import numpy as np, tensorkiln as tk\n"
                     "x = tk.graph.var('x', shape=(4,))\n"
                     "lib = tk.compile(tk.graph.nn.relu(tk.graph.add(x, x)), target='plainc', strict=True)\n"
                     "print(lib(np.array([-1, 0, 1, 2], 'float32')).tolist())\n"
                     "print(sorted({s['strategy'] for s in lib.summary()['strategies'].values()}))", site)
    assert ran.returncode == 0, ran.stderr
    result, strategies = ran.stdout.strip().splitlines()[-2:]
    assert result == "[0.0, 0.0, 2.0, 4.0]"
    assert strategies.endswith(":rule:injective']"), strategies   # the plugin's schedule rule was used
    shutil.rmtree(site)  # the uninstall: nothing outside tmp_path was touched
