"""tune/distributed.py: builders and runners as Dask workers.

    from dask.distributed import Client
    measurer = tune.distributed.DaskMeasurer(Client("tcp://scheduler:8786"))
    tune.tune(tasks, trials=512, measurer=measurer)        # or: tensorkiln tune ... --scheduler ADDRESS

Builds (lowering + the target's emitter) run on any worker. Runs go only to workers that
advertise the resource `measure:<target name>` (a worker attached to the device):

    dask scheduler                                                   # one machine
    dask worker tcp://scheduler:8786 --nworkers 4                    # build machines
    dask worker tcp://scheduler:8786 --nworkers 1 --resources "measure:cpu_llvm=1"   # the device host

A run on a measuring worker goes through the same child-process `Runner` as a local run
(time-outs end the child, not the worker), and one measuring worker runs one candidate at a
time (its resource is 1). A task lost with its worker is re-run on another (`retries`).
Tasks travel as their JSON recipe (a model file path must be readable on the workers).
Optuna, when chosen, stays in the client process: Dask only builds and measures.
"""
from __future__ import annotations

import multiprocessing

from ..ir.errors import TensorkilnError
from .measure import Built, MeasureOptions, Runner, build_from_recipe, run_kernel
from .record import BUILD_ERROR, RUN_ERROR, MeasureResult

__all__ = ["DaskMeasurer", "measure_resource", "local_cluster", "worker_runner"]

_WORKER_RUNNER: Runner | None = None


def measure_resource(target) -> str:
    """The Dask resource a worker attached to `target`'s device advertises."""
    return f"measure:{getattr(target, 'name', str(target).split()[0])}"


def _run_on_worker(task_key: str, target_text: str, built: Built, inputs, reference, best, options) -> dict:
    """On a measuring worker: run in a child process (time-outs), or in the worker itself when the
    worker is a daemonic process that may not start children."""
    if multiprocessing.current_process().daemon:
        try:
            return run_kernel(built.artifact, target_text, built.inputs, inputs, reference, best, options)
        except Exception as error:  # noqa: BLE001 - the candidate's RUN_ERROR
            return {"status": RUN_ERROR, "cost": None, "error": f"{type(error).__name__}: {error}"}
    return worker_runner().run(task_key, target_text, built, inputs, reference, best, options)


def worker_runner() -> Runner:
    """This process's measuring child (one per worker process; runs from its threads take turns)."""
    global _WORKER_RUNNER
    if _WORKER_RUNNER is None:
        _WORKER_RUNNER = Runner()
    return _WORKER_RUNNER


class DaskMeasurer:
    """The `LocalMeasurer` interface (build, run, close) on a Dask cluster."""

    def __init__(self, client, options: MeasureOptions | None = None, retries: int = 2) -> None:
        if isinstance(client, str):
            from distributed import Client
            client = Client(client)
        self.client = client
        self.options = options or MeasureOptions()
        self.retries = retries
        self._scattered: dict[str, tuple] = {}

    def _require_measuring_worker(self, target) -> str:
        resource = measure_resource(target)
        workers = self.client.scheduler_info().get("workers", {})
        if not any(resource in (w.get("resources") or {}) for w in workers.values()):
            raise TensorkilnError(f"no Dask worker advertises the resource {resource!r}; start one on the device "
                                  f"host with: dask worker ADDRESS --resources \"{resource}=1\"")
        return resource

    def build(self, task, configs: list[dict]) -> list[Built]:
        if task.recipe is None:
            raise TensorkilnError(f"task {task.name} has no recipe: Dask workers rebuild tasks from one "
                                  "(make it with Task.from_op or extract_tasks on a model file path)")
        jobs = self.client.map(build_from_recipe, [task.recipe] * len(configs), configs, pure=False,
                               retries=self.retries)
        built = []
        for config, job in zip(configs, jobs):
            try:
                built.append(job.result())
            except Exception as error:  # noqa: BLE001 - lost beyond its retries: a negative sample
                built.append(Built(MeasureResult(dict(config), BUILD_ERROR, error=f"{type(error).__name__}: {error}")))
        return built

    def run(self, task, built: Built, inputs, reference, best) -> dict:
        resource = self._require_measuring_worker(task.target)
        if task.key not in self._scattered:   # the inputs and reference travel to the workers once
            self._scattered[task.key] = (self.client.scatter(inputs, broadcast=True),
                                         None if reference is None else self.client.scatter(reference, broadcast=True))
        elif reference is not None and self._scattered[task.key][1] is None:
            self._scattered[task.key] = (self._scattered[task.key][0], self.client.scatter(reference, broadcast=True))
        inputs_future, reference_future = self._scattered[task.key]
        job = self.client.submit(_run_on_worker, task.key, str(task.target), built, inputs_future, reference_future,
                                 best, self.options, resources={resource: 1}, pure=False, retries=self.retries)
        try:
            return job.result()
        except Exception as error:  # noqa: BLE001
            return {"status": RUN_ERROR, "cost": None, "error": f"{type(error).__name__}: {error}"}

    def close(self) -> None:
        self._scattered.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def local_cluster(target, workers: int = 2, measuring: bool = True):
    """A `distributed.LocalCluster` on this machine whose workers build, and (with `measuring`) also
    advertise `measure:<target>`. Worker processes are not daemonic so their runs get a child."""
    import dask
    from distributed import LocalCluster

    resources = {measure_resource(target): 1} if measuring else {}
    with dask.config.set({"distributed.worker.daemon": False}):
        return LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, resources=resources,
                            dashboard_address=None)
