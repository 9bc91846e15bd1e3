"""Graph IR nodes: a typed SSA dataflow graph.

Every node is a small frozen dataclass; `==` and `hash` are structural and cached
(`tensorkiln.ir.structural`). Each expression is typed when it is built:
`expr.checked_type` is a TensorType, TupleType or FuncType, and a Call whose
argument types do not fit its op raises ShapeError/DTypeError at construction,
naming the op, the node and the shapes. Change a node with `dataclasses.replace`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping

import numpy as np

from ..ir.dtypes import from_numpy
from ..ir.errors import DTypeError, FrontendError, ShapeError, TensorkilnError
from ..ir.structural import Node
from .attrs import NO_ATTRS, Attrs
from .registry import Op, VARIADIC
from .types import FuncType, TensorType, TupleType, Type

__all__ = ["Expr", "Var", "Constant", "Call", "Tuple", "TupleGetItem", "Function", "Module"]


@dataclass(frozen=True, slots=True, eq=False)
class Expr(Node):
    """Base of graph expressions. `checked_type` is set when the node is built."""

    checked_type: Type = field(init=False, repr=False, compare=False)
    _shash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "checked_type", self._infer_type())
        self._init_struct_hash()

    def _infer_type(self) -> Type:
        raise NotImplementedError

    # Shorthands for the common tensor case.
    @property
    def shape(self) -> tuple[int, ...]:
        return _tensor_type(self).shape

    @property
    def dtype(self) -> str:
        return _tensor_type(self).dtype

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __add__(self, other): return _binary("add", self, other)
    def __radd__(self, other): return _binary("add", other, self)
    def __sub__(self, other): return _binary("subtract", self, other)
    def __rsub__(self, other): return _binary("subtract", other, self)
    def __mul__(self, other): return _binary("multiply", self, other)
    def __rmul__(self, other): return _binary("multiply", other, self)
    def __truediv__(self, other): return _binary("divide", self, other)
    def __rtruediv__(self, other): return _binary("divide", other, self)

    def __neg__(self):
        from .registry import get_op
        return Call(get_op("negative"), (self,))

    def __getitem__(self, index: int) -> "TupleGetItem":
        if not isinstance(self.checked_type, TupleType):
            raise TypeError(f"only tuple-typed expressions can be indexed; this one is {self.checked_type}")
        return TupleGetItem(self, index)

    __hash__ = Node.__hash__
    __eq__ = Node.__eq__

    def summary(self) -> str:
        """One line: this node with its operands abbreviated (for error messages)."""
        from .printer import summarize
        return summarize(self)

    def __str__(self) -> str:
        from .printer import print_expr
        return print_expr(self)

    def __bool__(self) -> bool:
        return True


@dataclass(frozen=True, slots=True, eq=False)
class Var(Expr):
    """A named input: Var("x", TensorType((1, 3), "float32")). Identity matters, not the name."""

    name: str
    type_annotation: Type
    is_variable = True

    def _infer_type(self) -> Type:
        if not isinstance(self.type_annotation, (TensorType, TupleType)):
            raise TypeError(f"Var {self.name!r} needs a TensorType or TupleType, got {self.type_annotation!r}")
        return self.type_annotation

    def _struct_key(self) -> tuple:
        return (self.type_annotation,)


@dataclass(frozen=True, slots=True, eq=False)
class Constant(Expr):
    """A constant tensor. The numpy value is read-only; build with graph.const(...).

    A writable array is copied first (the caller may still change it); a pass that made the array
    itself and keeps no other reference can hand it over read-only (`owned_constant`) and skip the copy.
    """

    value: np.ndarray

    def __post_init__(self) -> None:
        value = np.asarray(self.value)
        if value.dtype == np.float64 and not isinstance(self.value, np.ndarray):
            value = value.astype(np.float32)
        if value.flags.writeable:
            value = value.copy()
            value.flags.writeable = False
        object.__setattr__(self, "value", value)
        Expr.__post_init__(self)

    def _infer_type(self) -> Type:
        return TensorType(self.value.shape, from_numpy(self.value.dtype))

    def _struct_key(self) -> tuple:
        return (self.value,)


def owned_constant(array: np.ndarray) -> "Constant":
    """A Constant of `array`, which the caller made and no longer changes: marked read-only, not copied
    (weights rewritten by passes: resnet50's BN-folded and permuted weights were copied twice)."""
    array.flags.writeable = False
    return Constant(array)


@dataclass(frozen=True, slots=True, eq=False)
class Call(Expr):
    """Apply a registered op (or a Function): nn.conv2d(x, w, Conv2DAttrs(strides=(2, 2))).

    `span` names where the node came from (an ONNX node name). `target` (a target
    string) and `fallback_reason` are set by the compiler's placement step: which target
    runs the op, and why it is not the requested one. None of the three is part of
    structural equality.
    """

    op: Op | "Function"
    args: tuple[Expr, ...]
    attrs: Attrs = NO_ATTRS
    span: str | None = field(default=None, compare=False)
    target: str | None = field(default=None, compare=False)
    fallback_reason: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        Expr.__post_init__(self)

    def _infer_type(self) -> Type:
        arg_types = tuple(arg.checked_type for arg in self.args)
        if isinstance(self.op, Function):
            param_types = tuple(p.checked_type for p in self.op.params)
            if param_types != arg_types:
                raise ShapeError(
                    f"call of a function with parameter types {[str(t) for t in param_types]} "
                    f"with arguments of types {[str(t) for t in arg_types]}", node=_Located(self))
            return self.op.ret_type
        if not isinstance(self.op, Op):
            raise TypeError(f"Call.op must be an Op or a Function, got {self.op!r}")
        if self.op.num_inputs != VARIADIC and len(self.args) != self.op.num_inputs:
            raise ShapeError(f"{self.op.name} takes {self.op.num_inputs} inputs, got {len(self.args)}",
                             node=_Located(self))
        if not isinstance(self.attrs, self.op.attrs_type):
            raise TypeError(f"{self.op.name} takes {self.op.attrs_type.__name__}, got {type(self.attrs).__name__}")
        try:
            return self.op.type_rule(arg_types, self.attrs)
        except (ShapeError, DTypeError) as error:
            if error.node is not None:
                raise
            raise type(error)(str(error), node=_Located(self)) from None

    def _struct_key(self) -> tuple:
        return (self.op if isinstance(self.op, Op) else None, self.attrs)

    def _struct_children(self) -> tuple:
        return (self.op, *self.args) if isinstance(self.op, Function) else self.args


@dataclass(frozen=True, slots=True, eq=False)
class Tuple(Expr):
    """Group several values: the body of a multi-output function."""

    fields: tuple[Expr, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "fields", tuple(self.fields))
        Expr.__post_init__(self)

    def _infer_type(self) -> Type:
        return TupleType(tuple(f.checked_type for f in self.fields))

    def _struct_key(self) -> tuple:
        return ()

    def _struct_children(self) -> tuple:
        return self.fields

    def __len__(self) -> int:
        return len(self.fields)

    def __getitem__(self, index: int) -> Expr:
        return self.fields[index]


@dataclass(frozen=True, slots=True, eq=False)
class TupleGetItem(Expr):
    """Field `index` of a tuple-typed expression (an output of split or topk)."""

    tuple_value: Expr
    index: int

    def _infer_type(self) -> Type:
        tuple_type = self.tuple_value.checked_type
        if not isinstance(tuple_type, TupleType):
            raise ShapeError(f"TupleGetItem of a non-tuple of type {tuple_type}", node=_Located(self))
        if not 0 <= self.index < len(tuple_type.fields):
            raise ShapeError(f"TupleGetItem index {self.index} out of range for {tuple_type}", node=_Located(self))
        return tuple_type.fields[self.index]

    def _struct_key(self) -> tuple:
        return (self.index,)

    def _struct_children(self) -> tuple:
        return (self.tuple_value,)


@dataclass(frozen=True, slots=True, eq=False)
class Function(Expr):
    """fn(params) { body }. `attrs` are (name, value) pairs, e.g. (("Primitive", 1),) for a fused group."""

    params: tuple[Var, ...]
    body: Expr
    attrs: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "params", tuple(self.params))
        if isinstance(self.attrs, Mapping):
            object.__setattr__(self, "attrs", tuple(sorted(self.attrs.items())))
        for param in self.params:
            if not isinstance(param, Var):
                raise TypeError(f"Function parameters must be Vars, got {param!r}")
        Expr.__post_init__(self)

    def _infer_type(self) -> Type:
        return FuncType(tuple(p.checked_type for p in self.params), self.body.checked_type)

    @property
    def ret_type(self) -> Type:
        return self.body.checked_type

    def attr(self, name: str, default: Any = None) -> Any:
        return dict(self.attrs).get(name, default)

    def _struct_key(self) -> tuple:
        return (self.attrs,)

    def _struct_children(self) -> tuple:
        return (self.body,)

    def _struct_binds(self) -> tuple:
        return self.params


@dataclass(frozen=True, slots=True, eq=False)
class Module(Node):
    """Named functions; "main" is the entry. `Module.from_expr(expr)` builds main from free vars."""

    functions: tuple[tuple[str, Function], ...]
    _shash: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        items = self.functions.items() if isinstance(self.functions, Mapping) else self.functions
        items = tuple(sorted(((str(n), f) for n, f in items), key=lambda item: item[0]))
        for name, function in items:
            if not isinstance(function, Function):
                raise TypeError(f"Module function {name!r} must be a Function, got {type(function).__name__}")
        object.__setattr__(self, "functions", items)
        self._init_struct_hash()

    @staticmethod
    def from_expr(expr: Expr, name: str = "main") -> "Module":
        """Wrap `expr` as function `name` whose parameters are its free variables (first-use order)."""
        if not isinstance(expr, Function):
            from .traversal import free_vars
            expr = Function(tuple(free_vars(expr)), expr)
        return Module(((name, expr),))

    def __getitem__(self, name: str) -> Function:
        for key, function in self.functions:
            if key == name:
                return function
        raise KeyError(f"module has no function {name!r}; it has {[k for k, _ in self.functions]}")

    def __contains__(self, name: str) -> bool:
        return any(key == name for key, _ in self.functions)

    def __iter__(self) -> Iterator[tuple[str, Function]]:
        return iter(self.functions)

    @property
    def main(self) -> Function:
        return self["main"]

    def with_function(self, name: str, function: Function) -> "Module":
        """A copy with function `name` added or replaced."""
        return Module(tuple((k, f) for k, f in self.functions if k != name) + ((name, function),))

    def map_functions(self, rewrite) -> "Module":
        """This module with every function replaced by `rewrite(function)`; the module itself when `rewrite`
        returned each function unchanged (a pass that finds nothing to do keeps the module's identity)."""
        functions = tuple((name, rewrite(function)) for name, function in self.functions)
        if all(new is old for (_, new), (_, old) in zip(functions, self.functions)):
            return self
        return Module(functions)

    def _struct_key(self) -> tuple:
        return tuple(name for name, _ in self.functions)

    def _struct_children(self) -> tuple:
        return tuple(function for _, function in self.functions)

    def __str__(self) -> str:
        from .printer import print_module
        return print_module(self)

    __hash__ = Node.__hash__
    __eq__ = Node.__eq__


class _Located:
    """What an error message shows for a node: its one-line summary."""

    __slots__ = ("expr",)

    def __init__(self, expr: Expr) -> None:
        self.expr = expr

    def __str__(self) -> str:
        from .printer import summarize
        return summarize(self.expr)


def _tensor_type(expr: Expr) -> TensorType:
    if not isinstance(expr.checked_type, TensorType):
        raise TypeError(f"expected a tensor-typed expression, got type {expr.checked_type}")
    return expr.checked_type


def _binary(op_name: str, lhs: Any, rhs: Any) -> Call:
    from .registry import get_op
    if not isinstance(lhs, Expr):
        lhs = _scalar_like(lhs, rhs)
    if not isinstance(rhs, Expr):
        rhs = _scalar_like(rhs, lhs)
    return Call(get_op(op_name), (lhs, rhs))


def _scalar_like(value: Any, other: Expr) -> Constant:
    """A Python number next to a graph expression takes the expression's dtype."""
    if isinstance(value, np.ndarray):
        return Constant(value)
    if isinstance(value, (int, float, bool, np.number)):
        from ..ir.dtypes import to_numpy
        return Constant(np.array(value, dtype=to_numpy(other.dtype)))
    raise TypeError(f"cannot combine a graph expression with {type(value).__name__}")
