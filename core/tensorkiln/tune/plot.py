"""tune/plot.py: the tuning-curve picture (matplotlib, PNG)."""
from __future__ import annotations

import math

__all__ = ["plot_curves"]


def plot_curves(result, path) -> None:
    """Left: each task's best time relative to its default against its trials. Right: the
    weighted total (sum of weight x best time, the model's estimated kernel time) against seconds."""
    import matplotlib
    matplotlib.use("Agg")   # files only, no display
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    events = []
    for state in result.states:
        default = state.default.cost if state.default is not None and state.default.valid else None
        if not state.curve or default is None:
            continue
        trials = [trial + 1 for trial, _, _ in state.curve]
        left.plot(trials, [best / default for _, _, best in state.curve], drawstyle="steps-post", linewidth=1,
                  label=state.task.name if len(result.states) <= 8 else None)
        events += [(seconds, id(state), best * state.task.weight) for _, seconds, best in state.curve]
    left.set_xlabel("trials of the task")
    left.set_ylabel("best time / default time")
    left.set_title("per task")
    if len(result.states) <= 8:
        left.legend(fontsize=7)
    current: dict[int, float] = {}
    xs, ys = [], []
    for seconds, key, weighted in sorted(events):
        if math.isfinite(weighted):
            current[key] = weighted
        xs.append(seconds)
        ys.append(sum(current.values()) * 1e3)
    right.plot(xs, ys, drawstyle="steps-post")
    right.set_xlabel("seconds of tuning")
    right.set_ylabel("sum of weight x best time (ms)")
    right.set_title("all tasks")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
