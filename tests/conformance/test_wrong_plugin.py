"""The kit can fail: a deliberately wrong plugin gets exactly its two defects reported.

Defects, built on the scaffold: (1) its emitter turns float additions of the graph
op `add` into subtractions, (2) its manifest claims `nn.softmax`, but its C dialect
has no `exp`, so that op cannot compile. Everything else must pass.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from tensorkiln.conformance.scaffold import scaffold_plugin

from .dists import conformance_report, pip_install, run_cli

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


# -- issue 17: what the kit used to let through, one deliberately wrong plugin each -------------
#
# Every wrong plugin is the scaffold with one kind of defect; all are pip-installed into one
# site (one pip call) and each test runs the kit on its own target in a subprocess.

_MM4_CODE = """\
static void {symbol}(const float* A, const float* B, float* C, int64_t lda, int64_t ldb, int64_t ldc, int64_t K,
                     int32_t accumulate) {{
    for (int i = 0; i < 4; ++i) {{
        for (int j = 0; j < 4; ++j) {{
            float sum = {start};
            for (int64_t k = 0; k < K; ++k) sum += A[i * lda + k] * B[k * ldb + j];
            C[i * {row_stride} + j] = sum;
        }}
    }}
}}"""
_MM4 = {  # intrinsic name -> C body: right; never / always accumulating; assuming the tile's width as row stride
    "acme_mm4": _MM4_CODE.format(symbol="acme_mm4", start="accumulate ? C[i * ldc + j] : 0.0f", row_stride="ldc"),
    "acme_mm4_noacc": _MM4_CODE.format(symbol="acme_mm4_noacc", start="0.0f", row_stride="ldc"),
    "acme_mm4_alwaysacc": _MM4_CODE.format(symbol="acme_mm4_alwaysacc", start="C[i * ldc + j]", row_stride="ldc"),
    "acme_mm4_stride": _MM4_CODE.format(symbol="acme_mm4_stride", start="accumulate ? C[i * 4 + j] : 0.0f",
                                        row_stride="4"),
}

_INTRINSICS_HOOK = '''

from tensorkiln.sdk import hookimpl as _hookimpl


def _mm4(name, code):
    """C[4, 4] (+)= A[4, K] @ B[K, 4] in C, K free."""
    from tensorkiln import te
    from tensorkiln.sdk.intrinsic_impl import SourceImpl

    k_extent = te.var("K")
    a = te.placeholder((4, k_extent), name="A")
    b = te.placeholder((k_extent, 4), name="B")
    k = te.reduce_axis((0, k_extent), name="k")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, k] * b[k, j], axis=k), name="C")
    return te.decl_tensor_intrin(c, name, implementations={TARGET.name: SourceImpl("c", code, name)})


def _dot4():
    """d[0] = sum(a[r] * b[r]) over four int8 pairs, accumulated in int32."""
    from tensorkiln import te
    from tensorkiln.sdk.intrinsic_impl import SourceImpl

    a = te.placeholder((4,), "int8", name="a")
    b = te.placeholder((4,), "int8", name="b")
    r = te.reduce_axis((0, 4), name="r")
    d = te.compute((1,), lambda i: te.sum(te.cast(a[r], "int32") * te.cast(b[r], "int32"), axis=r), name="d")
    return te.decl_tensor_intrin(d, "acme_dot4", implementations={TARGET.name: SourceImpl("c", "", "acme_dot4")})


@_hookimpl
def tensorkiln_intrinsics(target):
    if target.name != TARGET.name:
        return []
    return [_mm4(name, code) for name, code in MM4.items()] + ([_dot4()] if WITH_DOT4 else [])
'''


def _wrong_scaffold(root: Path, name: str, *, manifest_edits: dict[str, str] = {}, manifest_extra: str = "",
                    intrinsics: dict[str, str] | None = None, with_dot4: bool = False) -> Path:
    """The scaffold for `name` with its manifest edited (old -> new text, then `manifest_extra` appended)
    and, with `intrinsics` ({name: C code}), the 4x4 matmul intrinsics registered by a hook."""
    source = scaffold_plugin(name, root / name)
    package = source / f"tensorkiln_{name}"
    manifest = package / "manifest.toml"
    text = manifest.read_text()
    for old, new in manifest_edits.items():
        assert old in text, f"the scaffold's manifest no longer has {old!r}"
        text = text.replace(old, new)
    manifest.write_text(text + manifest_extra)
    if intrinsics is not None:
        plugin = package / "plugin.py"
        plugin.write_text(plugin.read_text() + f"\nMM4 = {intrinsics!r}\nWITH_DOT4 = {with_dot4!r}\n"
                          + _INTRINSICS_HOOK)
    return source


_SCAFFOLD_OPS = 'supported = ["add", "subtract", "multiply", "nn.relu"]'
_SCAFFOLD_DTYPES = 'dtypes = ["int32", "float32", "float64"]'


@pytest.fixture(scope="module")
def wrong_site(tmp_path_factory):
    """{target: name} of the installed wrong plugins, plus "site" (their PYTHONPATH folder) and "tmp"."""
    root = tmp_path_factory.mktemp("wrong_plugins")
    sources = [
        # static claims the code does not back: float16 (no C type), argmax without int64, a version
        # pyproject does not have, an intrinsic tile and input dtypes the descriptions do not have
        _wrong_scaffold(root, "kiln_claims", manifest_edits={
            _SCAFFOLD_DTYPES: 'dtypes = ["int32", "float32", "float64", "float16"]',
            _SCAFFOLD_OPS: 'supported = ["add", "subtract", "multiply", "nn.relu", "argmax"]',
            'version = "0.1.0"': 'version = "0.2.0"'},
            manifest_extra='\n[[intrinsics]]\nname = "acme_mm4"\ndtypes = ["float32"]\ntile = { m = 4, n = 8 }\n'
                           '\n[[intrinsics]]\nname = "acme_dot4"\ndtypes = ["int32"]\n',
            intrinsics={"acme_mm4": _MM4["acme_mm4"]}, with_dot4=True),
        # a blocked layout preference (the example of hooks.md) the core cannot honour
        _wrong_scaffold(root, "kiln_layout", manifest_extra='\n[[layouts]]\nop = "nn.conv2d"\nlayout = "NCHW6c"\n'),
        # a target that runs almost nothing itself: models pass through fallback
        _wrong_scaffold(root, "kiln_share", manifest_edits={_SCAFFOLD_OPS: 'supported = ["add", "nn.relu"]'}),
        # intrinsics that ignore the accumulate flag (either way), or assume a row stride of 4
        _wrong_scaffold(root, "kiln_mm", manifest_edits={'"pragma"': '"pragma", "tensorize"'},
                        manifest_extra="".join(f'\n[[intrinsics]]\nname = "{n}"\ndtypes = ["float32"]\n'
                                               'tile = { m = 4, n = 4 }\n' for n in _MM4),
                        intrinsics=_MM4),
    ]
    site = root / "site"
    pip_install(sources, site)
    return {"site": site, "tmp": root}


def _failed(report: dict) -> dict[str, dict]:
    return {c["id"]: c for c in report["checks"] if c["outcome"] == "failed"}


def test_manifest_level_catches_claims_the_plugin_cannot_back(wrong_site):
    code, report = conformance_report("kiln_claims", "manifest", wrong_site["site"], wrong_site["tmp"])
    failed = _failed(report)
    assert code == 1
    assert set(failed) == {"manifest/dtypes_emit", "manifest/op_dtypes", "manifest/version",
                           "manifest/intrinsics_declared"}
    assert all(c["kind"] == "contract" for c in failed.values())
    emit = failed["manifest/dtypes_emit"]["message"]
    assert "float16 (CompileError: kiln_claims cannot emit dtype 'float16'" in emit and emit.count("Error:") == 1
    assert "argmax returns int64 (from int32)" in failed["manifest/op_dtypes"]["message"]
    assert ("says version = '0.2.0' but the installed distribution 'tensorkiln-kiln-claims' is version '0.1.0'"
            in failed["manifest/version"]["message"])
    intrinsics = failed["manifest/intrinsics_declared"]["message"]
    assert "'acme_mm4' declares tile {m = 4, n = 8} but its te description computes a 4x4 output tile" in intrinsics
    assert "'acme_dot4' reads ['int8'] (inputs a int8, b int8) but declares dtypes ['int32']" in intrinsics


def test_summary_shows_why_an_op_is_unsupported_and_which_dtypes_go_unchecked(wrong_site):
    result = run_cli(["conformance", "kiln_claims", "--level", "ops", "--op", "argmax", "--op", "nn.relu",
                      "--dtype", "float32", "--dtype", "int32", "--shapes-per-op", "1", "--show-skipped",
                      "--report", str(wrong_site["tmp"] / "claims-ops.json")], wrong_site["site"])
    assert result.returncode == 1, result.stdout + result.stderr
    flat = "".join(ch for ch in result.stdout if not ch.isspace() and ch not in "│┃")
    # the reason sits on the error's second line; the summary table shows it
    assert "argmax(dtype_unsupported:int64)" in flat, result.stdout
    assert "thekit'scasefornn.reluc" in flat and "int32isclaimedbutnotchecked" in flat, result.stdout
    report = json.loads((wrong_site["tmp"] / "claims-ops.json").read_text())
    outcomes = {c["id"]: c for c in report["checks"]}
    assert "dtype_unsupported:int64" in report["failures"]["compile"][0]["message"]
    assert outcomes["ops/nn.relu/int32"]["outcome"] == "skipped"
    assert "covers float dtypes only; int32 is claimed but not checked" in outcomes["ops/nn.relu/int32"]["skip_reason"]


def test_a_layout_preference_the_core_cannot_honour_fails_naming_op_and_layout(wrong_site):
    code, report = conformance_report("kiln_layout", "manifest,models", wrong_site["site"], wrong_site["tmp"])
    failed = _failed(report)
    assert code == 1
    assert set(failed) == {"manifest/layouts", "models/layout_preferences"}
    for check in failed.values():
        assert "nn.conv2d NCHW6c: alter_layout cannot convert nn.conv2d to data layout NCHW6c" in check["message"]


def test_models_level_reports_the_share_of_ops_on_the_target_and_can_require_one(wrong_site):
    site, tmp = wrong_site["site"], wrong_site["tmp"]
    code, report = conformance_report("kiln_share", "models", site, tmp)
    assert code == 0      # fallback is allowed by default, and reported
    shares = {c["id"]: c["facts"] for c in report["checks"] if c["id"] in ("models/mlp", "models/residual_cnn")}
    for facts in shares.values():
        assert 0 < facts["ops_on_target"] < facts["ops"] and facts["target_share"] < 0.5
        assert facts["fallbacks"]["nn.dense"] == "cpu_llvm (not_in_manifest)"
    code, report = conformance_report("kiln_share", "models", site, tmp, "--min-target-share", "0.9")
    failed = _failed(report)
    assert code == 1 and set(failed) == {"models/mlp", "models/residual_cnn", "models/attention"}
    assert {f["id"] for f in report["failures"]["coverage"]} == set(failed)
    mlp = failed["models/mlp"]["message"]
    assert f"of {shares['models/mlp']['ops']} ops" in mlp and "below the required minimum share 90%" in mlp
    assert failed["models/mlp"]["facts"] == shares["models/mlp"]
    result = run_cli(["conformance", "kiln_share", "--level", "models", "--min-target-share", "1.5"], site)
    assert result.returncode == 2 and "is not between 0 and 1" in result.stderr


def test_intrinsics_level_catches_ignored_accumulate_and_wrong_row_stride_at_one_shape(wrong_site):
    code, report = conformance_report("kiln_mm", "intrinsics", wrong_site["site"], wrong_site["tmp"],
                                      "--shapes-per-op", "1")
    failed = _failed(report)
    assert code == 1
    assert set(failed) == {"intrinsics/acme_mm4_noacc/0", "intrinsics/acme_mm4_alwaysacc/0",
                           "intrinsics/acme_mm4_stride/0"}
    assert all(c["kind"] == "numeric" for c in failed.values())
    assert "reduction in 2 tiles (calls with accumulate=1)" in failed["intrinsics/acme_mm4_noacc/0"]["message"]
    assert {c["id"]: c["outcome"] for c in report["checks"]}["intrinsics/acme_mm4/0"] == "passed"
