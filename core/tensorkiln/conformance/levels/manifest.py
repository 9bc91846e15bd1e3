"""conformance/levels/manifest.py: the plugin's static declarations validate and agree with its code.

No kernel is compiled here; every check reads the manifest file, the TargetSpec
and what the plugin's hooks return, and compares them with the core's registries.
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
        extra = [d for d in decl.dtypes if d not in target.capabilities.dtypes]
        if extra:
            problems.append(f"{intrin.name!r} declares dtypes {extra} the target does not claim")
        if target.name not in intrin.implementations:
            problems.append(f"{intrin.name!r} has no implementation for {target.name!r} "
                            f"(has {sorted(intrin.implementations)})")
    if problems:
        _fail("; ".join(problems))


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
        ("intrinsics_declared", "declared intrinsics match the registered ones (names, dtypes, implementation)",
         _intrinsics_declared, True),
        ("options", "target option defaults have their declared types and choices", _options_defaults, True),
    ]
    found = [Check(f"manifest/{name}", "manifest", required, text, fn) for name, text, fn, required in table]
    if not target.manifest.plugin.available:
        reason = f"the manifest says available = false: {target.manifest.plugin.unavailable_reason}"
        found = [Check(c.id, c.level, c.required, c.description, skip_reason=reason) if c.id == "manifest/available"
                 else c for c in found]
    if "tensorize" in target.capabilities.schedule_primitives:
        found.append(Check("manifest/tensorize_claim", "manifest", True, "'tensorize' comes with registered intrinsics",
                           _tensorize_claim))
    else:
        found.append(Check("manifest/tensorize_claim", "manifest", True, "'tensorize' comes with registered intrinsics",
                           skip_reason="the target does not claim 'tensorize'"))
    return found
