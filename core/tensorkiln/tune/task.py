"""tune/task.py: a tuning task, one fused-group workload on one target.

    task = tune.Task.from_op("gemm", (1024, 1024, 1024), "cpu_llvm")    # C[M, N] = A[M, K] @ B[K, N]
    tasks = tune.extract_tasks("resnet50.onnx", "cpu_llvm")            # one per distinct group, weighted

A task knows its group function, the implementation the target's strategies choose for
it and that implementation's tuning space (read from the strategy: the tuner never
names a knob). `lower(config)` / `build(config)` give the group's kernel with those knob
values. A task made from an op or a model file carries a `recipe` (plain JSON) from
which another process rebuilds it: graph functions do not pickle, recipes do.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..graph import Function
from ..ir.errors import ScheduleError, TensorkilnError
from ..sdk.schedules.generated import GENERATED_NAME
from ..sdk.strategy import EMPTY_SPACE, TuningSpace
from .workload import FORMAT_VERSION, plugin_version, target_fingerprint, target_key, workload_key

__all__ = ["Task", "extract_tasks", "OPS", "SPACE_KINDS"]

SPACE_KINDS = ("template", "generated")

KERNEL_NAME = "tk_tune_kernel"   # one name for every candidate, so equal code gives equal binaries


def _gemm(shape, dtype):
    from .. import graph
    m, n, k = shape
    return graph.nn.matmul(graph.var("A", shape=(m, k), dtype=dtype), graph.var("B", shape=(k, n), dtype=dtype))


def _dense(shape, dtype):
    from .. import graph
    m, n, k = shape
    return graph.nn.dense(graph.var("x", shape=(m, k), dtype=dtype), graph.var("w", shape=(n, k), dtype=dtype))


def _conv2d(shape, dtype):
    """shape (N, C, H, W, O, KH[, KW]): NCHW data, OIHW weight, stride 1, 'same' padding."""
    from .. import graph
    n, c, h, w, o, kh, *rest = shape
    kw = rest[0] if rest else kh
    data = graph.var("data", shape=(n, c, h, w), dtype=dtype)
    weight = graph.var("weight", shape=(o, c, kh, kw), dtype=dtype)
    return graph.nn.conv2d(data, weight, padding=(kh // 2, kw // 2, kh // 2, kw // 2))


OPS = {"gemm": (_gemm, "M,N,K", 3, 3), "matmul": (_gemm, "M,N,K", 3, 3), "dense": (_dense, "M,N,K", 3, 3),
       "conv2d": (_conv2d, "N,C,H,W,O,KH[,KW]", 6, 7)}
"""Single operators `Task.from_op` / `tensorkiln tune --op` know: name -> (graph builder, shape form,
fewest and most dimensions)."""


@dataclass(eq=False)
class Task:
    """One group workload on one target; `weight` is how many times a model runs it."""

    function: Function
    target: Any
    weight: int = 1
    name: str = ""
    recipe: dict | None = None
    space_kind: str = "template"   # "template": the strategy's knobs; "generated": tune/sketch.py's sketch
    results: list = field(default_factory=list, repr=False)   # MeasureResults of the last tuning, trial order
    _probe: tuple | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.space_kind not in SPACE_KINDS:
            raise TensorkilnError(f"space={self.space_kind!r}: choose one of {list(SPACE_KINDS)} (template: the "
                                  "knobs the target's strategy declares; generated: a sketch derived from the compute)")

    # -- constructors ------------------------------------------------------------------------

    @classmethod
    def from_op(cls, op: str, shape, target="cpu_llvm", dtype: str = "float32", space: str = "template") -> "Task":
        if op not in OPS:
            raise TensorkilnError(f"unknown op {op!r} to tune; known: {sorted(OPS)} (or tune a model file)")
        builder, form, fewest, most = OPS[op]
        shape = tuple(int(d) for d in shape)
        if not fewest <= len(shape) <= most or min(shape, default=0) < 1:
            raise TensorkilnError(f"--op {op}: shape {list(shape)} should be {form} (positive integers)")
        tasks = extract_tasks(builder(shape, dtype), target, space=space)
        if not tasks:
            raise TensorkilnError(f"{op} {list(shape)} on {target}: its implementation declares no knobs to tune")
        task = max(tasks, key=lambda t: t.space.size)
        task.recipe = {"op": op, "shape": list(shape), "dtype": dtype, "target": str(task.target),
                       "key": task.key, "space": space}
        task.name = f"{op}_{'x'.join(map(str, shape))}"
        return task

    @classmethod
    def from_recipe(cls, recipe: dict) -> "Task":
        """Rebuild a task in another process (a build worker) from its `recipe`; cached per process."""
        text = json.dumps(recipe, sort_keys=True)
        if text not in _RECIPE_CACHE:
            if "op" in recipe:
                task = cls.from_op(recipe["op"], recipe["shape"], recipe["target"], recipe.get("dtype", "float32"),
                                   recipe.get("space", "template"))
            else:
                found = {t.key: t for t in extract_tasks(recipe["model"], recipe["target"], shape=recipe.get("shape"),
                                                         opt_level=recipe.get("opt_level"), with_recipes=False,
                                                         space=recipe.get("space", "template"))}
                if recipe["key"] not in found:
                    raise TensorkilnError(f"model {recipe['model']} has no group with workload {recipe['key']}")
                task = found[recipe["key"]]
                task.recipe = recipe
            _RECIPE_CACHE[text] = task
        return _RECIPE_CACHE[text]

    # -- what the strategies choose ----------------------------------------------------------

    def _chosen(self) -> tuple:
        """(implementation, space, default GroupKernel): one lowering with the analytic defaults."""
        if self._probe is None:
            from ..compiler.lower_groups import lower_group
            seen = {}

            def capture(implementation, space):
                seen["implementation"], seen["space"] = implementation, space
                return None

            kernel = lower_group(self.function, KERNEL_NAME, self.target, self._configs(capture))
            self._probe = (seen.get("implementation"), seen.get("space", EMPTY_SPACE), kernel)
        return self._probe

    @property
    def implementation(self):
        return self._chosen()[0]

    @property
    def implementation_name(self) -> str:
        return self._chosen()[2].strategy["strategy"]

    @property
    def space(self) -> TuningSpace:
        return self._chosen()[1]

    @property
    def key(self) -> str:
        return workload_key(self.function)

    def identity(self) -> dict:
        """Everything a record of this task is keyed by (tune/database.py)."""
        return {"workload_key": self.key, "target": target_key(self.target),
                "target_fingerprint": target_fingerprint(self.target),
                "implementation": self.implementation_name,
                "plugin_version": plugin_version(self.implementation, self.target),
                "format_version": FORMAT_VERSION}

    def template_twin(self) -> "Task":
        """This group's task in the template space (its strategy's knobs); itself when it is one."""
        if self.space_kind == "template":
            return self
        recipe = {**self.recipe, "space": "template"} if self.recipe else None
        return Task(self.function, self.target, self.weight, self.name, recipe)

    def best(self):
        """The fastest valid result of the last tuning (trial 0, the analytic default, at worst); None
        before tuning."""
        valid = [r for r in self.results if r.valid]
        return min(valid, key=lambda r: (r.cost, r.trial)) if valid else None

    # -- candidates --------------------------------------------------------------------------

    def validate(self, config: dict) -> dict:
        """The complete config, or ScheduleError naming the knob / value that is wrong."""
        return self.space.validate(config)

    def lower(self, config: dict):
        """The GroupKernel with `config`'s knob values (ScheduleError for an illegal candidate)."""
        from ..compiler.lower_groups import lower_group
        config = self.validate(config)
        chosen = self.implementation_name

        def configs(implementation, space):
            if implementation.name != chosen:
                raise ScheduleError(f"the strategies chose {implementation.name}, not {chosen}")
            return config

        return lower_group(self.function, KERNEL_NAME, self.target, self._configs(configs))

    def _configs(self, callback):
        """`callback` as lower_group's configs, marked for the generated sketch in a generated space."""
        if self.space_kind != "generated":
            return callback
        return _ForcedImplementation(callback, GENERATED_NAME)

    def build(self, config: dict):
        """(GroupKernel, Artifact) of the candidate: lowered and compiled by the target's emitter."""
        kernel = self.lower(config)
        return kernel, self.target.spec.emitter.emit([kernel.func], self.target)

    def input_arrays(self, seed: int = 0) -> list[np.ndarray]:
        """Inputs for measuring: uniform in [-1, 1) for floats, zeros for integers (always valid indices)."""
        from ..ir.dtypes import to_numpy
        rng = np.random.default_rng(seed)
        arrays = []
        for param in self.function.params:
            kind = param.checked_type
            dtype = to_numpy(kind.dtype)
            shape = tuple(int(d) for d in kind.shape)
            if np.issubdtype(dtype, np.floating):
                arrays.append(rng.uniform(-1, 1, shape).astype(dtype))
            elif dtype == np.bool_:
                arrays.append(rng.random(shape) < 0.5)
            else:
                arrays.append(np.zeros(shape, dtype))
        return arrays

    def __repr__(self) -> str:
        return f"<tune.Task {self.name or self.key} weight={self.weight} on {self.target}>"


_RECIPE_CACHE: dict[str, Task] = {}


class _ForcedImplementation:
    """A configs callback that also names the implementation the compiler must use (strategy.select)."""

    def __init__(self, callback, implementation: str) -> None:
        self.callback, self.implementation = callback, implementation

    def __call__(self, implementation, space):
        return self.callback(implementation, space)


def extract_tasks(model, target="cpu_llvm", *, shape: dict | None = None, opt_level: int | None = None,
                  with_recipes: bool = True, space: str = "template") -> list[Task]:
    """The tasks of a model: one per distinct fused-group workload whose implementation has knobs,
    weighted by how many groups of the model share it (most weight first).

    `model` is what `tk.compile` takes. A model given as a file path gives tasks with recipes
    (build workers in other processes rebuild them). `space="generated"` gives every group's
    generated sketch (tune/sketch.py) instead of its strategy's knobs."""
    from ..compiler.driver import fused_groups
    from ..compiler.lower_groups import group_name

    calls, resolved = fused_groups(model, target, opt_level=opt_level, shape=shape)
    by_key: dict[str, Task] = {}
    fixed: set[str] = set()   # workloads whose implementation has no knobs
    for call in calls:
        function = call.op
        if call.op.attr("target") and str(call.op.attr("target")) != str(resolved):
            continue   # a group placed on another target (fallback) is tuned with that target
        key = workload_key(function)
        if key in fixed:
            continue
        if key in by_key:
            by_key[key].weight += 1
            continue
        task = Task(function, resolved, 1, group_name(function), space_kind=space)
        if task.space.size <= 1:
            fixed.add(key)   # nothing to choose
            continue
        if with_recipes and isinstance(model, str):
            task.recipe = {"model": model, "shape": shape, "opt_level": opt_level, "target": str(resolved), "key": key,
                           "space": space}
        by_key[key] = task
    tasks = sorted(by_key.values(), key=lambda t: -t.weight)
    names: dict[str, int] = {}
    for task in tasks:   # unique names: two conv groups of different shapes share a group name
        count = names.get(task.name, 0)
        names[task.name] = count + 1
        if count:
            task.name = f"{task.name}_{count}"
    return tasks
