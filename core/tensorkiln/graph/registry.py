"""The op registry: one record per op with all its rules side by side.

```python
conv2d = register_op(
    "nn.conv2d",
    attrs=Conv2DAttrs,
    type_rule=_conv2d_type,        # (arg_types, attrs) -> result type; raises ShapeError
    reference=_conv2d_reference,   # numpy: reference(*inputs, attrs) -> ndarray (or tuple)
    pattern=OpPattern.OUT_ELEMWISE_FUSABLE,
    num_inputs=2,
    tolerance={"float16": 2e-3},
)
```

An op that reads one argument as indices into another (take, gather_elements, gather_nd)
also gives `index_bounds`: (arg_types, attrs) -> IndexBounds, the range each index must lie
in. Generated code clamps indices; the compiler checks constant indices against these
bounds, and the executor checks run-time ones before the kernel runs.

`compute` starts as None; the te/ops layer fills it with `set_compute(name, fn)`
(fn(input_te_tensors, attrs, out_type) -> te.Tensor). Schedules are not the op's:
a target's strategies (tensorkiln.sdk.strategy) or the core's naive default decide them.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Callable

from ..ir.errors import InternalError, UnsupportedOpError
from .attrs import NO_ATTRS, Attrs, NoAttrs

__all__ = ["OpPattern", "Op", "IndexBounds", "register_op", "get_op", "list_ops", "set_compute",
           "VARIADIC", "DEFAULT_TOLERANCE"]

VARIADIC = -1
DEFAULT_TOLERANCE = {"float16": 1e-2, "float32": 1e-5, "float64": 1e-10}


class OpPattern(enum.IntEnum):
    """Fusion kinds, ordered as TVM orders them: a lower value fuses more freely."""

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    COMM_REDUCE = 3
    OUT_ELEMWISE_FUSABLE = 4
    OPAQUE = 8


@dataclass(frozen=True, slots=True)
class IndexBounds:
    """Argument `argument` of a call holds indices, each valid in [-n, n): n is `extents[0]` for
    every index, or `extents[j]` for index[..., j] when `per_last_axis` (gather_nd's tuples)."""

    argument: int
    extents: tuple[int, ...]
    per_last_axis: bool = False


@dataclass(eq=False, slots=True)
class Op:
    """A registered operator. Compared by identity: there is one record per name."""

    name: str
    attrs_type: type[Attrs]
    type_rule: Callable[[tuple, Any], Any]
    reference: Callable[..., Any]
    pattern: OpPattern
    num_inputs: int = VARIADIC
    tolerance: dict[str, float] = field(default_factory=dict)
    doc: str = ""
    compute: Callable[..., Any] | None = None
    index_bounds: Callable[[tuple, Any], IndexBounds] | None = None

    def rtol(self, dtype: str) -> float:
        """Relative tolerance for comparing an implementation with the reference."""
        return self.tolerance.get(dtype, DEFAULT_TOLERANCE.get(dtype, 0.0))

    def make_attrs(self, attrs: Attrs | None = None, **kwargs: Any) -> Attrs:
        """Build (or check) this op's attribute record."""
        if attrs is None:
            return self.attrs_type(**kwargs) if kwargs or self.attrs_type is not NoAttrs else NO_ATTRS
        if kwargs:
            raise TypeError(f"{self.name}: pass either an attrs record or keyword attributes, not both")
        if not isinstance(attrs, self.attrs_type):
            raise TypeError(f"{self.name} takes {self.attrs_type.__name__}, got {type(attrs).__name__}")
        return attrs

    def __repr__(self) -> str:
        return f"Op({self.name!r})"

    def __str__(self) -> str:
        return self.name


_OPS: dict[str, Op] = {}


def register_op(name: str, *, attrs: type[Attrs] = NoAttrs, type_rule: Callable, reference: Callable,
                pattern: OpPattern, num_inputs: int = VARIADIC, tolerance: dict[str, float] | None = None,
                doc: str = "", index_bounds: Callable[[tuple, Any], IndexBounds] | None = None) -> Op:
    """Register op `name` and return its record; registering a name twice is a bug."""
    if name in _OPS:
        raise InternalError(f"op {name!r} is registered twice")
    op = Op(name, attrs, type_rule, reference, OpPattern(pattern), num_inputs, dict(tolerance or {}), doc,
            index_bounds=index_bounds)
    _OPS[name] = op
    return op


def get_op(name: str) -> Op:
    """The record of op `name`; UnsupportedOpError if no op has that name."""
    _load_ops()
    try:
        return _OPS[name]
    except KeyError:
        raise UnsupportedOpError(f"no graph op named {name!r}; registered ops: {', '.join(sorted(_OPS))}") from None


def list_ops() -> list[Op]:
    """Every registered op, sorted by name."""
    _load_ops()
    return [_OPS[n] for n in sorted(_OPS)]


def set_compute(op_name: str, fn: Callable) -> None:
    """Attach a te compute: fn(input_te_tensors: list, attrs, out_type) -> te.Tensor (or tuple)."""
    get_op(op_name).compute = fn


def _load_ops() -> None:
    from . import ops  # noqa: F401  (registers every built-in op on first import)
