"""Pluggy hook specifications: the whole contract between the core and a target plugin.

A plugin module implements any of these with `@tensorkiln.sdk.hookimpl`. Hooks are
called with keyword arguments; an implementation may accept only the arguments it
uses, so adding an argument here breaks no plugin.
"""
from __future__ import annotations

import pluggy

__all__ = ["hookspec", "hookimpl", "PROJECT_NAME", "TensorkilnHookSpecs"]

PROJECT_NAME = "tensorkiln"
hookspec = pluggy.HookspecMarker(PROJECT_NAME)
hookimpl = pluggy.HookimplMarker(PROJECT_NAME)


class TensorkilnHookSpecs:
    @hookspec
    def tensorkiln_targets(self):
        """Return the `TargetSpec`s this plugin provides (usually one).

        Called once by the plugin manager right after the plugin's module is
        imported. Each TargetSpec pairs the validated manifest with the emitter and
        runtime loader instances (None while the target has no code generator yet).
        """

    @hookspec
    def tensorkiln_intrinsics(self, target):
        """Return tensor intrinsics (`tensorkiln.te.TensorIntrin`) usable on `target`.

        Called by `tensorkiln.intrinsics(target)` for every installed plugin, so a
        vendor may add intrinsics to another plugin's target (e.g. a GEMM unit on
        cpu_llvm) without forking it. Return [] for targets you do not serve.
        """

    @hookspec
    def tensorkiln_layout_preferences(self, target):
        """Return `LayoutPreference`s beyond the manifest's static ones for `target`.

        Called by the layout pass before it converts ops; e.g. a plugin may prefer
        NHWC for conv2d only when the target's CPU has vector registers (cpu_llvm does this).
        """

    @hookspec
    def tensorkiln_strategies(self, target):
        """Return `tensorkiln.sdk.OpImplementation`s for `target`: where its hardware knowledge lives.

        Called by the compiler (`tensorkiln.compiler.strategy`) for each fused group it
        lowers. An implementation is keyed by graph op names ("nn.conv2d") or anchor tags
        ("conv2d_nhwc"; "injective" for a group without anchor), pairs an optional te
        compute with a schedule, and declares a condition on the call, a priority and a
        tuning space (named knobs with candidates and an analytic default). The highest
        priority applicable implementation wins; a tuned record chooses its knob values,
        else their defaults. An op no implementation covers gets the core's naive default.
        Return [] for targets you do not serve.
        """

    @hookspec
    def tensorkiln_schedule_rules(self, target):
        """Return {anchor tag or op name: rule} for `target`; rule(outputs, target) -> te.Schedule.

        A rule is a schedule-only strategy: the compiler turns each into an
        `OpImplementation` with priority `sdk.strategy.RULE_PRIORITY`, so a rule overrides
        the target's own strategies for its key. Use it to replace one schedule of a
        target you do not own (a vendor's better conv schedule for cpu_llvm) without
        forking it; use `tensorkiln_strategies` for anything with knobs or a compute.
        A group none of whose keys has a rule is chosen as if there were no rules: the
        target's strategies, else the core's naive default (sdk_docs/strategies.md).
        Return {} for targets you do not serve.
        """

    @hookspec
    def tensorkiln_supported_ops(self, target):
        """Return {op name: predicate(call) -> bool | str} refining the manifest's op list.

        Called during partitioning. A predicate returns True when the op (with its
        attributes and types) runs on `target`, or a reason string when it does not;
        the op then falls back to an available CPU target and the placement report shows the reason.
        """

    @hookspec
    def tensorkiln_passes(self, target):
        """Return extra graph passes (registered `tensorkiln.passes.Pass` objects) for `target`.

        Called by the compiler when it builds the pass pipeline for `target`; the
        passes run after the core's own graph passes, before fusion.
        """
