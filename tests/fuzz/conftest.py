"""Options of the fuzzing suite: `pytest tests/fuzz --fuzz-cases 10000 [--fuzz-seed 7]`.

Without them the suite runs CI_CASES generated cases (derandomized, the same ones each
run) plus every corpus case. The environment variables TK_FUZZ_CASES / TK_FUZZ_SEED do
the same when tests/fuzz is not on the command line (pytest reads this file's options
only then). --fuzz-report writes the figures of the run as JSON.
"""
from __future__ import annotations

import os

import pytest

CI_CASES = 150


def pytest_addoption(parser):
    group = parser.getgroup("tensorkiln fuzzing")
    group.addoption("--fuzz-cases", type=int, default=None, help=f"generated fuzz cases (default {CI_CASES})")
    group.addoption("--fuzz-seed", type=int, default=None,
                    help="random seed of the generated cases (default: derandomized, the same cases each run)")
    group.addoption("--fuzz-report", default=None, help="write the run's figures to this JSON file")


def _option(config, name: str, env: str):
    value = config.getoption(name, default=None)
    if value is None and os.environ.get(env):
        value = os.environ[env]
    return value


@pytest.fixture(scope="session")
def fuzz_config(request):
    cases = _option(request.config, "--fuzz-cases", "TK_FUZZ_CASES")
    seed = _option(request.config, "--fuzz-seed", "TK_FUZZ_SEED")
    return {"cases": CI_CASES if cases is None else int(cases), "seed": None if seed is None else int(seed),
            "report": _option(request.config, "--fuzz-report", "TK_FUZZ_REPORT")}


@pytest.fixture(scope="session")
def fuzz_runner():
    from .harness import FuzzRunner
    with FuzzRunner(timeout=60) as runner:
        yield runner
