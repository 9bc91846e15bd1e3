"""The tuning database: records keyed by workload, target (+ resolved capabilities), implementation,
plugin version and format version; applied by tk.compile only where every key matches."""
from __future__ import annotations

import json
import sqlite3

import numpy as np
import pytest

import tensorkiln as tk
from tensorkiln import graph, tune
from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.tune.record import MeasureResult

SHAPE = (64, 128, 64)


def _model():
    return graph.nn.matmul(graph.var("A", shape=(64, 64)), graph.var("B", shape=(64, 128)))


@pytest.fixture(scope="module")
def task():
    return tune.Task.from_op("gemm", SHAPE, "cpu_llvm")


def _other_config(task) -> dict:
    """A config that differs from the default in one knob (so applying it is visible)."""
    default = task.space.default_config()
    for knob in task.space.knobs:
        for value in knob.candidates:
            if value != knob.default:
                candidate = {**default, knob.name: value}
                try:
                    task.lower(candidate)
                except TensorkilnError:
                    continue
                return candidate
    raise AssertionError("no legal non-default config")


def _stored(task, db, config, cost=1e-4, **identity_changes) -> int:
    identity = {**task.identity(), **identity_changes}
    return db.add(identity, MeasureResult(config, cost=cost, costs=(cost,)), "workload text")


def _compiled_record(db, target="cpu_llvm"):
    lib = tk.compile(_model(), target, tuning_db=db)
    return lib, lib.summary()["strategies"]["fused_nn_matmul"]


def test_best_record_is_applied_and_the_result_is_numpys(task):
    db = tune.Database(":memory:")
    config = _other_config(task)
    _stored(task, db, task.space.default_config(), cost=2e-4)
    best_id = _stored(task, db, config, cost=1e-4)
    lib, used = _compiled_record(db)
    assert used["tuning_record"]["id"] == best_id and used["config"] == config
    a = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
    b = np.random.default_rng(1).standard_normal((64, 128)).astype(np.float32)
    np.testing.assert_allclose(lib.run([a, b])[0], a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("change", [{"plugin_version": "tensorkiln-cpu-llvm==0.0.1"},
                                    {"target": "cpu_llvm -mcpu=haswell -num_threads=0 -opt_level=3"},
                                    {"target_fingerprint": "0123456789abcdef"},
                                    {"format_version": 0},
                                    {"implementation": "cpu_llvm.some_other_gemm"},
                                    {"workload_key": "0" * 32}])
def test_a_record_of_another_target_plugin_version_or_format_is_never_applied(task, change):
    db = tune.Database(":memory:")
    _stored(task, db, _other_config(task), **change)
    _, used = _compiled_record(db)
    assert used["tuning_record"] is None and used["config"] == task.space.default_config()


def test_a_record_is_not_applied_to_another_cpu_with_the_same_target_name(task):
    """The same config under the same plugin, tuned for the host CPU, is not used for -mcpu=haswell."""
    db = tune.Database(":memory:")
    _stored(task, db, _other_config(task))
    _, used = _compiled_record(db, "llvm -mcpu=haswell")
    assert used["tuning_record"] is None


def test_a_group_without_a_record_keeps_the_default_and_the_summary_says_so(task):
    db = tune.Database(":memory:")
    _stored(task, db, _other_config(task))
    model = graph.nn.relu(_model())
    lib = tk.compile(model, "cpu_llvm", tuning_db=db)
    (row,) = lib.summary()["strategies"].values()
    assert row["tuning_record"] is None    # the group is matmul + relu: another workload
    plain = tk.compile(model, "cpu_llvm")
    assert "tuning_record" not in next(iter(plain.summary()["strategies"].values()))


def test_jsonl_export_import_round_trip_and_apply_history_best(task, tmp_path):
    db = tune.Database(tmp_path / "a.sqlite")
    config = _other_config(task)
    _stored(task, db, task.space.default_config(), cost=3e-4)
    _stored(task, db, config, cost=1e-4)
    assert db.export_jsonl(tmp_path / "records.jsonl") == 2
    lines = (tmp_path / "records.jsonl").read_text().splitlines()
    assert json.loads(lines[1])["config"] == config
    other = tune.Database(tmp_path / "b.sqlite")
    assert other.import_jsonl(tmp_path / "records.jsonl") == 2
    assert other.best(task.identity())["config"] == json.dumps(config)
    other.close()
    with tune.apply_history_best(tmp_path / "b.sqlite"):
        _, used = _compiled_record(None)
    assert used["tuning_record"]["config"] == config
    _, used = _compiled_record(None)   # outside the block: no database
    assert "tuning_record" not in used


def test_the_schema_is_as_documented(tmp_path):
    tune.Database(tmp_path / "t.sqlite").close()
    columns = [row[1] for row in sqlite3.connect(tmp_path / "t.sqlite").execute("PRAGMA table_info(records)")]
    documented = (tk.__file__.rsplit("/core/", 1)[0] + "/sdk_docs/tuning.md")
    text = open(documented, encoding="utf-8").read()
    assert all(f"`{column}`" in text or f" {column} " in text for column in columns)


def test_bad_files_and_arguments_are_clear_errors(tmp_path):
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(TensorkilnError, match="tuning database"):
        tune.Database(tmp_path / "junk.sqlite")
    (tmp_path / "bad.jsonl").write_text('{"config": {}}\n')
    with pytest.raises(TensorkilnError, match="bad.jsonl:1: not a tuning record"):
        tune.Database(":memory:").import_jsonl(tmp_path / "bad.jsonl")
    with pytest.raises(TypeError, match="tensorkiln.tune.Database"):
        tk.compile(_model(), "cpu_llvm", tuning_db=str(tmp_path / "t.sqlite"))
