"""`tensorkiln tune`: argument errors are clear; a tiny run writes records, the curve and the JSONL file."""
from __future__ import annotations

import json

import pytest

from tensorkiln import tune
from tensorkiln.cli import main


@pytest.mark.parametrize("argv,message", [
    (["tune"], "nothing to tune"),
    (["tune", "--op", "gemm"], "needs --shape"),
    (["tune", "--op", "gemm", "--shape", "4,x,4"], "comma-separated integers"),
    (["tune", "--op", "fft", "--shape", "4"], "unknown op 'fft'"),
    (["tune", "missing.onnx"], "does not exist"),
])
def test_bad_arguments_are_clear_errors(argv, message, capsys):
    assert main(argv) == 1
    assert message in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_operator_run_writes_records_curve_and_jsonl(tmp_path, capsys):
    db, curve, jsonl = tmp_path / "t.sqlite", tmp_path / "curve.png", tmp_path / "r.jsonl"
    assert main(["tune", "--op", "gemm", "--shape", "64,128,64", "--target", "cpu_llvm -num_threads=1",
                 "--trials", "3", "--batch", "2", "--strategy", "random", "--db", str(db), "--curve", str(curve),
                 "--export", str(jsonl)]) == 0
    out = capsys.readouterr().out
    assert "tuning summary" in out and "gemm_64x128x64" in out
    assert curve.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = [json.loads(line) for line in jsonl.read_text().splitlines()]
    assert len(records) == len(tune.Database(db)) >= 3
    assert records[0]["config"] == tune.Task.from_op("gemm", (64, 128, 64), "cpu_llvm -num_threads=1").space.default_config()
