"""Converting the subgraphs of If, Loop and Scan into closed graph Functions.

An ONNX subgraph may read any value of an enclosing graph by name. The graph IR's
control-flow bodies are closed instead (graph/ops/control_flow.py): each value a
subgraph reads from outside becomes a parameter of its Function (a new Var), and
the control-flow call passes the outer value as an argument. `CaptureScope` does
this conversion while the subgraph's nodes are converted: looking up an outer name
records a capture. Constants are not captured, they are copied into the body (so a
body folds and fuses with its weights). Scopes chain, so a subgraph inside a
subgraph captures through its parent, to any depth.
"""
from __future__ import annotations

from collections.abc import MutableMapping
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from ...graph.expr import Constant, Expr, Function, Tuple, Var
from ...graph.types import Type
from ...ir.errors import FrontendError
from .converters.sequence import SequenceValue

__all__ = ["SubgraphScope", "CaptureScope", "Subgraph", "union_functions"]


class CaptureScope(MutableMapping):
    """The values a subgraph sees: its own first, then its enclosing scope's.

    With `capture`, a non-constant outer value is seen as a new Var of the same type
    (recorded in `captured`, by name, with the outer value); without, as itself (a branch
    inlined because its condition is constant).
    """

    def __init__(self, outer, capture: bool = True) -> None:
        self.local: dict[str, Any] = {}
        self.outer = outer
        self.capture = capture
        self.captured: dict[str, tuple[Var, Any]] = {}

    def __contains__(self, name: object) -> bool:
        return name in self.local or name in self.outer

    def __getitem__(self, name: str) -> Any:
        if name in self.local:
            return self.local[name]
        value = self.outer[name]
        if isinstance(value, SequenceValue) and self.capture:   # each element captured on its own
            return SequenceValue(tuple(self._capture(f"{name}[{i}]", item) for i, item in enumerate(value.items)),
                                 value.dtype)
        return self._capture(name, value)

    def _capture(self, name: str, value: Any) -> Any:
        if not self.capture or isinstance(value, Constant) or not isinstance(value, Expr):
            return value
        if name not in self.captured:
            self.captured[name] = (Var(name, value.checked_type), value)
        return self.captured[name][0]

    def __setitem__(self, name: str, value: Any) -> None:
        self.local[name] = value

    def __delitem__(self, name: str) -> None:
        del self.local[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self.local)

    def __len__(self) -> int:
        return len(self.local)


@dataclass
class Subgraph:
    """A converted subgraph: its parameters, its outputs and the outer values it captured."""

    params: list[Var]
    outputs: list[Any]
    captured: dict[str, tuple[Var, Any]]

    def output_types(self) -> list[Type]:
        return [o.checked_type for o in self.outputs]


@dataclass
class SubgraphScope:
    """What a converter needs to convert a node's subgraph: the enclosing values, the opsets
    and the importer's context."""

    values: Any
    opsets: dict[str, int]
    context: Any
    depth: int = 0

    def convert(self, graph, param_types: Sequence[Type], capture: bool = True, where: str = "") -> Subgraph:
        """Convert GraphProto `graph` whose inputs have types `param_types` (in order)."""
        import onnx
        from .importer import _check_supported, _convert_node, _tensor_to_array
        if len(param_types) != len(graph.input):
            raise FrontendError(f"{where}: the subgraph has {len(graph.input)} inputs, the op passes "
                                f"{len(param_types)}")
        scope = CaptureScope(self.values, capture)
        for tensor in graph.initializer:
            scope[tensor.name] = Constant(_tensor_to_array(tensor))
        params = []
        for value_info, ttype in zip(graph.input, param_types):
            var = Var(value_info.name, ttype)
            scope[value_info.name] = var
            params.append(var)
        _check_supported(graph.node, self.opsets, self.context, f" (in the subgraph of {where})")
        for node in graph.node:
            _convert_node(node, scope, self.opsets, self.context, onnx, self.depth)
        outputs = []
        for output in graph.output:
            if output.name not in scope:
                raise FrontendError(f"{where}: subgraph output {output.name!r} is not produced by any node")
            outputs.append(scope[output.name])
        if not outputs:
            raise FrontendError(f"{where}: the subgraph has no outputs")
        return Subgraph(params, outputs, scope.captured)


    def child(self) -> "SubgraphScope":
        """A scope whose values are this one's seen through a non-capturing CaptureScope (to bind
        a subgraph's inputs to values and convert its nodes in place, see convert_inline)."""
        return SubgraphScope(CaptureScope(self.values, capture=False), self.opsets, self.context, self.depth)

    def convert_inline(self, graph, where: str = "") -> list[Any]:
        """Convert `graph`'s nodes with its inputs already bound in this scope's values; its outputs."""
        import onnx
        from .importer import _check_supported, _convert_node, _tensor_to_array
        for tensor in graph.initializer:
            self.values[tensor.name] = Constant(_tensor_to_array(tensor))
        _check_supported(graph.node, self.opsets, self.context, f" (in the subgraph of {where})")
        for node in graph.node:
            _convert_node(node, self.values, self.opsets, self.context, onnx, self.depth)
        missing = [output.name for output in graph.output if output.name not in self.values]
        if missing:
            raise FrontendError(f"{where}: subgraph outputs {missing} are not produced by any node")
        return [self.values[output.name] for output in graph.output]


def union_functions(subgraphs: Sequence[Subgraph]) -> tuple[list[Function], list[Expr]]:
    """Closed Functions of sibling subgraphs (If's branches) over the union of what they capture,
    and the outer values to pass for those parameters."""
    names: dict[str, Any] = {}
    for subgraph in subgraphs:
        for name, (_, outer) in subgraph.captured.items():
            names.setdefault(name, outer)
    functions = []
    for subgraph in subgraphs:
        extra = [subgraph.captured[name][0] if name in subgraph.captured else Var(name, outer.checked_type)
                 for name, outer in names.items()]
        body = subgraph.outputs[0] if len(subgraph.outputs) == 1 else Tuple(tuple(subgraph.outputs))
        functions.append(Function(tuple(subgraph.params) + tuple(extra), body))
    return functions, list(names.values())
