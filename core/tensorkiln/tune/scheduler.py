"""tune/scheduler.py: which task of a model gets the next batch of trials.

TVM's gradient task scheduler (Zheng et al., Ansor, section 6): the objective is the
model's latency, sum over tasks of weight x best cost. A task's expected gain from more
trials mixes what its last `window` trials achieved (backward gradient) with an
optimistic guess that the next trials gain what the average trial gained so far
(forward), times its weight. Every task first gets one batch (round robin); then the
task with the largest expected gain goes next. A task whose space is exhausted leaves.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

__all__ = ["GradientScheduler", "RoundRobinScheduler", "TaskProgress"]


@dataclass
class TaskProgress:
    weight: float
    best_by_trial: list[float] = field(default_factory=list)   # best cost after each trial
    done: bool = False

    @property
    def trials(self) -> int:
        return len(self.best_by_trial)

    @property
    def best(self) -> float:
        return self.best_by_trial[-1] if self.best_by_trial else math.inf


class RoundRobinScheduler:
    def __init__(self, progress: list[TaskProgress]) -> None:
        self.progress = progress
        self._next = 0

    def next_task(self) -> int | None:
        for offset in range(len(self.progress)):
            index = (self._next + offset) % len(self.progress)
            if not self.progress[index].done:
                self._next = index + 1
                return index
        return None


class GradientScheduler(RoundRobinScheduler):
    def __init__(self, progress: list[TaskProgress], window: int = 8, alpha: float = 0.2) -> None:
        super().__init__(progress)
        self.window = window
        self.alpha = alpha

    def gain(self, task: TaskProgress) -> float:
        history = task.best_by_trial
        if not history or not math.isfinite(history[-1]):
            return math.inf
        t = len(history)
        earlier = history[max(0, t - 1 - self.window)]
        backward = (earlier - history[-1]) / min(self.window, max(1, t - 1))
        forward = (history[0] - history[-1]) / t   # the average gain per trial so far
        return task.weight * ((1 - self.alpha) * backward + self.alpha * forward + 1e-9 * history[-1])

    def next_task(self) -> int | None:
        untried = [i for i, p in enumerate(self.progress) if not p.done and p.trials <= 1]
        if untried:
            return untried[0]
        open_tasks = [i for i, p in enumerate(self.progress) if not p.done]
        if not open_tasks:
            return None
        return max(open_tasks, key=lambda i: self.gain(self.progress[i]))
