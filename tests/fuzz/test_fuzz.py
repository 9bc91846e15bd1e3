"""The fuzzing suite: mutated ONNX models through from_onnx, tk.compile(cpu_llvm) and a run,
compared with onnxruntime (see harness.py for the outcome classes).

test_generated_cases runs CI_CASES derandomized cases (conftest.py), or as many as
--fuzz-cases asks; every failure is saved to corpus/ and the test fails listing them.
test_corpus_case replays every saved case: each must now end in an accepted class, except
those whose .json carries an "open" note (a defect owned elsewhere, still failing: xfail).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from .harness import CORPUS, save_case
from .mutate import fuzz_cases

_SIGNATURE_LIMIT = 3  # corpus cases saved per (class, first line of the message)


def test_generated_cases(fuzz_config, fuzz_runner):
    counts: Counter = Counter()
    failures: list[str] = []
    saved_per_signature: Counter = Counter()
    start = time.monotonic()

    @settings(max_examples=fuzz_config["cases"], deadline=None, database=None, phases=[Phase.generate],
              derandomize=fuzz_config["seed"] is None, suppress_health_check=list(HealthCheck))
    @given(case=fuzz_cases())
    def one_case(case):
        outcome = fuzz_runner.run(case.model, case.input_seed)
        counts[outcome.kind] += 1
        if outcome.is_failure:
            signature = (outcome.kind, (outcome.detail.strip().splitlines() or [""])[-1][:120])
            saved_per_signature[signature] += 1
            if saved_per_signature[signature] <= _SIGNATURE_LIMIT:
                path = save_case(case.model, outcome, case.mutations, case.seed, case.input_seed)
                line = f"{path.name}: {outcome.kind}: {signature[1]}"
                if line not in failures:  # hypothesis may generate the same model again
                    failures.append(line)

    if fuzz_config["seed"] is not None:
        one_case = hypothesis_seed(fuzz_config["seed"])(one_case)
    one_case()
    figures = {"cases": sum(counts.values()), "seconds": round(time.monotonic() - start, 1),
               "worker_restarts": fuzz_runner.restarts, "outcomes": dict(sorted(counts.items())),
               "failures_saved": failures}
    print(json.dumps(figures, indent=1))
    if fuzz_config["report"]:
        Path(fuzz_config["report"]).write_text(json.dumps(figures, indent=1) + "\n")
    assert not failures, "fuzz cases failed (saved in tests/fuzz/corpus/):\n  " + "\n  ".join(failures)


def _corpus_cases() -> list[Path]:
    return sorted(CORPUS.glob("*.onnx"))


@pytest.mark.parametrize("path", _corpus_cases(), ids=lambda p: p.stem)
def test_corpus_case(path, fuzz_runner):
    record = json.loads(path.with_suffix(".json").read_text())
    outcome = fuzz_runner.run(path.read_bytes(), record.get("input_seed", 0))
    if outcome.is_failure and record.get("open"):  # a known defect outside the frontend, named in the record
        pytest.xfail(f"open: {record['open']}")
    assert not outcome.is_failure, f"{path.name} (saved as {record['outcome']}): {outcome.kind}: {outcome.detail}"
