"""conformance/levels/manifest.py: the plugin's static declarations validate and agree with its code.

No kernel runs here; the checks read the manifest file, the TargetSpec, the
installed distribution's metadata and what the plugin's hooks return, and
compare them with the core's registries. Two go one step further: the emitter
is asked to emit (not build or run) a tiny kernel of each claimed dtype, and
each claimed op is type-checked on the kit's cases to see that some claimed
dtype gives it results of claimed dtypes too (argmax returns int64).
"""
from __future__ import annotations

import re
from typing import Any

from ... import SDK_API_VERSION
from ..catalogue import Check, CheckFailure, KitOptions
from ..plugin_info import manifest_path, own_hook_results

__all__ = ["checks"]

_THREAD_TAG = re.compile(r"^(blockIdx|threadIdx)\.[xyz]$")


def _fail(message: str) -> None:
    raise CheckFailure("contract", message)


def _file_validates(target: Any) -> None:
    from ...sdk.plugin_manager import read_manifest

    path = manifest_path(target)
    if path is None:
        _fail(f"no manifest.toml next to the hook module of {target.spec.distribution!r}; ship it as package data")
    manifest, digest = read_manifest(path, target.spec.distribution)
    if manifest != target.manifest:
        _fail(f"{path} differs from the manifest the TargetSpec carries; build the TargetSpec with "
              "tensorkiln.sdk.load_manifest(__file__)")
    if target.spec.manifest_hash and digest != target.spec.manifest_hash:
        _fail(f"{path} changed since the plugin was loaded (sha256 {digest[:12]} != {target.spec.manifest_hash[:12]})")


def _sdk_range(target: Any) -> None:
    if not target.manifest.plugin.supports_sdk(SDK_API_VERSION):
        _fail(f"sdk_api {target.manifest.plugin.sdk_api!r} excludes this core's SDK API {SDK_API_VERSION}")


def _available(target: Any) -> None:
    spec = target.spec
    if not spec.is_available:
        _fail(f"available = {spec.manifest.plugin.available} but emitter={spec.emitter!r}, loader={spec.loader!r}")
    from ...sdk.codegen import Emitter, RuntimeLoader
    if not isinstance(spec.emitter, Emitter):
        _fail(f"the emitter {type(spec.emitter).__name__} does not subclass tensorkiln.sdk.Emitter")
    if not isinstance(spec.loader, RuntimeLoader):
        _fail(f"the loader {type(spec.loader).__name__} does not subclass tensorkiln.sdk.RuntimeLoader")


def _names_resolve(target: Any) -> None:
    import tensorkiln as tk

    for name in (target.name, *target.manifest.plugin.aliases):
        resolved = tk.target(name)
        # Compare what identifies a plugin, not object identity: the registry may have been reloaded.
        if (resolved.spec.distribution, resolved.spec.name, resolved.spec.manifest_hash) != (
                target.spec.distribution, target.spec.name, target.spec.manifest_hash):
            _fail(f"target name {name!r} resolves to {resolved.spec.distribution!r}, not {target.spec.distribution!r}")


def _capabilities_consistent(target: Any) -> None:
    from ...ir.dtypes import SCALAR_DTYPES
    from ...sdk.manifest import MEMORY_SCOPES, SCHEDULE_PRIMITIVES

    caps = target.capabilities
    problems = [f"unknown dtype {d!r}" for d in caps.dtypes if d not in SCALAR_DTYPES]
    problems += [f"unknown memory scope {s!r}" for s in caps.memory_scopes if s not in MEMORY_SCOPES]
    problems += [f"unknown schedule primitive {p!r}" for p in caps.schedule_primitives if p not in SCHEDULE_PRIMITIVES]
    problems += [f"thread axis {t!r} is not blockIdx/threadIdx.x|y|z" for t in caps.thread_axes if not _THREAD_TAG.match(t)]
    if "global" not in caps.memory_scopes:
        problems.append("memory scope 'global' is missing (kernel arguments live there)")
    if "bind" in caps.schedule_primitives and not caps.thread_axes:
        problems.append("'bind' is claimed without thread_axes")
    if caps.thread_axes and "bind" not in caps.schedule_primitives:
        problems.append("thread_axes are declared but 'bind' is not in schedule_primitives")
    if "parallel" in caps.schedule_primitives and caps.max_threads == 1:
        problems.append("'parallel' is claimed but max_threads = 1")
    if "float32" not in caps.dtypes:
        problems.append("float32 is not claimed; the kit's runtime, te and model levels need it")
    if problems:
        _fail("; ".join(problems))


def _ops_exist(target: Any) -> None:
    from ...graph.registry import list_ops

    known = {op.name for op in list_ops()}
    ops = target.manifest.ops
    unknown = [name for name in (*ops.supported, *ops.unsupported) if name != "*" and name not in known]
    unknown += [f"{pref.op} (layouts)" for pref in target.manifest.layouts if pref.op not in known]
    if unknown:
        _fail(f"the manifest names ops that are not registered: {', '.join(unknown)}")


def _supported_ops_predicates(target: Any) -> None:
    from ...graph.registry import list_ops

    known = {op.name for op in list_ops()}
    problems = []
    for table in own_hook_results("tensorkiln_supported_ops", target):
        for name, predicate in table.items():
            if name not in known:
                problems.append(f"{name!r} is not a registered op")
            elif not target.manifest.ops.claims(name):
                problems.append(f"{name!r} has a predicate but the manifest does not claim it")
            if not callable(predicate):
                problems.append(f"the predicate of {name!r} is not callable")
    if problems:
        _fail("tensorkiln_supported_ops: " + "; ".join(problems))


def _strategy_keys() -> set[str]:
    """What an implementation or rule may be keyed by: a registered op name, an anchor tag or "injective"."""
    from ...graph.registry import list_ops
    from ...ops import tags
    from ...sdk.strategy import INJECTIVE

    return {op.name for op in list_ops()} | set(tags.ANCHOR_TAGS) | {INJECTIVE}


def _schedule_rules(target: Any) -> None:
    known = _strategy_keys()
    problems = []
    for table in own_hook_results("tensorkiln_schedule_rules", target):
        for name, rule in table.items():
            if name not in known:
                problems.append(f"{name!r} is neither a registered op nor an anchor tag")
            if not callable(rule):
                problems.append(f"the rule of {name!r} is not callable")
    if problems:
        _fail("tensorkiln_schedule_rules: " + "; ".join(problems))


def _strategies(target: Any) -> None:
    """Every OpImplementation the plugin returns for its own target is one, and is keyed by known keys."""
    from ...sdk.strategy import OpImplementation

    known = _strategy_keys()
    problems = []
    for implementation in own_hook_results("tensorkiln_strategies", target):
        if not isinstance(implementation, OpImplementation):
            problems.append(f"{type(implementation).__name__} {implementation!r} is not an OpImplementation")
            continue
        for key in implementation.keys:
            if key not in known:
                problems.append(f"{implementation.name!r} is keyed by {key!r}, which is neither a registered op, "
                                "an anchor tag (tensorkiln.ops.tags.ANCHOR_TAGS) nor 'injective'")
        for role in ("schedule", "space", "condition", *(("compute",) if implementation.compute is not None else ())):
            if not callable(getattr(implementation, role)):
                problems.append(f"the {role} of {implementation.name!r} is not callable")
    if problems:
        _fail(f"tensorkiln_strategies of {target.spec.distribution!r}: " + "; ".join(problems))


def _intrinsics_declared(target: Any) -> None:
    from ...te import TensorIntrin

    registered = own_hook_results("tensorkiln_intrinsics", target)
    problems = [f"{type(i).__name__} {i!r} is not a te.TensorIntrin" for i in registered if not isinstance(i, TensorIntrin)]
    names = {i.name for i in registered if isinstance(i, TensorIntrin)}
    declared = {d.name: d for d in target.manifest.intrinsics}
    problems += [f"{name!r} is declared in the manifest but not registered" for name in sorted(set(declared) - names)]
    problems += [f"{name!r} is registered but not declared in the manifest" for name in sorted(names - set(declared))]
    for intrin in registered:
        decl = declared.get(getattr(intrin, "name", None))
        if decl is None:
            continue
        if intrin.output.dtype not in decl.dtypes:
            problems.append(f"{intrin.name!r} computes {intrin.output.dtype} but declares dtypes {list(decl.dtypes)}")
        undeclared = sorted({t.dtype for t in intrin.inputs} - set(decl.dtypes))
        if undeclared:
            inputs = ", ".join(f"{t.name} {t.dtype}" for t in intrin.inputs)
            problems.append(f"{intrin.name!r} reads {undeclared} (inputs {inputs}) but declares dtypes "
                            f"{list(decl.dtypes)}")
        tile_problem = _tile_disagreement(intrin, decl)
        if tile_problem:
            problems.append(tile_problem)
        extra = [d for d in decl.dtypes if d not in target.capabilities.dtypes]
        if extra:
            problems.append(f"{intrin.name!r} declares dtypes {extra} the target does not claim")
        if target.name not in intrin.implementations:
            problems.append(f"{intrin.name!r} has no implementation for {target.name!r} "
                            f"(has {sorted(intrin.implementations)})")
    if problems:
        _fail("; ".join(problems))


def _tile_disagreement(intrin: Any, decl: Any) -> str:
    """"" when the manifest's `tile` (extents in declaration order) matches the description's
    output shape (then its reduce extents, when the tile names more axes), else the disagreement."""
    from ...tir.arith import as_int

    if not decl.tile:
        return ""
    extents = [*intrin.output.shape, *(r.dom.extent for r in intrin.op.reduce_axis)]
    described = [as_int(e) for e in extents[:len(decl.tile)]]
    if len(decl.tile) not in (len(intrin.output.shape), len(extents)) or list(decl.tile.values()) != described:
        shape = "x".join(str(as_int(e) if as_int(e) is not None else e) for e in intrin.output.shape)
        tile = ", ".join(f"{k} = {v}" for k, v in decl.tile.items())
        return (f"{intrin.name!r} declares tile {{{tile}}} but its te description computes a {shape} output "
                f"tile ({intrin.output.name}{list(intrin.output.shape)}); make [[intrinsics]] tile list the "
                "output extents in order")
    return ""


def _version(target: Any) -> None:
    from importlib import metadata

    declared = target.manifest.plugin.version
    distribution = target.spec.distribution
    try:
        installed = metadata.version(distribution)
    except metadata.PackageNotFoundError:
        _fail(f"no installed distribution {distribution!r} to compare the manifest version {declared} with")
    if not _same_version(declared, installed):
        _fail(f"manifest.toml says version = {declared!r} but the installed distribution {distribution!r} is "
              f"version {installed!r}; keep [plugin] version and pyproject's [project] version equal")


def _same_version(a: str, b: str) -> bool:
    from packaging.version import InvalidVersion, Version

    try:
        return Version(a) == Version(b)
    except InvalidVersion:
        return a == b


def _tiny_kernel(dtype: str):
    """B[i] = A[i] + A[i] (a copy for bool), lowered for any target: what the emitter must handle."""
    from ... import te

    a = te.placeholder((8,), dtype, name="A")
    b = te.compute((8,), (lambda i: a[i]) if dtype == "bool" else (lambda i: a[i] + a[i]), name="B")
    return te.lower(te.create_schedule(b.op), [a, b], name=f"conformance_{dtype}")


def _dtypes_emit(target: Any) -> None:
    emitter = target.spec.emitter
    problems = []
    for dtype in target.capabilities.dtypes:
        try:
            emitter.emit([_tiny_kernel(dtype)], target)
        except Exception as error:  # the plugin's emitter: any exception is the finding
            first = (str(error).strip().splitlines() or [""])[0]
            problems.append(f"{dtype} ({type(error).__name__}: {first})")
    if problems:
        _fail(f"[capabilities] dtypes claims dtypes the emitter {type(emitter).__name__} cannot emit "
              f"(B[i] = A[i] + A[i]): {'; '.join(problems)}; drop them from the manifest or teach the emitter")


def _result_dtypes(call: Any) -> set[str]:
    from ...graph.types import TensorType, TupleType

    t = call.checked_type
    return {f.dtype for f in (t.fields if isinstance(t, TupleType) else (t,)) if isinstance(f, TensorType)}


def _op_dtypes(target: Any) -> None:
    """Each claimed op has a claimed dtype at which its result dtypes are claimed too (argmax: int64).

    Judged on the kit's cases (op_cases.py); ops whose result dtype is an attribute (cast,
    shape_of) are the caller's choice and are not judged.
    """
    import dataclasses

    import numpy as np

    from ...graph.registry import list_ops
    from ...ir.errors import TensorkilnError
    from ..op_cases import case_for, kind_of
    from .ops import build_one_op_module

    claimed = set(target.capabilities.dtypes)
    problems = []
    for op in list_ops():
        case = case_for(op.name)
        if case is None or not target.manifest.ops.claims(op.name):
            continue
        if dataclasses.is_dataclass(op.attrs_type) and "dtype" in {f.name for f in dataclasses.fields(op.attrs_type)}:
            continue
        needs: list[tuple[str, list[str]]] = []
        for dtype in target.capabilities.dtypes:
            if kind_of(dtype) not in case.kinds:
                continue
            instance = case.make(dtype, 0, np.random.default_rng(0))
            try:
                call = build_one_op_module(op.name, instance).main.body
            except (TensorkilnError, TypeError, ValueError):
                continue  # the op's type rule rejects this dtype: not a claim about it
            missing = sorted(_result_dtypes(call) - claimed)
            if not missing:
                break
            needs.append((dtype, missing))
        else:
            if needs:
                dtype, missing = needs[0]
                problems.append(f"{op.name} returns {', '.join(missing)} (from {dtype})")
    if problems:
        _fail(f"claimed ops return dtypes the target does not claim, so they can never run on it: "
              f"{'; '.join(problems)}; add the dtypes to [capabilities] dtypes or list the ops under "
              "[ops] unsupported")


def _layouts(target: Any) -> None:
    from ...passes.alter_layout import check_preference, layout_preferences

    problems = []
    for op_name, (layout, weight_layout) in layout_preferences(target).items():
        reason = check_preference(op_name, layout, weight_layout)
        if reason:
            problems.append(f"{op_name} {layout}{' / ' + weight_layout if weight_layout else ''}: {reason}")
        elif not target.manifest.ops.claims(op_name):
            problems.append(f"{op_name} {layout}: the target prefers a layout for an op it does not claim")
    if problems:
        _fail(f"layout preferences the core does not honour: {'; '.join(problems)}")


def _tensorize_claim(target: Any) -> None:
    import tensorkiln as tk

    if not tk.intrinsics(target):
        _fail("'tensorize' is claimed but no intrinsic is registered for the target")


def _options_defaults(target: Any) -> None:
    from ...sdk.target import Target

    Target.from_spec(target.spec, {})  # coerces every default; raises TargetError on a bad one


def checks(target: Any, options: KitOptions) -> list[Check]:
    table = [
        ("file_validates", "manifest.toml validates and is the one the TargetSpec carries", _file_validates, True),
        ("sdk_range", "the sdk_api range includes this core", _sdk_range, True),
        ("available", "an available target has an Emitter and a RuntimeLoader", _available, True),
        ("names_resolve", "the name and every alias resolve to this plugin", _names_resolve, True),
        ("capabilities", "claimed dtypes, scopes, primitives and thread axes are known and consistent",
         _capabilities_consistent, True),
        ("ops_exist", "ops named in the manifest (ops, layouts) are registered", _ops_exist, True),
        ("supported_ops", "tensorkiln_supported_ops predicates name claimed, registered ops", _supported_ops_predicates, True),
        ("schedule_rules", "tensorkiln_schedule_rules name registered ops or anchor tags", _schedule_rules, True),
        ("strategies", "tensorkiln_strategies return OpImplementations keyed by registered ops, anchor tags or "
         "'injective'", _strategies, True),
        ("intrinsics_declared", "declared intrinsics match the registered ones (names, tile, input and output "
         "dtypes, implementation)", _intrinsics_declared, True),
        ("version", "the manifest's version is the installed distribution's", _version, True),
        ("dtypes_emit", "the emitter emits a tiny kernel of each claimed dtype", _dtypes_emit, True),
        ("op_dtypes", "each claimed op has a claimed dtype at which the dtypes of its results are claimed too",
         _op_dtypes, True),
        ("layouts", "every layout preference (manifest, hooks) is one alter_layout honours, for a claimed op",
         _layouts, True),
        ("options", "target option defaults have their declared types and choices", _options_defaults, True),
    ]
    found = [Check(f"manifest/{name}", "manifest", required, text, fn) for name, text, fn, required in table]
    if not target.manifest.plugin.available:
        reason = f"the manifest says available = false: {target.manifest.plugin.unavailable_reason}"
        found = [Check(c.id, c.level, c.required, c.description, skip_reason=reason)
                 if c.id in ("manifest/available", "manifest/dtypes_emit") else c for c in found]
    if "tensorize" in target.capabilities.schedule_primitives:
        found.append(Check("manifest/tensorize_claim", "manifest", True, "'tensorize' comes with registered intrinsics",
                           _tensorize_claim))
    else:
        found.append(Check("manifest/tensorize_claim", "manifest", True, "'tensorize' comes with registered intrinsics",
                           skip_reason="the target does not claim 'tensorize'"))
    return found
