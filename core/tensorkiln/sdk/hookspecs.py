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
        NCHW8c for conv2d only when the host has AVX-512.
        """

    @hookspec
    def tensorkiln_schedule_rules(self, target):
        """Return {anchor tag or op name: rule} for `target`; rule(outputs, target) -> te.Schedule.

        Called by `tensorkiln.ops.schedule_for` each time the compiler schedules a fused
        group on `target`. The first key matching the group wins: its anchor stage's tag
        ("conv2d_nchw", "dense", ...; "injective" for a group without anchor), then the
        names of the group's graph ops, the anchor op ("nn.conv2d") before its epilogue.
        `outputs` are the group's te tensors. Tuned records win over rules, rules win
        over the core's default schedules. Return {} for targets you do not serve.
        """

    @hookspec
    def tensorkiln_supported_ops(self, target):
        """Return {op name: predicate(call) -> bool | str} refining the manifest's op list.

        Called during partitioning. A predicate returns True when the op (with its
        attributes and types) runs on `target`, or a reason string when it does not;
        the op then falls back to cpu_llvm and the placement report shows the reason.
        """

    @hookspec
    def tensorkiln_passes(self, target):
        """Return extra graph passes (registered `tensorkiln.passes.Pass` objects) for `target`.

        Called by the compiler when it builds the pass pipeline for `target`; the
        passes run after the core's own graph passes, before fusion.
        """
