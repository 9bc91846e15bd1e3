"""Each search strategy finds the known optimum of a synthetic space (no compiler involved).

The space has three knobs; the cost is a bowl around a known point, with a ripple so that
it is not separable, and a region of illegal candidates (infinite cost, what a failed build
reports). Budgets are a fraction of the space for the guided strategies."""
from __future__ import annotations

import math

import pytest

from tensorkiln.ir.errors import TensorkilnError
from tensorkiln.sdk.strategy import Knob, TuningSpace
from tensorkiln.tune import make_tuner
from tensorkiln.tune.tuners import Tuner

SPACE = TuningSpace((Knob("tile", (1, 2, 4, 8, 16, 32, 64, 128), 1),
                     Knob("block", (8, 16, 24, 32, 48, 64, 96, 128), 8),
                     Knob("order", ("ijk", "ikj", "jik", "kij", "jki", "kji"), "ijk")))
OPTIMUM = {"tile": 16, "block": 48, "order": "kij"}


def cost(config: dict) -> float:
    if config["tile"] * config["block"] > 128 * 64:    # an illegal region: "does not fit"
        return math.inf
    t = math.log2(config["tile"]) - math.log2(OPTIMUM["tile"])
    b = (config["block"] - OPTIMUM["block"]) / 16
    o = SPACE.knobs[2].candidates.index(config["order"]) - SPACE.knobs[2].candidates.index(OPTIMUM["order"])
    return 1.0 + t * t + b * b + 0.5 * abs(o) + 0.2 * abs(t * b) + 0.05 * math.sin(3 * t + b)


def search(tuner: Tuner, budget: int, batch: int = 8) -> dict:
    used = 0
    while used < budget:
        configs = tuner.ask(min(batch, budget - used))
        if not configs:
            break
        tuner.tell([(c, cost(c)) for c in configs])
        used += len(configs)
    return tuner.best()[0]


def test_the_synthetic_optimum_is_unique():
    ranked = sorted(SPACE, key=cost)
    assert ranked[0] == OPTIMUM and cost(ranked[1]) > cost(ranked[0]) + 0.01


@pytest.mark.parametrize("strategy,budget", [("grid", SPACE.size), ("random", SPACE.size), ("anneal", 100),
                                             ("evolutionary", 100), ("optuna", 100), ("model", 100)])
def test_strategy_finds_the_known_optimum(strategy, budget):
    tuner = make_tuner(strategy, SPACE, seed=1)
    assert search(tuner, budget) == OPTIMUM
    if budget < SPACE.size:
        assert len(tuner.measured) <= budget   # found within the budget, not by exhausting the space


@pytest.mark.parametrize("strategy", ["grid", "random", "anneal", "evolutionary", "optuna", "model"])
def test_a_tuner_never_asks_a_config_twice_and_stops_when_the_space_is_done(strategy):
    small = TuningSpace((Knob("a", (1, 2, 3), 1), Knob("b", (4, 5), 4)))
    tuner = make_tuner(strategy, small, seed=0)
    seen = []
    for _ in range(10):
        configs = tuner.ask(4)
        if not configs:
            break
        seen += [tuple(sorted(c.items())) for c in configs]
        tuner.tell([(c, c["a"] * c["b"]) for c in configs])
    assert len(seen) == len(set(seen)) == small.size
    assert tuner.best() == ({"a": 1, "b": 4}, 4)


def test_a_user_tuner_plugs_in_through_the_interface():
    class Descending(Tuner):
        def _propose(self, n):
            return [self.to_point(c) for c in reversed(list(self.space))][:n]

    tuner = Descending(SPACE)
    assert tuner.ask(1) == [{"tile": 128, "block": 128, "order": "kji"}]


def test_unknown_strategy_is_a_clear_error():
    with pytest.raises(TensorkilnError, match="unknown tuning strategy 'genetic'.*evolutionary"):
        make_tuner("genetic", SPACE)


def test_optuna_gp_sampler_runs_or_says_what_it_needs():
    from tensorkiln.tune import OptunaTuner
    try:
        import torch  # noqa: F401
    except ImportError:
        with pytest.raises(TensorkilnError, match="GP sampler needs torch"):
            OptunaTuner(SPACE, sampler="gp")
        return
    assert search(OptunaTuner(SPACE, seed=1, sampler="gp"), 100) == OPTIMUM
