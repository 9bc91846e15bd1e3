"""tune/tuners.py: search strategies behind one `Tuner` interface (ask / tell).

    tuner = tune.EvolutionaryTuner(task.space, seed=0)
    configs = tuner.ask(8)             # up to 8 configs never asked before ([] once the space is done)
    tuner.tell(results)                # MeasureResult objects, or (config, cost) pairs; inf = no cost

A user's own strategy subclasses `Tuner` and implements `_propose(n)`; `ask` removes
configs already asked. Every tuner works on candidate indices (one per knob), so it
needs no knowledge of what a knob means. Costs are minimised.
"""
from __future__ import annotations

import math
import random
from typing import Iterable

from ..ir.errors import TensorkilnError
from ..sdk.strategy import TuningSpace

__all__ = ["Tuner", "RandomTuner", "GridTuner", "AnnealingTuner", "EvolutionaryTuner", "OptunaTuner",
           "make_tuner", "TUNERS"]


class Tuner:
    """Base: bookkeeping of what was asked and measured; subclasses propose index tuples."""

    name = "base"

    def __init__(self, space: TuningSpace, seed: int = 0) -> None:
        self.space = space
        self.rng = random.Random(seed)
        self.sizes = [len(k.candidates) for k in space.knobs]
        self.asked: set[tuple] = set()
        self.measured: dict[tuple, float] = {}

    # -- conversions -----------------------------------------------------------------------

    def to_config(self, point: tuple) -> dict:
        return {k.name: k.candidates[i] for k, i in zip(self.space.knobs, point)}

    def to_point(self, config: dict) -> tuple:
        return tuple(k.candidates.index(config.get(k.name, k.default)) if config.get(k.name, k.default)
                     in k.candidates else 0 for k in self.space.knobs)

    def random_point(self) -> tuple:
        return tuple(self.rng.randrange(size) for size in self.sizes)

    @property
    def exhausted(self) -> bool:
        return len(self.asked) >= self.space.size

    # -- the interface ---------------------------------------------------------------------

    def ask(self, n: int) -> list[dict]:
        """Up to `n` configs not asked before, the tuner's choice first."""
        chosen: list[tuple] = []
        for point in self._propose(n):
            if len(chosen) >= n:
                break
            if point not in self.asked:
                self.asked.add(point)
                chosen.append(point)
        attempts = 0
        while len(chosen) < n and not self.exhausted and attempts < 50 * n:   # top up with random points
            attempts += 1
            point = self.random_point() if self.space.size > 4 * n + len(self.asked) else self._first_unasked()
            if point is not None and point not in self.asked:
                self.asked.add(point)
                chosen.append(point)
        return [self.to_config(p) for p in chosen]

    def tell(self, results: Iterable) -> None:
        for item in results:
            config, cost = (item.config, item.score) if hasattr(item, "score") else item
            point = self.to_point(config)
            self.asked.add(point)
            self.measured[point] = min(cost, self.measured.get(point, math.inf))
            self._observe(point, cost)

    def best(self) -> tuple[dict, float] | None:
        if not self.measured:
            return None
        point = min(self.measured, key=self.measured.get)
        return self.to_config(point), self.measured[point]

    # -- for subclasses ----------------------------------------------------------------------

    def _propose(self, n: int) -> list[tuple]:
        return []

    def _observe(self, point: tuple, cost: float) -> None:
        pass

    def _first_unasked(self) -> tuple | None:
        for config in self.space:
            point = self.to_point(config)
            if point not in self.asked:
                return point
        return None

    def _neighbour(self, point: tuple) -> tuple:
        """One knob moved to an adjacent candidate (or a random one, a quarter of the time)."""
        movable = [i for i, size in enumerate(self.sizes) if size > 1]
        if not movable:
            return point
        index = self.rng.choice(movable)
        values = list(point)
        if self.rng.random() < 0.25:
            values[index] = self.rng.randrange(self.sizes[index])
        else:
            values[index] = min(max(values[index] + self.rng.choice((-1, 1)), 0), self.sizes[index] - 1)
        return tuple(values)


class RandomTuner(Tuner):
    name = "random"

    def _propose(self, n: int) -> list[tuple]:
        if self.space.size <= 4 * n + len(self.asked):   # small space: a shuffled list of the rest
            rest = [p for p in (self.to_point(c) for c in self.space) if p not in self.asked]
            self.rng.shuffle(rest)
            return rest[:n]
        return [self.random_point() for _ in range(2 * n)]


class GridTuner(Tuner):
    """Every config in grid order (the space's own order)."""

    name = "grid"

    def _propose(self, n: int) -> list[tuple]:
        found = []
        for config in self.space:
            point = self.to_point(config)
            if point not in self.asked:
                found.append(point)
                if len(found) == n:
                    break
        return found


class AnnealingTuner(Tuner):
    """Simulated annealing: walk from the current point to neighbours, accepting a worse one with
    probability exp(-(relative loss) / temperature); the temperature cools with every measurement."""

    name = "anneal"

    def __init__(self, space: TuningSpace, seed: int = 0, temperature: float = 1.0, cooling: float = 0.95) -> None:
        super().__init__(space, seed)
        self.temperature = temperature
        self.cooling = cooling
        self.current: tuple | None = None
        self.current_cost = math.inf

    def _propose(self, n: int) -> list[tuple]:
        start = self.current if self.current is not None else self.random_point()
        points, walker = [], start
        for _ in range(8 * n):
            walker = self._neighbour(walker if self.rng.random() < 0.5 else start)
            if walker not in self.asked and walker not in points:
                points.append(walker)
            if len(points) == n:
                break
        return points

    def _observe(self, point: tuple, cost: float) -> None:
        if self.current is None or cost < self.current_cost:
            self.current, self.current_cost = point, cost
        elif math.isfinite(cost) and math.isfinite(self.current_cost):
            loss = (cost - self.current_cost) / max(self.current_cost, 1e-12)
            if self.rng.random() < math.exp(-loss / max(self.temperature, 1e-6)):
                self.current, self.current_cost = point, cost
        self.temperature *= self.cooling


class EvolutionaryTuner(Tuner):
    """A genetic search: parents drawn from the best measured points (tournament), uniform
    crossover, then mutation of each knob with probability `mutation`."""

    name = "evolutionary"

    def __init__(self, space: TuningSpace, seed: int = 0, population: int = 16, mutation: float = 0.2) -> None:
        super().__init__(space, seed)
        self.population = population
        self.mutation = mutation

    def _parents(self) -> list[tuple]:
        ranked = sorted((p for p, c in self.measured.items() if math.isfinite(c)), key=self.measured.get)
        return ranked[: self.population]

    def _child(self, parents: list[tuple]) -> tuple:
        def pick():   # tournament of two
            a, b = self.rng.choice(parents), self.rng.choice(parents)
            return a if self.measured[a] <= self.measured[b] else b
        mother, father = pick(), pick()
        genes = [m if self.rng.random() < 0.5 else f for m, f in zip(mother, father)]
        for index, size in enumerate(self.sizes):
            if size > 1 and self.rng.random() < self.mutation:
                genes[index] = self._neighbour(tuple(genes))[index] if self.rng.random() < 0.5 else self.rng.randrange(size)
        return tuple(genes)

    def _propose(self, n: int) -> list[tuple]:
        parents = self._parents()
        if len(parents) < 2:
            return [self.random_point() for _ in range(n)]
        points = []
        for _ in range(20 * n):
            child = self._child(parents)
            if child not in self.asked and child not in points:
                points.append(child)
            if len(points) == n:
                break
        return points


class OptunaTuner(Tuner):
    """Bayesian optimisation through Optuna's ask/tell API: "tpe" (default) or "gp" (Optuna's
    Gaussian-process sampler; it needs torch). Each knob is an integer parameter over its
    candidate indices, so the sampler sees the candidates' order."""

    name = "optuna"

    def __init__(self, space: TuningSpace, seed: int = 0, sampler: str = "tpe") -> None:
        super().__init__(space, seed)
        try:
            import optuna
        except ImportError:
            raise TensorkilnError("the optuna strategy needs optuna: pip install 'tensorkiln[tune]'") from None
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sampler == "tpe":
            chosen = optuna.samplers.TPESampler(seed=seed, n_startup_trials=min(10, max(2, space.size // 8)))
        elif sampler == "gp":
            try:
                import torch  # noqa: F401 - GPSampler's dependency
            except ImportError:
                raise TensorkilnError("Optuna's GP sampler needs torch (pip install torch); use sampler='tpe'") from None
            chosen = optuna.samplers.GPSampler(seed=seed)
        else:
            raise TensorkilnError(f"unknown Optuna sampler {sampler!r}; use 'tpe' or 'gp'")
        self._optuna = optuna
        self.study = optuna.create_study(direction="minimize", sampler=chosen)
        self.distributions = {f"k{i}": optuna.distributions.IntDistribution(0, size - 1)
                              for i, size in enumerate(self.sizes)}
        self._pending: dict[tuple, list] = {}

    def _propose(self, n: int) -> list[tuple]:
        points = []
        for _ in range(3 * n):
            trial = self.study.ask(self.distributions)
            point = tuple(trial.params[f"k{i}"] for i in range(len(self.sizes)))
            if point in self.measured:   # asked before: Optuna learns its known cost at once
                self.study.tell(trial, self._finite(self.measured[point]))
                continue
            if point in self.asked or point in points:
                self.study.tell(trial, state=self._optuna.trial.TrialState.PRUNED)
                continue
            self._pending.setdefault(point, []).append(trial)
            points.append(point)
            if len(points) == n:
                break
        return points

    @staticmethod
    def _finite(cost: float) -> float:
        return cost if math.isfinite(cost) else 1e9   # a failed candidate: worse than anything measured

    def _observe(self, point: tuple, cost: float) -> None:
        trials = self._pending.pop(point, [])
        if not trials:   # measured without being asked here (trial 0, a warm start): tell it as a new trial
            trial = self._optuna.trial.create_trial(
                params={f"k{i}": v for i, v in enumerate(point)}, distributions=self.distributions,
                value=self._finite(cost))
            self.study.add_trial(trial)
            return
        for trial in trials:
            self.study.tell(trial, self._finite(cost))


TUNERS = {"random": RandomTuner, "grid": GridTuner, "anneal": AnnealingTuner, "evolutionary": EvolutionaryTuner,
          "optuna": OptunaTuner}


def make_tuner(name: str, space: TuningSpace, seed: int = 0, **options) -> Tuner:
    """A tuner by name: random, grid, anneal, evolutionary, optuna, model (cost-model guided)."""
    if name == "model":
        from .cost_model import ModelGuidedTuner
        return ModelGuidedTuner(space, seed=seed, **options)
    if name not in TUNERS:
        raise TensorkilnError(f"unknown tuning strategy {name!r}; use one of {sorted([*TUNERS, 'model'])}")
    return TUNERS[name](space, seed=seed)
