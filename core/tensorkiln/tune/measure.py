"""tune/measure.py: build candidates in a process pool, run them in a child process.

Building (lowering + the target's emitter) is pure computation on plain data, so it runs
in a pool of worker processes; tasks travel there as their JSON `recipe`. Running goes
through the target plugin's own loader and timer (`RuntimeLoader.load`,
`LoadedModule.time_function`) in one child process that the measurer can end: a
candidate that does not finish within `timeout` seconds is a TIMEOUT result and the
child is replaced. Each run:

1. one warm-up call, then three timed single calls; the fastest slower than `early_stop` (3) x
   the best cost so far: stopped early (its time is recorded, nothing more is spent on it);
2. `repeats` batches of enough calls to last `min_seconds` each; the cost is the fastest sample
   (single call or batch mean: on a shared machine the least disturbed one);
3. its outputs are compared with the analytic default's (trial 0): a mismatch is a
   WRONG_OUTPUT result, never a faster answer.

Binaries that hash equal to an earlier trial's are not run again (`Session`, tune/session.py).
"""
from __future__ import annotations

import concurrent.futures as futures
import contextlib
import hashlib
import multiprocessing
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from ..ir.errors import TensorkilnError
from .record import BUILD_ERROR, INVALID, OK, RUN_ERROR, STOPPED_EARLY, TIMEOUT, WRONG_OUTPUT, MeasureResult
from .task import KERNEL_NAME, Task

__all__ = ["MeasureOptions", "Built", "build_candidate", "build_from_recipe", "run_kernel", "Runner",
           "LocalMeasurer"]


@dataclass(frozen=True)
class MeasureOptions:
    repeats: int = 5
    min_seconds: float = 0.01      # per repeat: calls are batched until a batch lasts this long
    timeout: float = 20.0          # seconds for one candidate's whole run (load, warm-up, repeats)
    early_stop: float = 3.0        # stop a candidate whose first timed call is this much slower than the best
    rtol: float = 1e-3             # output check against the default's, relative to the largest value


@dataclass
class Built:
    """A candidate after building: its artifact, or the result saying why there is none."""

    result: MeasureResult
    artifact: object = None
    inputs: int = 0                # how many kernel parameters are inputs
    extra: dict = field(default_factory=dict)


def _digest(artifact) -> str:
    payload = artifact.binary if artifact.binary else artifact.source.encode()
    return hashlib.sha256(payload).hexdigest()[:24]


def build_candidate(task: Task, config: dict) -> Built:
    """Validate, lower and emit one candidate; an illegal or failing one comes back as a result."""
    from ..te.trace import to_json
    from .features import loop_features

    start = time.perf_counter()
    result = MeasureResult(dict(config))
    try:
        result.config = task.validate(config)
    except TensorkilnError as error:
        result.status, result.error = INVALID, str(error)
        return Built(result)
    try:
        kernel, artifact = task.build(result.config)
    except TensorkilnError as error:   # a schedule primitive refused a factor, an emitter limit, ...
        result.status, result.error = (INVALID if type(error).__name__ == "ScheduleError" else BUILD_ERROR), str(error)
        return Built(result)
    except Exception as error:  # noqa: BLE001 - a plugin bug is a negative sample with its reason, not a crash
        result.status, result.error = BUILD_ERROR, f"{type(error).__name__}: {error}"
        return Built(result)
    result.digest = _digest(artifact)
    result.features = loop_features(kernel.func)
    try:
        result.trace = to_json(kernel.trace)
    except TensorkilnError:
        result.trace = ""
    result.build_seconds = time.perf_counter() - start
    return Built(result, artifact, kernel.num_inputs)


def build_from_recipe(recipe: dict, config: dict) -> Built:
    """`build_candidate` in a worker process (or a Dask worker): the task comes from its recipe."""
    return build_candidate(Task.from_recipe(recipe), config)


# ---- running ----------------------------------------------------------------------------------


def run_kernel(artifact, target_text: str, num_inputs: int, inputs, reference, best: float | None,
               options: MeasureOptions) -> dict:
    """Load `artifact` with its target's loader, time it and check its outputs; a dict of plain data.

    With `reference` None the outputs are returned (the default's run makes the reference)."""
    from ..sdk.plugin_manager import registry

    target = registry().target(target_text)
    loader = target.spec.loader
    loaded = loader.load(artifact, target)
    signature = artifact.kernel(KERNEL_NAME)
    args = [loader.to_device(array, target) for array in inputs]
    args += [loader.empty(p.shape, p.dtype, target) for p in signature.params[num_inputs:]]
    # three single calls (after the timer's own warm-up call): on a loaded machine one call may be
    # descheduled, so the fastest of them decides the early stop and the batch size
    probes = loaded.time_function(KERNEL_NAME, args, 1, 3)
    first = min(probes)
    if best is not None and first > options.early_stop * best:
        return {"status": STOPPED_EARLY, "cost": first, "error": f"first calls {first * 1e3:.3f} ms > "
                f"{options.early_stop:g} x best {best * 1e3:.3f} ms"}
    number = max(1, int(options.min_seconds / max(first, 1e-7)))
    costs = loaded.time_function(KERNEL_NAME, args, number, options.repeats)
    outputs = [np.asarray(loader.to_host(a)) for a in args[num_inputs:]]
    # the fastest sample: on a shared, loaded machine it is the least disturbed one
    answer = {"status": OK, "cost": min(*costs, first), "costs": tuple(costs)}
    if reference is None:
        answer["outputs"] = outputs
        return answer
    for index, (got, want) in enumerate(zip(outputs, reference)):
        scale = float(np.max(np.abs(want))) if want.size else 0.0
        if got.shape != want.shape or not np.allclose(got, want, rtol=options.rtol, atol=options.rtol * scale,
                                                      equal_nan=True):
            worst = float(np.max(np.abs(got.astype(np.float64) - want))) if got.shape == want.shape else float("nan")
            return {"status": WRONG_OUTPUT, "cost": None,
                    "error": f"output {index} differs from the default schedule's (max abs error {worst:.3g})"}
    return answer


def _runner_loop(connection) -> None:
    """The child process: receive run requests, answer each with `run_kernel`'s dict."""
    inputs: dict[str, list] = {}
    references: dict[str, list | None] = {}
    while True:
        try:
            request = connection.recv()
        except EOFError:
            return
        if request is None:
            return
        key = request["task"]
        if "inputs" in request:
            inputs[key] = request["inputs"]
        if "reference" in request:
            references[key] = request["reference"]
        try:
            answer = run_kernel(request["artifact"], request["target"], request["num_inputs"], inputs[key],
                                references.get(key), request["best"], request["options"])
        except Exception as error:  # noqa: BLE001 - reported as the candidate's RUN_ERROR
            answer = {"status": RUN_ERROR, "cost": None, "error": f"{type(error).__name__}: {error}",
                      "traceback": traceback.format_exc(limit=3)}
        connection.send(answer)


@contextlib.contextmanager
def _main_script_hidden():
    """Start a spawned process without running the caller's script in it. A spawned child imports the
    parent's __main__ (by its path or module name) before its target runs, so a script calling
    tune.tune at its top level, without an `if __name__ == "__main__":` guard, would run again in the
    child and die there starting its own child: every candidate a RUN_ERROR. The runner needs nothing
    from __main__ (it receives compiled artifacts and arrays), so the child is told of none."""
    main = sys.modules.get("__main__")
    if main is None:
        yield
        return
    saved = {name: main.__dict__[name] for name in ("__file__", "__spec__") if name in main.__dict__}
    main.__dict__.pop("__file__", None)
    main.__spec__ = None   # (multiprocessing reads __spec__ without a default)
    try:
        yield
    finally:
        main.__dict__.pop("__spec__", None)
        main.__dict__.update(saved)


class Runner:
    """One child process that runs candidates; replaced when a run times out or the child dies.
    Runs from several threads take turns (one measurement at a time on a device)."""

    def __init__(self) -> None:
        self._context = multiprocessing.get_context("spawn")   # a fresh interpreter: no inherited threads
        self._process = None
        self._connection = None
        self._sent: set[str] = set()
        self._lock = threading.Lock()

    def _start(self) -> None:
        parent, child = self._context.Pipe()
        self._process = self._context.Process(target=_runner_loop, args=(child,), daemon=True,
                                              name="tensorkiln-tune-runner")
        with _main_script_hidden():
            self._process.start()
        child.close()
        self._connection = parent
        self._sent = set()

    def run(self, task_key: str, target_text: str, built: Built, inputs, reference, best, options) -> dict:
        with self._lock:
            return self._run(task_key, target_text, built, inputs, reference, best, options)

    def _run(self, task_key: str, target_text: str, built: Built, inputs, reference, best, options) -> dict:
        if self._process is None or not self._process.is_alive():
            self._start()
        request = {"task": task_key, "target": target_text, "artifact": built.artifact, "num_inputs": built.inputs,
                   "best": best, "options": options}
        if task_key not in self._sent:
            request["inputs"], request["reference"] = inputs, reference
        start = time.perf_counter()
        try:
            self._connection.send(request)
            self._sent.add(task_key)
            # a fresh child imports the package first: allow for that on top of the candidate's time
            if self._connection.poll(options.timeout + 30.0 * (len(self._sent) == 1)):
                answer = self._connection.recv()
            else:
                self.close()
                answer = {"status": TIMEOUT, "cost": None,
                          "error": f"no answer within {options.timeout:g} s (the run's process was ended)"}
        except (EOFError, BrokenPipeError, ConnectionResetError, OSError) as error:
            self.close()
            answer = {"status": RUN_ERROR, "cost": None, "error": f"the run's process died ({error})"}
        answer["seconds"] = time.perf_counter() - start
        return answer

    def close(self) -> None:
        if self._process is not None and self._connection is not None:
            try:
                self._connection.send(None)
            except (BrokenPipeError, OSError):
                pass
            self._process.join(timeout=1.0)
            if self._process.is_alive():
                self._process.terminate()   # our own child, by its handle
                self._process.join(timeout=5.0)
            self._connection.close()
        self._process = None
        self._connection = None
        self._sent = set()


class LocalMeasurer:
    """Builds in a process pool (tasks with a recipe; in this process otherwise), runs in a `Runner`."""

    def __init__(self, builders: int | None = None, options: MeasureOptions | None = None,
                 runner: Runner | None = None) -> None:
        self.options = options or MeasureOptions()
        self.builders = builders if builders is not None else max(1, min(4, os.cpu_count() or 1))
        self._pool = None
        self._own_runner = runner is None
        self._runner = runner or Runner()   # a shared one (a Dask worker's) stays open on close()

    def build(self, task: Task, configs: list[dict]) -> list[Built]:
        if task.recipe is None or self.builders <= 1 or len(configs) <= 1:
            return [build_candidate(task, config) for config in configs]
        if self._pool is None:
            self._pool = futures.ProcessPoolExecutor(self.builders, mp_context=multiprocessing.get_context("spawn"))
        jobs = [self._pool.submit(build_from_recipe, task.recipe, config) for config in configs]
        built = []
        for config, job in zip(configs, jobs):
            try:
                built.append(job.result())
            except Exception as error:  # noqa: BLE001 - a dead worker: this candidate is a build error
                built.append(Built(MeasureResult(dict(config), BUILD_ERROR, error=f"{type(error).__name__}: {error}")))
                if self._pool is not None:   # a broken pool: start a new one for the next batch
                    self._pool.shutdown(cancel_futures=True)
                    self._pool = None
        return built

    def run(self, task: Task, built: Built, inputs, reference, best: float | None) -> dict:
        return self._runner.run(task.key, str(task.target), built, inputs, reference, best, self.options)

    def close(self) -> None:
        if self._own_runner:
            self._runner.close()
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
