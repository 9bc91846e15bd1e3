"""tests/fuzz/harness.py: run fuzz cases in a worker subprocess, classify each outcome, keep failures.

    with FuzzRunner(timeout=60) as runner:
        outcome = runner.run(case.model, case.input_seed)   # Outcome(kind, detail, is_failure)

The worker (worker.py) handles many cases; when it dies (a signal, an exit) or a
case runs past `timeout` seconds, the harness records a crash or a hang at the
stage the worker last announced, and starts a fresh worker for the next case.
pytest itself never runs a case.

Every case ends in one class:

- "rejected:<ErrorType>": tensorkiln raised a TensorkilnError subclass with a message.
- "match": tensorkiln and onnxruntime both ran it, and the outputs match.
- documented refusals ("refused:...", REFUSALS says why each is acceptable).
- failures: "exception:<Type>" (anything but a TensorkilnError, or an empty message),
  "crash:<stage>", "hang:<stage>", "mismatch" (outputs differ from onnxruntime),
  "accepted_invalid" (onnxruntime refuses to load a model tensorkiln compiled and ran),
  "run_diverges" (onnxruntime refuses the inputs at run time, tensorkiln returns a result).

A failing case is saved in corpus/ as <class>-<hash>.onnx with a .json of what happened;
test_fuzz.py replays every corpus case.
"""
from __future__ import annotations

import base64
import hashlib
import json
import os
import select
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = ["FuzzRunner", "Outcome", "classify", "save_case", "CORPUS", "REFUSALS"]

CORPUS = Path(__file__).parent / "corpus"
REPOSITORY = Path(__file__).resolve().parents[2]

# Outcomes that are neither an error nor a comparison, and why they are acceptable.
REFUSALS = {
    "refused:ort_not_implemented": "onnxruntime has no kernel for this op/dtype (NOT_IMPLEMENTED), so "
                                   "there is nothing to compare tensorkiln's result with",
    "refused:ort_opset_policy": "the model also imports a version of a domain onnxruntime owns (com.microsoft) "
                                "that onnxruntime does not release; the model uses no op of that domain, so "
                                "tensorkiln imports it and there is nothing to compare with",
    "refused:nonfinite_weights": "a constant of the model is inf or NaN, and the outputs differ only where "
                                 "tensorkiln gives NaN or inf: IEEE arithmetic on inf depends on which products "
                                 "an implementation skips. tensorkiln multiplies the padded zeros too (0 * inf = "
                                 "NaN), as onnx's ReferenceEvaluator does; onnxruntime's conv skips them "
                                 "(corpus/mismatch-f53a01f3625e)",
}


@dataclass
class Outcome:
    kind: str          # the class, e.g. "rejected:ShapeError", "match", "crash:compile"
    detail: str        # the message, the mismatch, the traceback
    is_failure: bool
    result: dict


def classify(result: dict) -> Outcome:
    """The class of one worker result (see the module docstring)."""
    if result["tk"] == "error":
        if not result["message"].strip():
            return Outcome(f"exception:{result['type']}(empty message)", "", True, result)
        return Outcome(f"rejected:{result['type']}", result["message"], False, result)
    if result["tk"] == "exception":
        return Outcome(f"exception:{result['type']}", result.get("traceback", result["message"]), True, result)
    if result["ort"] == "ok":
        if result["mismatch"] and result.get("nonfinite_only") and result.get("nonfinite_constants"):
            return Outcome("refused:nonfinite_weights", result["mismatch"], False, result)
        if result["mismatch"]:
            return Outcome("mismatch", result["mismatch"], True, result)
        return Outcome("match", "", False, result)
    if "NOT_IMPLEMENTED" in result["ort_message"]:
        return Outcome("refused:ort_not_implemented", result["ort_message"], False, result)
    if "ValidateOpsetForDomain" in result["ort_message"] and "com.microsoft" in result.get("domains", []):
        return Outcome("refused:ort_opset_policy", result["ort_message"], False, result)
    if result["ort"] == "load_error":
        return Outcome("accepted_invalid", result["ort_message"], True, result)
    return Outcome("run_diverges", result["ort_message"], True, result)


class FuzzRunner:
    """A worker subprocess (restarted after a crash or a hang) and the per-case timeout."""

    def __init__(self, timeout: float = 60.0, startup_timeout: float = 120.0) -> None:
        self.timeout, self.startup_timeout = timeout, startup_timeout
        self.process: subprocess.Popen | None = None
        self._buffer = b""
        self.restarts = 0

    def __enter__(self) -> "FuzzRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self.process is not None:
            try:
                self.process.stdin.close()
                self.process.wait(timeout=10)
            except Exception:
                self.process.kill()
                self.process.wait()
            self.process = None

    def _start(self) -> None:
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPOSITORY), os.environ.get("PYTHONPATH")])),
               "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "tests.fuzz.worker"], cwd=REPOSITORY, env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._buffer = b""
        message = self._read(self.startup_timeout)
        if message is None or not message.get("ready"):
            self._kill()
            raise RuntimeError("the fuzz worker did not start (run `python -m tests.fuzz.worker` to see why)")

    def _kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None

    def _read(self, timeout: float) -> dict | None:
        """The next message, or None when the worker died or `timeout` passed."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self.process.stdout], [], [], left)
            if ready:
                chunk = os.read(self.process.stdout.fileno(), 1 << 20)
                if not chunk:
                    return None
                self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return json.loads(line)

    def run(self, model: bytes, input_seed: int = 0) -> Outcome:
        """Run one case; a crash or a hang of the worker becomes an Outcome, never an exception here."""
        if self.process is None or self.process.poll() is not None:
            self._start()
        request = json.dumps({"model": base64.b64encode(model).decode(), "input_seed": input_seed}) + "\n"
        self.process.stdin.write(request.encode())
        self.process.stdin.flush()
        stage, deadline = "start", time.monotonic() + self.timeout
        while True:
            message = self._read(max(deadline - time.monotonic(), 0.0))
            if message is None:
                alive = self.process.poll() is None
                self._kill()
                self.restarts += 1
                if alive:
                    return Outcome(f"hang:{stage}", f"no result after {self.timeout} s at stage {stage}", True,
                                   {"stage": stage})
                code = self.process.returncode if self.process else None
                return Outcome(f"crash:{stage}", f"the worker died at stage {stage}", True,
                               {"stage": stage, "returncode": code})
            if "stage" in message:
                stage = message["stage"]
            elif "result" in message:
                return classify(message["result"])


def save_case(model: bytes, outcome: Outcome, mutations: list[str], seed: str, input_seed: int,
              corpus: Path = CORPUS) -> Path:
    """Save a failing case as corpus/<class>-<hash>.onnx plus a .json of what happened."""
    corpus.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(model).hexdigest()[:12]
    stem = f"{outcome.kind.replace(':', '-').replace('(', '').replace(')', '').replace(' ', '_')}-{digest}"
    path = corpus / f"{stem}.onnx"
    path.write_bytes(model)
    record = {"outcome": outcome.kind, "detail": outcome.detail[-3000:], "seed": seed, "mutations": mutations,
              "input_seed": input_seed, "stage": outcome.result.get("stage")}
    (corpus / f"{stem}.json").write_text(json.dumps(record, indent=1) + "\n")
    return path
