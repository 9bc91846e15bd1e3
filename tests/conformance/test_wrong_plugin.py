"""The kit can fail: a deliberately wrong plugin gets exactly its two defects reported.

Defects, built on the scaffold: (1) its emitter turns float additions of the graph
op `add` into subtractions, (2) its manifest claims `nn.softmax`, but its C dialect
has no `exp`, so that op cannot compile. Everything else must pass.
"""
from __future__ import annotations

import json

from tensorkiln.conformance.scaffold import scaffold_plugin

from .dists import conformance_report, pip_install

_BROKEN_EMITTER = '''
"""A deliberately wrong emitter for the conformance kit's own tests."""
import dataclasses

from tensorkiln.sdk import CSourceEmitter
from tensorkiln.tir import nodes as tir
from tensorkiln.tir.visit import rewrite


def _subtracting(func):
    def post(node):
        if isinstance(node, tir.Add) and node.dtype.startswith("float"):
            return tir.Sub(node.a, node.b)
        return None
    return dataclasses.replace(func, body=rewrite(func.body, post=post))


class KilnWrongEmitter(CSourceEmitter):
    target_name = "kiln_wrong"
    artifact_format = "c"
    parallel_pragma = None
    # defect 2: this dialect has no exp(), yet the manifest claims nn.softmax
    math_functions = {k: v for k, v in CSourceEmitter.math_functions.items() if k != "exp"}

    def emit(self, funcs, target=None):
        # defect 1: the graph op `add` subtracts
        funcs = [_subtracting(f) if f.name.startswith("fused_add") else f for f in funcs]
        return super().emit(funcs, target)
'''


def test_wrong_plugin_reports_exactly_its_defects(tmp_path):
    source = scaffold_plugin("kiln_wrong", tmp_path / "dist")
    package = source / "tensorkiln_kiln_wrong"
    (package / "emitter.py").write_text(_BROKEN_EMITTER)
    manifest = package / "manifest.toml"
    manifest.write_text(manifest.read_text().replace('supported = ["add", "subtract", "multiply", "nn.relu"]',
                                                     'supported = ["add", "subtract", "nn.relu", "nn.softmax"]'))
    site = tmp_path / "site"
    pip_install(source, site)
    code, report = conformance_report("kiln_wrong", "manifest,runtime,te,ops", site, tmp_path,
                                      "--shapes-per-op", "2", "--junit", str(tmp_path / "out.xml"))
    assert code == 1
    failed = {c["id"]: c for c in report["checks"] if c["outcome"] == "failed"}
    expected_numeric = {f"ops/add/{dtype}/{variant}" for dtype in ("float32", "float64") for variant in (0, 1)}
    expected_compile = {f"ops/nn.softmax/{dtype}/{variant}" for dtype in ("float32", "float64") for variant in (0, 1)}
    assert set(failed) == expected_numeric | expected_compile
    assert all(failed[i]["kind"] == "numeric" and failed[i]["max_abs_error"] > 0.1 for i in expected_numeric)
    assert all(failed[i]["kind"] == "compile" and "exp" in failed[i]["message"] for i in expected_compile)
    assert {f["id"] for f in report["failures"]["numeric"]} == expected_numeric
    assert {f["id"] for f in report["failures"]["compile"]} == expected_compile
    assert report["failures"]["run"] == [] and report["failures"]["contract"] == []
    assert all(c["outcome"] == "passed" for c in report["checks"] if c["id"].startswith("ops/add/int32"))
    assert 'type="numeric"' in (tmp_path / "out.xml").read_text()

    # The failures become the plugin's expected-failure list; the next run passes and says so.
    expected_file = tmp_path / "expected.json"
    code, _ = conformance_report("kiln_wrong", "manifest,runtime,te,ops", site, tmp_path, "--shapes-per-op", "2",
                                 "--update-expected", "--expected", str(expected_file))
    assert code == 0
    assert set(json.loads(expected_file.read_text())["expected_failures"]) == set(failed)
    listed = json.loads(expected_file.read_text())
    listed["expected_failures"]["ops/subtract/float32/0"] = "numeric: pretend this one is known broken"
    expected_file.write_text(json.dumps(listed))
    code, report = conformance_report("kiln_wrong", "manifest,runtime,te,ops", site, tmp_path, "--shapes-per-op", "2",
                                      "--expected", str(expected_file))
    assert code == 0
    outcomes = {c["id"]: c["outcome"] for c in report["checks"]}
    assert all(outcomes[i] == "xfailed" for i in failed)
    assert outcomes["ops/subtract/float32/0"] == "xpassed"
    assert report["unexpected_passes"] == ["ops/subtract/float32/0"]
