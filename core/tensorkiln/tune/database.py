"""tune/database.py: tuning records in an embedded SQLite file, exported and imported as JSON lines.

A record is one measured candidate of one workload. It is keyed by everything that makes its
knob values mean what they meant when it was measured (tune/workload.py):

    workload_key, target (with its options), target_fingerprint (resolved capabilities),
    implementation, plugin_version, format_version

`tk.compile(model, target, tuning_db=db)` asks `db.configs_for(group_function, target)` for each
group: the best valid record whose key matches on every field and whose implementation is the one
the strategies chose. A record of another target, CPU, plugin version or record format is never
applied (TVM's MetaSchedule database ignores the target, apache/tvm#15549). The schema is in
sdk_docs/tuning.md.
"""
from __future__ import annotations

import json
import math
import sqlite3
import time
from pathlib import Path

from ..sdk.schedules.generated import GENERATED_NAME
from ..ir.errors import TensorkilnError
from .record import MeasureResult
from .workload import FORMAT_VERSION, plugin_version, target_fingerprint, target_key, workload_key

__all__ = ["Database", "SCHEMA", "KEY_FIELDS"]

KEY_FIELDS = ("workload_key", "target", "target_fingerprint", "implementation", "plugin_version", "format_version")

SCHEMA = """
CREATE TABLE IF NOT EXISTS records (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    workload_key       TEXT    NOT NULL,  -- sha256 of the group's text, parameters renamed by position
    target             TEXT    NOT NULL,  -- canonical target string with its options
    target_fingerprint TEXT    NOT NULL,  -- hash of the capabilities the plugin resolved (CPU features)
    implementation     TEXT    NOT NULL,  -- OpImplementation.name the knobs belong to
    plugin_version     TEXT    NOT NULL,  -- 'distribution==version' that declared the implementation
    format_version     INTEGER NOT NULL,  -- record format (tensorkiln.tune.workload.FORMAT_VERSION)
    workload           TEXT    NOT NULL,  -- the group's text (readable)
    config             TEXT    NOT NULL,  -- JSON object: knob name -> value
    trace              TEXT    NOT NULL,  -- JSON list: the te schedule trace (te.trace.to_json)
    status             TEXT    NOT NULL,  -- ok, invalid, build_error, run_error, timeout, wrong_output, ...
    cost               REAL,              -- seconds per call (fastest sample); NULL without a measurement
    costs              TEXT    NOT NULL,  -- JSON list: mean seconds per call of each repeat
    error              TEXT    NOT NULL,  -- why there is no cost ('' when there is)
    features           TEXT    NOT NULL,  -- JSON object: loop features, knob and workload features
    created            REAL    NOT NULL   -- unix time
);
CREATE INDEX IF NOT EXISTS records_by_key
    ON records (workload_key, target, target_fingerprint, implementation, plugin_version, format_version, cost);
CREATE INDEX IF NOT EXISTS records_by_implementation ON records (implementation, target_fingerprint);
"""

_COLUMNS = ("workload_key", "target", "target_fingerprint", "implementation", "plugin_version", "format_version",
            "workload", "config", "trace", "status", "cost", "costs", "error", "features", "created")


class _Applied:
    """The `configs(implementation, space)` callback for one group: the best matching record's knobs.

    After the compiler called it, `applied` describes the record used (None: none matched)."""

    def __init__(self, best_by_implementation: dict[tuple[str, str], dict], target,
                 implementation: str | None = None) -> None:
        self.best = best_by_implementation
        self.target = target
        self.applied = None
        self.implementation = implementation   # GENERATED_NAME: the compiler uses the generated sketch

    def __call__(self, implementation, space):
        row = self.best.get((implementation.name, plugin_version(implementation, self.target)))
        if row is None:
            return None
        config = json.loads(row["config"])
        try:
            config = space.validate(config)
        except TensorkilnError:   # the plugin's space changed under the same version: keep the defaults
            return None
        self.applied = {"id": row["id"], "cost": row["cost"], "config": config}
        return config


class Database:
    """A tuning database in one SQLite file (":memory:" for a scratch one)."""

    def __init__(self, path: "str | Path" = "tuning.sqlite") -> None:
        self.path = str(path)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False)
            self._db.row_factory = sqlite3.Row
            self._db.executescript(SCHEMA)
        except sqlite3.DatabaseError as error:
            raise TensorkilnError(f"tuning database {self.path}: {error} (is it a tensorkiln tuning database?)") \
                from None

    # -- writing -------------------------------------------------------------------------------

    def add(self, identity: dict, result: MeasureResult, workload: str = "") -> int:
        """Store one result of the task whose `Task.identity()` is `identity`; returns the record id."""
        row = {**{k: identity[k] for k in KEY_FIELDS}, "workload": workload, "config": json.dumps(result.config),
               "trace": result.trace or "[]", "status": result.status,
               "cost": result.cost if result.valid else None, "costs": json.dumps(list(result.costs)),
               "error": result.error, "features": json.dumps(result.features), "created": time.time()}
        return self._insert(row)

    def update(self, record_id: int, result: MeasureResult) -> None:
        """Store a re-measured result's cost, costs, status and error (the final re-measurement)."""
        self._db.execute("UPDATE records SET status = ?, cost = ?, costs = ?, error = ? WHERE id = ?",
                         [result.status, result.cost if result.valid else None, json.dumps(list(result.costs)),
                          result.error, record_id])
        self._db.commit()

    def _insert(self, row: dict) -> int:
        missing = [c for c in _COLUMNS if c not in row]
        if missing:
            raise TensorkilnError(f"tuning record lacks {missing}")
        cursor = self._db.execute(f"INSERT INTO records ({', '.join(_COLUMNS)}) VALUES "
                                  f"({', '.join('?' for _ in _COLUMNS)})", [row[c] for c in _COLUMNS])
        self._db.commit()
        return cursor.lastrowid

    # -- reading -------------------------------------------------------------------------------

    def best(self, identity: dict) -> dict | None:
        """The fastest valid record with exactly this identity (every key field), or None."""
        where = " AND ".join(f"{k} = ?" for k in KEY_FIELDS)
        row = self._db.execute(f"SELECT * FROM records WHERE {where} AND cost IS NOT NULL ORDER BY cost, id LIMIT 1",
                               [identity[k] for k in KEY_FIELDS]).fetchone()
        return dict(row) if row is not None else None

    def records(self, **match) -> list[dict]:
        """Every record whose columns equal `match` (all records without arguments), oldest first."""
        unknown = sorted(set(match) - set(_COLUMNS) - {"id"})
        if unknown:
            raise TensorkilnError(f"records(): unknown column(s) {unknown}; columns: {list(_COLUMNS)}")
        where = " AND ".join(f"{k} = ?" for k in match) or "1"
        return [dict(r) for r in self._db.execute(f"SELECT * FROM records WHERE {where} ORDER BY id",
                                                  list(match.values()))]

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def configs_for(self, function, target):
        """For `tk.compile`: the group's configs callback, or None when no record matches its workload,
        target, fingerprint and record format (the implementation and plugin version are checked
        when the compiler has chosen the implementation)."""
        rows = self._db.execute(
            "SELECT * FROM records WHERE workload_key = ? AND target = ? AND target_fingerprint = ? "
            "AND format_version = ? AND cost IS NOT NULL ORDER BY cost DESC, id DESC",
            [workload_key(function), target_key(target), target_fingerprint(target), FORMAT_VERSION]).fetchall()
        if not rows:
            return None
        best = {(r["implementation"], r["plugin_version"]): dict(r) for r in rows}   # the last one wins: fastest
        # a generated sketch replaces the strategies' choice only when its record beat a measured
        # template record of this workload (the session stores the template default first)
        generated = rows[-1]["implementation"] == GENERATED_NAME and any(
            r["implementation"] != GENERATED_NAME for r in rows)
        return _Applied(best, target, GENERATED_NAME if generated else None)

    def similar(self, identity: dict, limit: int = 2000) -> list[dict]:
        """Records of the same implementation, target and plugin version for other workloads
        (they warm-start the learned cost model)."""
        return [dict(r) for r in self._db.execute(
            "SELECT * FROM records WHERE implementation = ? AND target_fingerprint = ? AND plugin_version = ? "
            "AND format_version = ? AND workload_key != ? ORDER BY id DESC LIMIT ?",
            [identity["implementation"], identity["target_fingerprint"], identity["plugin_version"],
             identity["format_version"], identity["workload_key"], limit])]

    # -- JSON lines ------------------------------------------------------------------------------

    def export_jsonl(self, path: "str | Path") -> int:
        """Write every record as one JSON object per line; returns how many."""
        rows = self.records()
        with open(path, "w", encoding="utf-8") as out:
            for row in rows:
                row = {k: v for k, v in row.items() if k != "id"}
                for name in ("config", "trace", "costs", "features"):
                    row[name] = json.loads(row[name])
                out.write(json.dumps(row) + "\n")
        return len(rows)

    def import_jsonl(self, path: "str | Path") -> int:
        """Add the records of a file `export_jsonl` wrote; returns how many."""
        count = 0
        with open(path, encoding="utf-8") as lines:
            for number, line in enumerate(lines, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    for name in ("config", "trace", "costs", "features"):
                        row[name] = json.dumps(row[name])
                    if row["cost"] is not None and not math.isfinite(float(row["cost"])):
                        raise ValueError("cost is not finite")
                except (ValueError, KeyError, TypeError) as error:
                    raise TensorkilnError(f"{path}:{number}: not a tuning record ({error})") from None
                self._insert(row)
                count += 1
        return count

    def close(self) -> None:
        self._db.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<tune.Database {self.path}: {len(self)} records>"

