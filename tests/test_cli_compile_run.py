"""`tensorkiln compile` then `tensorkiln run`, as a user types them (subprocesses)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tensorkiln as tk

MODEL = Path(__file__).resolve().parents[1] / "examples" / "models" / "small_cnn.onnx"


def tensorkiln(*args, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "tensorkiln.cli", *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, encoding="utf-8", timeout=300)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    folder = tmp_path_factory.mktemp("cli")
    result = tensorkiln("compile", MODEL, "--shape", "input=1,3,32,32", "-o", folder / "x.tkpkg", "--time-passes",
                        "--explain", cwd=folder)
    return folder, folder / "x.tkpkg", result


def test_compile_prints_summary_placement_and_pass_times(package):
    _, path, result = package
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert path.is_file()
    assert f"wrote {path}" in out
    assert "kernels:" in out and "graph ops" in out and "planned activation memory" in out
    assert "placement" in out and "cpu_llvm" in out
    # --time-passes: one row per pass that ran, with milliseconds, and a total.
    assert "fuse_ops" in out and "simplify_inference" in out
    assert " ms" in out and "total" in out


def test_compile_explain_names_each_kernels_strategy_and_knobs(package):
    _, _, result = package
    out = result.stdout
    assert "strategies" in out
    # the small CNN's dense has one row: cpu_llvm's split dense, with its knob values; the
    # micro-kernel did not apply, and the reason is shown
    assert "cpu_llvm.dense_split" in out and "split=" in out
    assert "cpu_llvm.dense_ukernel" in out and "M=1" in out
    assert "cpu_llvm.pool" in out


def test_run_random_prints_output_shapes_and_latency(package):
    folder, path, _ = package
    result = tensorkiln("run", path, "--random", "--repeat", "2", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "output 0: shape (1, 10) dtype float32" in result.stdout
    assert "latency over 2 runs: median" in result.stdout and " ms" in result.stdout


def test_run_with_an_input_file_and_save(package):
    folder, path, _ = package
    x = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32)
    np.save(folder / "x.npy", x)
    result = tensorkiln("run", path, "--input", "input=x.npy", "--repeat", "0", "--save", "out", cwd=folder)
    assert result.returncode == 0, result.stderr
    saved = np.load(folder / "out0.npy", allow_pickle=False)
    reference = tk.graph.evaluate(tk.frontend.from_onnx(MODEL, shape={"input": (1, 3, 32, 32)}), {"input": x})
    np.testing.assert_allclose(saved, reference, rtol=1e-4, atol=1e-6)


def test_run_missing_input_file_is_a_clear_error(package):
    folder, path, _ = package
    result = tensorkiln("run", path, "--input", "input=absent.npy", cwd=folder)
    assert result.returncode == 1
    assert "error: input file 'absent.npy' for input 'input' does not exist" in result.stderr
    assert "Traceback" not in result.stderr


def _main(argv, cwd, monkeypatch, capsys) -> tuple[int | str, str]:
    """The CLI in this process (faster than a subprocess): (exit code or SystemExit message, stderr)."""
    from tensorkiln.cli import main

    monkeypatch.chdir(cwd)
    try:
        code = main([str(a) for a in argv])
    except SystemExit as stop:
        code = stop.code
    return code, capsys.readouterr().err


def test_run_input_file_that_is_not_npy(package, monkeypatch, capsys):
    folder, path, _ = package
    (folder / "text.npy").write_text("not an array")
    code, _ = _main(["run", path, "--input", "input=text.npy"], folder, monkeypatch, capsys)
    assert str(code).startswith("error: cannot read 'text.npy' as a numpy .npy array")


def test_run_without_inputs_says_how_to_give_them(package, monkeypatch, capsys):
    folder, path, _ = package
    code, _ = _main(["run", path], folder, monkeypatch, capsys)
    assert code == "error: input 'input' (1, 3, 32, 32) float32 not given; pass --input NAME=file.npy or --random"


def test_run_missing_package(tmp_path, monkeypatch, capsys):
    code, err = _main(["run", "absent.tkpkg", "--random"], tmp_path, monkeypatch, capsys)
    assert code == 1
    assert "error: no model package at absent.tkpkg" in err


def test_run_corrupted_package(package, tmp_path, monkeypatch, capsys):
    _, path, _ = package
    (tmp_path / "cut.tkpkg").write_bytes(path.read_bytes()[:1000])
    code, err = _main(["run", "cut.tkpkg", "--random"], tmp_path, monkeypatch, capsys)
    assert code == 1
    assert "error: cut.tkpkg is not a tensorkiln model package or is truncated/corrupted" in err


def test_compile_missing_model(tmp_path, monkeypatch, capsys):
    code, err = _main(["compile", "absent.onnx"], tmp_path, monkeypatch, capsys)
    assert code == 1
    assert "error: ONNX file 'absent.onnx' does not exist" in err


def test_compile_bad_shape_flag(tmp_path, monkeypatch, capsys):
    code, _ = _main(["compile", MODEL, "--shape", "input"], tmp_path, monkeypatch, capsys)
    assert code == "error: --shape 'input' must look like NAME=1,3,224,224"


def test_run_profile_prints_kernel_times_and_writes_a_chrome_trace(package):
    import json
    folder, path, _ = package
    result = tensorkiln("run", path, "--random", "--repeat", "3", "--profile", folder / "trace.json", cwd=folder)
    assert result.returncode == 0, result.stderr
    assert "kernel" in result.stdout and "share" in result.stdout and "outside kernels" in result.stdout
    assert "fused_nn_conv2d" in result.stdout
    trace = json.loads((folder / "trace.json").read_text())
    kernels = {event["name"] for event in trace["traceEvents"]}
    assert any(name.startswith("fused_nn_conv2d") for name in kernels)
    assert all(event["ph"] == "X" and event["dur"] >= 0 for event in trace["traceEvents"])
