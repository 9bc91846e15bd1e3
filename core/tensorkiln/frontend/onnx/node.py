"""OnnxNode: what a converter sees of one ONNX node (inputs as graph Exprs, attributes, opset)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...graph.expr import Call, Constant, Expr, Tuple
from ...graph.interpreter import evaluate_call
from ...graph.registry import get_op
from ...graph.traversal import free_vars
from ...graph.types import TensorType, TupleType
from ...ir.errors import DTypeError, FrontendError, ShapeError, UnsupportedOpError
from ...ir.memory import check_tensor_fits

__all__ = ["OnnxNode", "ValueNotStaticError"]


class ValueNotStaticError(UnsupportedOpError):
    """A parameter the graph IR needs statically (axes, pads, a shape) is computed from graph inputs.

    `inputs` names the graph inputs it depends on: a caller that knows their values (at run time,
    `tensorkiln.compiler.dynamic`) re-imports with them bound as `constants=` and caches the result.
    """

    def __init__(self, message: str, inputs: tuple[str, ...]) -> None:
        super().__init__(message)
        self.inputs = inputs


@dataclass
class OnnxNode:
    """One ONNX node being converted. Converters build graph calls with `call`, which
    folds calls whose arguments are all constants, so shape computations
    (Shape -> Gather -> Concat -> Reshape) end as static attributes."""

    op_type: str
    name: str
    inputs: list[Expr | None]
    attrs: dict[str, Any]
    opset: int
    num_outputs: int
    output_names: list[str] = field(default_factory=list)
    memory_limit: int | None = None  # bytes one tensor may take; checked before anything is built or folded
    scope: Any = None  # the importer's SubgraphScope: converts the subgraphs of If/Loop/Scan (control_flow.py)
    # per input, the narrow storage format (ir/narrow_dtypes.py) its carrier holds, or None
    input_formats: list[Any] = field(default_factory=list)

    def attr(self, name: str, default: Any = None) -> Any:
        return self.attrs.get(name, default)

    def input(self, index: int) -> Expr | None:
        """Input `index`, or None when it is absent or empty (an optional input)."""
        return self.inputs[index] if index < len(self.inputs) else None

    def input_format(self, index: int):
        """The NarrowFormat of input `index` (float8, int4, ...: the input is its carrier), or None."""
        return self.input_formats[index] if index < len(self.input_formats) else None

    def required(self, index: int) -> Expr:
        value = self.input(index)
        if value is None:
            raise FrontendError(f"ONNX node {self.name!r} ({self.op_type}) lacks its required input {index}")
        return value

    def const(self, index: int, what: str = "") -> np.ndarray | None:
        """The value of input `index` when it is constant-evaluable; None when absent.

        Raises UnsupportedOpError when the input is computed at run time: the
        graph IR needs this parameter statically.
        """
        value = self.input(index)
        if value is None:
            return None
        if not isinstance(value, Constant):
            label = what or f"input {index}"
            names = tuple(dict.fromkeys(var.name for var in free_vars(value)))
            raise ValueNotStaticError(
                f"ONNX node {self.name!r} ({self.op_type}): {label} must be known at import time, but it is "
                f"computed from graph inputs {', '.join(map(repr, names))}; tk.compile specialises on their "
                "values at run time, or bind them with from_onnx(..., constants={...})", names)
        return value.value

    def const_ints(self, index: int, what: str) -> tuple[int, ...]:
        """A 1-D constant integer input (a shape, pads, starts, repeats) as ints; ONNX requires it 1-D."""
        value = np.asarray(self.const(index, what))
        if value.ndim != 1:
            raise ShapeError(f"ONNX node {self.name!r} ({self.op_type}): {what} (input {index}) must be a 1-D "
                             f"tensor, got shape {value.shape}")
        if value.dtype.kind not in "iu":
            raise DTypeError(f"ONNX node {self.name!r} ({self.op_type}): {what} (input {index}) must be integers, "
                             f"got {value.dtype}")
        return tuple(int(v) for v in value)

    def call(self, op_name: str, *args: Expr, **attrs: Any) -> Expr:
        """Build `op_name(*args, **attrs)` named after this node; fold it when every argument is constant."""
        op = get_op(op_name)
        node = Call(op, tuple(args), op.make_attrs(None, **attrs), self.name or None)
        result_type = node.checked_type
        for index, ttype in enumerate(result_type.fields if isinstance(result_type, TupleType) else (result_type,)):
            if isinstance(ttype, TensorType):
                self.check_fits(ttype.shape, ttype.dtype, f"{op_name} result {index}")
        if args and all(isinstance(a, Constant) for a in args):
            value = evaluate_call(node, [a.value for a in args])
            if isinstance(value, tuple):
                return Tuple(tuple(Constant(np.asarray(v)) for v in value))
            return Constant(np.asarray(value))
        return node

    def check_fits(self, shape, dtype: str, what: str) -> None:
        """Raise MemoryLimitError when a tensor of `shape` would exceed the memory limit (call it before
        allocating one, e.g. a ConstantOfShape)."""
        check_tensor_fits(shape, dtype, self.memory_limit,
                          f"ONNX node {self.name!r} ({self.op_type}): {what}")

    def unsupported(self, reason: str) -> UnsupportedOpError:
        return UnsupportedOpError(f"ONNX node {self.name!r} ({self.op_type}, opset {self.opset}): {reason}")
