"""tensorkiln.tune: auto-tuning of the knobs that target plugins' strategies declare.

    from tensorkiln import tune

    task = tune.Task.from_op("gemm", (1024, 1024, 1024), "cpu_llvm")
    db = tune.Database("tuning.sqlite")
    tune.tune(task, trials=64, strategy="model", db=db)      # or evolutionary, optuna, anneal, random, grid
    task.best()                                              # MeasureResult: config, cost, trace

    tasks = tune.extract_tasks("model.onnx", "cpu_llvm")     # one per distinct fused group, weighted
    tune.tune(tasks, trials=400, db=db)
    with tune.apply_history_best(db):
        lib = tk.compile("model.onnx", "cpu_llvm")           # or tk.compile(..., tuning_db=db)

Search spaces come from the strategies (`OpImplementation.space`); nothing here names a
knob. See sdk_docs/tuning.md.
"""
from .apply import apply_history_best
from .cost_model import GradientBoostedModel, ModelGuidedTuner, analytic_cost
from .database import Database
from .measure import LocalMeasurer, MeasureOptions
from .record import MeasureResult
from .session import TuneResult, tune
from .task import Task, extract_tasks
from .tuners import AnnealingTuner, EvolutionaryTuner, GridTuner, OptunaTuner, RandomTuner, Tuner, make_tuner

__all__ = ["Task", "extract_tasks", "tune", "TuneResult", "Database", "apply_history_best", "MeasureResult",
           "MeasureOptions", "LocalMeasurer", "Tuner", "RandomTuner", "GridTuner", "AnnealingTuner",
           "EvolutionaryTuner", "OptunaTuner", "ModelGuidedTuner", "GradientBoostedModel", "analytic_cost",
           "make_tuner"]
