"""tune/apply.py: use tuning records when compiling.

    with tune.apply_history_best("tuning.sqlite"):
        lib = tk.compile(model, "cpu_llvm")          # each group gets its best matching record
    lib.summary()["strategies"]["fused_nn_conv2d_add_nn_relu"]["tuning_record"]   # {'id': 17, ...} or None
"""
from __future__ import annotations

import contextlib
from pathlib import Path

from .database import Database

__all__ = ["apply_history_best", "open_database"]


def open_database(db: "Database | str | Path") -> Database:
    return db if isinstance(db, Database) else Database(db)


@contextlib.contextmanager
def apply_history_best(db: "Database | str | Path"):
    """Within the block, `tk.compile` applies the best record of `db` (a Database or a file path) to
    every group that has one for its workload, target and plugin version."""
    from ..compiler.driver import use_tuning_db

    database = open_database(db)
    try:
        with use_tuning_db(database):
            yield database
    finally:
        if database is not db:
            database.close()
