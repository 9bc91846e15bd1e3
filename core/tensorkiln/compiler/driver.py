"""The compile driver: graph -> passes -> placement -> fused groups -> tir -> plugin -> CompiledModel.

Each stage is a plain function; `compile` is the flat list of them, read top to bottom.
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import time
from pathlib import Path
from typing import Any

from ..graph import Call, Expr, Function, Module, post_order
from ..graph.registry import Op
from ..ir.errors import UnsupportedOpError
from ..ir.memory import physical_memory_bytes
from ..passes import GRAPH_PIPELINE, PassContext, PassManager, PassTimingInstrument, current_pass_context, group_each_op
from ..sdk.plugin_manager import registry
from ..sdk.target import Target
from .alias_steps import alias_group_calls
from .control_flow import compile_control_steps, control_call, fold_constant_conditions
from .gc_tuning import holding_gc
from .memory_limit import check_planned_memory, check_tensor_sizes
from .lower_groups import GroupKernel, group_name, lower_group
from .lowering_cache import LoweringCache, group_key, lowering_cache
from .schedule_plan import schedule_plan
from .placement import place_ops
from .placed_concats import placed_concat_calls
from .plan import build_plan

__all__ = ["compile", "as_module", "fused_groups", "use_tuning_db"]

_TUNING_DB: contextvars.ContextVar = contextvars.ContextVar("tensorkiln_tuning_db", default=None)


@contextlib.contextmanager
def use_tuning_db(database):
    """`tk.compile` calls inside the block apply `database`'s records (`tensorkiln.tune.apply_history_best`)."""
    token = _TUNING_DB.set(database)
    try:
        yield database
    finally:
        _TUNING_DB.reset(token)


def as_module(model: Any, shape: dict | None = None, memory_limit: int | None = None) -> Module:
    """Accept a graph Module, an Expr, an onnx ModelProto or a path to an .onnx file."""
    if isinstance(model, Module):
        return model
    if isinstance(model, Expr):
        return Module.from_expr(model)
    from ..frontend import from_onnx
    if isinstance(model, (str, Path)) or type(model).__name__ == "ModelProto":
        return from_onnx(model, shape=shape, memory_limit=memory_limit)
    raise TypeError(f"cannot compile a {type(model).__name__}; pass a graph Module, an ONNX model or a path")


def _context(opt_level: int | None, context: PassContext | None) -> PassContext:
    context = context or current_pass_context() or PassContext()
    if opt_level is not None:
        context = dataclasses.replace(context, opt_level=opt_level, instruments=list(context.instruments))
    return context


def _group_calls(mod: Module) -> list[Call]:
    return [node for node in post_order(mod.main.body) if isinstance(node, Call) and isinstance(node.op, Function)]


@dataclasses.dataclass(frozen=True)
class _Group:
    """A distinct group to lower: its primitive function, kernel name and target."""

    function: Function
    name: str
    target: Target


def _distinct_groups(calls: list[Call], primary: Target) -> tuple[dict[str, list[_Group]], dict[int, str]]:
    """The distinct (function, target) groups to lower, by target, and each call's kernel name;
    identical groups share a kernel.

    A group runs on the target its function's "target" attr names (placement), else on `primary`.
    """
    groups: dict[str, list[_Group]] = {}
    by_key: dict[tuple, str] = {}
    names: dict[int, str] = {}
    used: set[str] = set()
    for call in calls:
        target = registry().target(call.op.attr("target") or str(primary))
        # the Function itself: hashed structurally and compared with structural equality. A hash alone
        # is no identity: variables hash by type, so add(p0, p0) and add(p0, p1) collided and shared
        # one kernel (wrong argument count, or silently wrong results when the counts matched)
        key = (call.op, str(target))
        if key not in by_key:
            base = group_name(call.op)
            name, suffix = base, 0
            while name in used:
                suffix += 1
                name = f"{base}_{suffix}"
            used.add(name)
            groups.setdefault(str(target), []).append(_Group(call.op, name, target))
            by_key[key] = name
        names[id(call)] = by_key[key]
    return groups, names


def _lowered(groups: list[_Group], tuning_db, context: PassContext, into: list[GroupKernel],
             cache: LoweringCache | None = None):
    """Each group's PrimFunc, lowered when it is drawn (the emitter draws them while it compiles the
    first ones, Emitter.emit_stream); each GroupKernel is appended to `into`.

    `tuning_db.configs_for(function, target)` gives a group's tuned knob values (or None: defaults);
    the kernel's strategy report names the record it applied. `cache` (compiles without a tuning
    database): a group lowered before comes from there (compiler/lowering_cache.py).
    """
    for group in groups:
        configs = tuning_db.configs_for(group.function, group.target) if tuning_db is not None else None
        key = group_key(group.function, group.target, context) if cache is not None else None
        kernel = cache.get(key, group.name) if key is not None else None
        # summary()["strategies"][name]["lowering_cache"]: "hit", "miss" (lowered here, and stored if it
        # pickles) or None (not cacheable: compiler/lowering_cache.py says when)
        outcome = None if key is None else "hit" if kernel is not None else "miss"
        if kernel is None:
            kernel = lower_group(group.function, group.name, group.target, configs, context)
            if key is not None:
                cache.put(key, kernel)
        kernel = dataclasses.replace(kernel, strategy={**kernel.strategy, "lowering_cache": outcome})
        if tuning_db is not None:   # which record the group used (None: its analytic defaults)
            applied = getattr(configs, "applied", None)
            kernel = dataclasses.replace(kernel, strategy={**kernel.strategy, "tuning_record": applied})
        into.append(kernel)
        yield kernel.func


@holding_gc
def compile(model: Any, target: "str | Target" = "cpu_llvm", *, opt_level: int | None = None, strict: bool = False,
            context: PassContext | None = None, shape: dict | None = None, concurrent: bool | None = None,
            memory_limit: int | None = None, tuning_db=None, zero_copy_reshape: bool = True,
            zero_copy_concat: bool = True):
    """Compile a model for `target`; returns a CompiledModel ready to run.

    opt_level 0 runs each op as its own kernel without memory reuse; higher
    levels run the graph passes (`tensorkiln.passes.GRAPH_PIPELINE`). Ops the
    target does not support fall back to a CPU target unless `strict`.
    `concurrent` lets independent kernels run at the same time (default: at opt
    level >= 1 when every target used declares `concurrent_kernels`).
    `memory_limit` (bytes, default the machine's physical memory): a tensor larger than
    it, or a plan whose activations + weights + inputs exceed it, raises
    MemoryLimitError naming the largest tensor, before anything is allocated.
    `tuning_db` (a `tensorkiln.tune.Database`, default the one `tune.apply_history_best` made
    current) applies the best tuning record of each group's workload, target and plugin version.
    With a database, `lib.summary()["strategies"][kernel]["tuning_record"]` names the record a group
    used (None: it had none and kept the analytic defaults).
    `zero_copy_reshape` (opt level >= 1, targets declaring `alias_buffers`): a group that only
    reshapes runs no kernel, its output aliases its input's bytes (compiler/alias_steps.py);
    `summary()["alias_steps"]` counts them. False keeps a copy kernel for each (comparisons).
    `zero_copy_concat` (the same conditions): a concatenation whose inputs are contiguous ranges of
    its output runs no kernel, its inputs' producers write into its output's bytes
    (compiler/placed_concats.py); `summary()["placed_concats"]` counts them. False keeps their kernels.
    """
    from ..runtime.compiled_model import CompiledModel

    start = time.perf_counter()
    memory_limit = physical_memory_bytes() if memory_limit is None else int(memory_limit)
    mod = as_module(model, shape, memory_limit)
    check_tensor_sizes(mod, memory_limit)
    target = registry().target(target)
    target.spec.require_available()
    context = _context(opt_level, context)
    # lowered groups come from the lowering cache unless tuning records or the caller's own pass
    # instruments (which expect to see the loop passes run) are involved
    cache = lowering_cache() if tuning_db is None and _TUNING_DB.get() is None and not context.instruments else None
    timing = PassTimingInstrument()
    context = dataclasses.replace(context, instruments=[*context.instruments, timing])
    ops_before = sum(1 for node in post_order(mod.main.body) if isinstance(node, Call) and isinstance(node.op, Op))

    mod, skipped = _partition(mod, target, context, strict)
    calls = _group_calls(mod)
    if tuning_db is None:
        tuning_db = _TUNING_DB.get()
    if isinstance(tuning_db, (str, Path)):
        raise TypeError(f"tuning_db={str(tuning_db)!r}: pass an open database, "
                        f"tensorkiln.tune.Database({str(tuning_db)!r})")
    # groups that only reshape run no kernel: their output aliases their input (compiler/alias_steps.py)
    aliases = alias_group_calls(calls, target, registry(), zero_copy_reshape and context.opt_level >= 1)
    # concatenations whose inputs are written in place into their output (compiler/placed_concats.py)
    placed = placed_concat_calls(mod.main, calls, target, registry(), aliases,
                                 zero_copy_concat and context.opt_level >= 1)
    elided = aliases | placed
    groups, names = _distinct_groups([c for c in calls if control_call(c.op) is None and id(c) not in elided],
                                     target)
    names.update({id(c): group_name(c.op) for c in calls if id(c) in elided})
    # If/Loop/Scan: each body compiled as a model of its own, the group a host step of the plan
    programs, program_names = compile_control_steps(
        [c for c in calls if control_call(c.op) is not None],
        lambda body: compile(body, target, strict=strict, context=context, memory_limit=memory_limit,
                             tuning_db=tuning_db, zero_copy_reshape=zero_copy_reshape,
                             zero_copy_concat=zero_copy_concat))
    names.update(program_names)
    # each target's groups are lowered as its emitter draws them: code generation overlaps lowering
    kernels: dict[str, list[GroupKernel]] = {}
    artifacts, target_objects = {}, {}
    for target_text, target_groups in groups.items():
        resolved = target_groups[0].target
        kernels[target_text] = []
        artifacts[target_text] = resolved.spec.emitter.emit_stream(
            _lowered(target_groups, tuning_db, context, kernels[target_text], cache), resolved, len(target_groups))
        target_objects[target_text] = resolved
    strategies = {k.name: {"target": text, "ops": list(k.ops), **k.strategy}
                  for text, group_kernels in kernels.items() for k in group_kernels}
    if programs or elided:   # host steps use the target's loader for their buffers, even with no kernel of it
        target_objects.setdefault(str(target), target)
    plan, constants = build_plan(mod.main, names, str(target), aliases, placed)
    # Memory-aware step order, concurrent levels (where every target allows it) and storages.
    if concurrent is None:
        concurrent = context.opt_level >= 1 and all(
            t.capabilities.concurrent_kernels for t in target_objects.values())
    plan = schedule_plan(plan, reuse=context.opt_level >= 1, concurrent=concurrent)
    check_planned_memory(plan, constants, memory_limit)
    return CompiledModel(
        plan=plan, constants=constants, artifacts=artifacts, target_objects=target_objects, target=str(target),
        ops_before_fusion=ops_before, pass_times=dict(timing.times),
        skipped_passes={s.name: s.reason for s in skipped},
        compile_seconds=time.perf_counter() - start, graph=mod, strategies=strategies, host_programs=programs)


def _partition(mod: Module, target: Target, context: PassContext, strict: bool) -> tuple[Module, tuple]:
    """Graph passes, placement and fusion: `mod` whose main calls one primitive function per kernel
    launch, and the passes that were skipped."""
    plugin_passes = registry().call("tensorkiln_passes", target)
    manager = PassManager(context, target)
    mod = fold_constant_conditions(manager.run(mod, (*_pipeline(context), *plugin_passes)))
    mod = place_ops(mod, target, strict=strict)
    # Fusion runs after placement so a group never mixes targets.
    fuse_manager = PassManager(context, target)
    mod = fuse_manager.run(mod, ("fuse_ops",))
    # Fixed-point formats belong to kernel boundaries, so they are assigned once the groups exist
    # (a no-op unless PassContext(config={"assign_fixed_point": ...}) asks).
    format_manager = PassManager(context, target)
    mod = format_manager.run(group_each_op(mod), ("assign_fixed_point",))
    return mod, (*manager.skipped, *fuse_manager.skipped, *format_manager.skipped)


def fused_groups(model: Any, target: "str | Target" = "cpu_llvm", *, opt_level: int | None = None,
                 shape: dict | None = None, strict: bool = False) -> tuple[list[Call], Target]:
    """The group calls `compile` lowers (one per kernel launch; each `call.op` a primitive function)
    and the resolved target: what `tensorkiln.tune.extract_tasks` tunes."""
    mod = as_module(model, shape)
    target = registry().target(target)
    context = _context(opt_level, None)
    mod, _ = _partition(mod, target, context, strict)
    calls = _group_calls(mod)
    aliases = alias_group_calls(calls, target, registry(), context.opt_level >= 1)   # elided: no kernel
    elided = aliases | placed_concat_calls(mod.main, calls, target, registry(), aliases, context.opt_level >= 1)
    # If/Loop/Scan groups are host steps, not kernels (their bodies' kernels are not listed)
    return [c for c in calls if control_call(c.op) is None and id(c) not in elided], target


def _pipeline(context: PassContext) -> tuple[str, ...]:
    """The whole GRAPH_PIPELINE at every opt level: each pass's own opt level gates it, so the
    manager records why a pass did not run (opt level 0 skips them all, alter_layout needs 2)."""
    return GRAPH_PIPELINE
