"""tune/cost_model.py: predict which candidates are fast, so that few need measuring.

Two models, used one after the other (the model proposes, measurement decides):

- `analytic_cost(features)`: a roofline/footprint estimate from a lowered kernel's loop
  features (tune/features.py): its work spread over the parallel iterations the cores
  actually get (load imbalance counts), divided by its vector width, plus a penalty
  when one parallel iteration's footprint overflows the per-core cache, plus a cost per
  micro-kernel call. It ranks candidates before any has been measured.
- `GradientBoostedModel`: LightGBM trees on knob features plus the workload's shape,
  fitted on log(cost / best cost of that workload), so records of similar workloads
  (same implementation, other shapes) in the database warm-start it. It takes over once
  `min_samples` measurements (own or warm-start) exist.

`ModelGuidedTuner` is the `Tuner` that uses them: each batch, it scores a pool of
unmeasured candidates and proposes the best few, plus a random share (`epsilon`) so
that a wrong model is corrected by measurements.
"""
from __future__ import annotations

import math
import os
from typing import Callable, Sequence

import numpy as np

from ..sdk.strategy import TuningSpace
from .features import knob_features
from .tuners import Tuner

__all__ = ["analytic_cost", "GradientBoostedModel", "ModelGuidedTuner", "workload_features"]

CACHE_BYTES = 1 << 20          # per-core cache a parallel iteration's footprint should fit in
CALL_OVERHEAD = 50.0           # flops-equivalent cost of one micro-kernel call (argument setup, loads)


def analytic_cost(features: dict, cores: int | None = None) -> float:
    """Estimated relative time of a kernel (only the order between candidates means anything)."""
    cores = cores or os.cpu_count() or 1
    parallel = max(1.0, features.get("parallel_extent", 1.0))
    waves = math.ceil(parallel / cores)
    efficiency = parallel / (waves * cores) if parallel > 1 else 1.0 / cores
    lanes = max(1.0, features.get("vector_lanes", 1.0))
    work = max(1.0, features.get("flops", 1.0)) / lanes + CALL_OVERHEAD * features.get("intrinsic_calls", 0.0)
    compute = work / (cores * efficiency)
    spill = max(1.0, features.get("footprint_bytes", 0.0) / CACHE_BYTES)
    return compute * spill ** 0.5


def workload_features(task) -> list[float]:
    """log2 of every input dimension (up to 12), so the trees tell workloads apart."""
    dims = [math.log2(max(1, int(d))) for p in task.function.params for d in p.checked_type.shape][:12]
    return dims + [0.0] * (12 - len(dims))


class GradientBoostedModel:
    """LightGBM regression of log relative cost on features (lower is better)."""

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._model = None

    def fit(self, features: Sequence[Sequence[float]], targets: Sequence[float]) -> None:
        import lightgbm   # its native API: the scikit-learn wrapper would need scikit-learn too
        x, y = np.asarray(features, dtype=np.float64), np.asarray(targets, dtype=np.float64)
        parameters = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15, "min_data_in_leaf": 2,
                      "min_data_in_bin": 1, "bagging_fraction": 0.9, "bagging_freq": 1, "seed": self.seed,
                      "num_threads": 1, "verbose": -1}
        self._model = lightgbm.train(parameters, lightgbm.Dataset(x, y, params={"verbose": -1}), num_boost_round=80)

    def predict(self, features: Sequence[Sequence[float]]) -> np.ndarray:
        if self._model is None:
            raise RuntimeError("fit the model first")
        return self._model.predict(np.asarray(features, dtype=np.float64))


class ModelGuidedTuner(Tuner):
    """Proposes the candidates a cost model ranks best (analytic first, then learned)."""

    name = "model"

    def __init__(self, space: TuningSpace, seed: int = 0, analytic: Callable[[dict], float] | None = None,
                 workload: Sequence[float] = (), warm_start: Sequence[tuple[dict, float]] = (),
                 min_samples: int = 8, epsilon: float = 0.15, pool: int = 512, analytic_pool: int = 24) -> None:
        super().__init__(space, seed)
        self.analytic = analytic
        self.workload = list(workload)
        # (features, log relative cost) of similar workloads' records: they warm-start the trees
        self.warm = [(f, t) for f, t in warm_start]
        self.min_samples = min_samples
        self.epsilon = epsilon
        self.pool = pool
        self.analytic_pool = analytic_pool
        self.model = GradientBoostedModel(seed)
        self.used = "random"          # which model ranked the last batch (reports)

    def features(self, point: tuple) -> list[float]:
        return knob_features(self.space, self.to_config(point)) + self.workload

    def _candidates(self) -> list[tuple]:
        if self.space.size <= 4 * self.pool:
            rest = [p for p in (self.to_point(c) for c in self.space) if p not in self.asked]
        else:
            top = sorted((p for p, c in self.measured.items() if math.isfinite(c)), key=self.measured.get)[:8]
            rest = {self.random_point() for _ in range(self.pool // 2)}
            for point in top:
                for _ in range(self.pool // 16):
                    rest.add(self._neighbour(point))
            rest = [p for p in rest if p not in self.asked]
        self.rng.shuffle(rest)
        return rest[: self.pool]

    def _training_set(self) -> tuple[list, list]:
        finite = [c for c in self.measured.values() if math.isfinite(c)]
        if not finite:
            return [], []
        best, worst = min(finite), max(finite)
        x = [f for f, _ in self.warm]
        y = [t for _, t in self.warm]
        for point, cost in self.measured.items():   # a failed candidate counts as twice the worst
            x.append(self.features(point))
            y.append(math.log((cost if math.isfinite(cost) else 2 * worst) / best))
        return x, y

    def _propose(self, n: int) -> list[tuple]:
        pool = self._candidates()
        if not pool:
            return []
        explore = max(0, int(round(n * self.epsilon))) if len(pool) > n else 0
        exploit = n - explore
        x, y = self._training_set()
        if len(y) >= self.min_samples and len(set(np.round(y, 6))) > 1:
            self.model.fit(x, y)
            scores = self.model.predict([self.features(p) for p in pool])
            ranked = [pool[i] for i in np.argsort(scores, kind="stable")]
            self.used = "gbt"
        elif self.analytic is not None:
            sample = pool[: self.analytic_pool]
            ranked = sorted(sample, key=lambda p: self.analytic(self.to_config(p))) + pool[self.analytic_pool:]
            self.used = "analytic"
        else:
            ranked = pool
            self.used = "random"
        chosen = ranked[:exploit]
        rest = ranked[exploit:]
        self.rng.shuffle(rest)
        return chosen + rest[:explore]
