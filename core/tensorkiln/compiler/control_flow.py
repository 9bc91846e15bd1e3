"""Compiling control flow: constant conditions folded, bodies compiled as models of their own.

`fold_constant_conditions` replaces an `if` whose condition is a constant (after the
graph passes folded what they could) by the body of the branch taken, so only that
branch is compiled. Every other `if`, `loop` and `scan` call is a group of one op after
fusion (their pattern is OPAQUE); `compile_control_steps` compiles each of its bodies
with `tk.compile` itself (same target and options; a body's own control flow recurses)
and makes the group a host step of the plan (runtime/control_flow.py).
"""
from __future__ import annotations

from typing import Any, Callable

from ..graph import Call, Constant, Expr, Function, Module, post_order, rewrite, with_operands
from ..graph.ops.control_flow import body_functions, is_control_flow
from ..ir.errors import InternalError
from ..runtime.control_flow import ArgumentSpec, ControlFlowProgram

__all__ = ["fold_constant_conditions", "inline_function", "control_call", "compile_control_steps"]


def inline_function(function: Function, args: tuple[Expr, ...]) -> Expr:
    """`function`'s body with each parameter replaced by its argument."""
    memo: dict[int, Expr] = {id(p): a for p, a in zip(function.params, args)}
    for node in post_order(function.body):
        if id(node) not in memo:
            memo[id(node)] = with_operands(node, memo, False)
    return memo[id(function.body)]


def fold_constant_conditions(mod: Module) -> Module:
    """Every `if` of main with a constant condition replaced by its taken branch, inlined."""
    def fold(node: Expr) -> Expr | None:
        if not (isinstance(node, Call) and getattr(node.op, "name", None) == "if" and isinstance(node.args[0], Constant)):
            return None
        taken = node.attrs.then_branch if bool(node.args[0].value.reshape(-1)[0]) else node.attrs.else_branch
        return inline_function(taken, node.args[1:])

    main = mod.main
    folded = rewrite(main, fold)
    return mod if folded is main else mod.with_function("main", folded)


def control_call(group: Function) -> Call | None:
    """The control-flow call a group function consists of, or None for a kernel group."""
    body = group.body
    if isinstance(body, Call) and is_control_flow(body.op):
        return body
    return None


def _argument_spec(group: Function, call: Call) -> ArgumentSpec:
    positions = {id(p): index for index, p in enumerate(group.params)}
    sources = []
    for arg in call.args:
        if id(arg) in positions:
            sources.append(positions[id(arg)])
        elif isinstance(arg, Constant):
            sources.append(arg.value)   # a scalar constant fusion inlined into the group
        else:
            raise InternalError(f"an argument of {call.op.name} is neither a parameter nor a constant of its group")
    return ArgumentSpec(tuple(sources))


def compile_control_steps(calls: list[Call], compile_body: Callable[[Module], Any]
                          ) -> tuple[dict[str, ControlFlowProgram], dict[int, str]]:
    """A host program per control-flow group call (identical groups share one), and each call's step
    name. `compile_body(module)` compiles one body (the driver's compile with the same options)."""
    programs: dict[str, ControlFlowProgram] = {}
    by_group: dict[Function, str] = {}
    names: dict[int, str] = {}
    for group_call in calls:
        group = group_call.op
        if group not in by_group:
            call = control_call(group)
            name = f"control_{call.op.name}_{len(programs)}"
            bodies = [compile_body(Module((("main", body),))) for body in body_functions(call.attrs)]
            programs[name] = ControlFlowProgram(call.attrs, bodies, _argument_spec(group, call))
            by_group[group] = name
        names[id(group_call)] = by_group[group]
    return programs, names

