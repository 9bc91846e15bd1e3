"""te/tensor.py: Tensor, operations (placeholder, compute) and axes.

    A = te.placeholder((64, 64), name="A")
    k = te.reduce_axis((0, 64), name="k")
    C = te.compute((64, 64), lambda i, j: te.sum(A[i, k] * A[k, j], axis=k), name="C")
    C.op.axis        # (iter_var(i), iter_var(j))
    C.op.reduce_axis # (iter_var(k),)
"""
from __future__ import annotations

import inspect
from typing import Callable, Sequence

import numpy as np

from ..ir.dtypes import dtype_of, to_python
from ..ir.errors import ShapeError
from ..tir import nodes as n
from ..tir.visit import post_order_visit, rewrite
from .expr import IterVar, Range, Reduce, TensorRead, flatten_indices

__all__ = ["Tensor", "Operation", "PlaceholderOp", "ComputeOp", "placeholder", "compute",
           "reduce_axis", "thread_axis"]


class Tensor:
    """The output of an operation; index it to build expressions: `A[i, j]`."""

    __slots__ = ("op", "value_index", "shape", "dtype", "name")

    def __init__(self, op: "Operation", shape: tuple, dtype: str, name: str, value_index: int = 0):
        self.op, self.shape, self.dtype, self.name, self.value_index = op, shape, dtype, name, value_index

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> TensorRead:
        indices = flatten_indices(indices if isinstance(indices, tuple) else (indices,))
        if len(indices) != len(self.shape):
            raise ShapeError(f"tensor {self.name} has shape {_shape_text(self.shape)} ({len(self.shape)} dims) "
                             f"but is indexed with {len(indices)} indices")
        return TensorRead(self, tuple(n.as_expr(i, "int32") for i in indices))

    def __str__(self) -> str:
        return f"Tensor({self.name}, shape={_shape_text(self.shape)}, dtype={self.dtype})"

    __repr__ = __str__


def _shape_text(shape) -> str:
    return "(" + ", ".join(str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"


class Operation:
    """Base of te operations; `output(0)` is the tensor it produces."""

    name: str
    tag: str = ""

    def output(self, index: int = 0) -> Tensor:
        if index != 0:
            raise ShapeError(f"operation {self.name} has one output, not {index + 1}")
        return self._tensor

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        return ()

    @property
    def num_outputs(self) -> int:
        return 1

    def __str__(self) -> str:
        return f"{type(self).__name__}({self.name})"

    __repr__ = __str__


class PlaceholderOp(Operation):
    """An input tensor, bound to a kernel argument."""

    def __init__(self, name: str, shape: tuple, dtype: str):
        self.name, self.shape, self.dtype = name, shape, dtype
        self._tensor = Tensor(self, shape, dtype, name)


class ComputeOp(Operation):
    """`out[axis] = body(axis)`; body may be a Reduce over `reduce_axis`."""

    def __init__(self, name: str, tag: str, axis: tuple[IterVar, ...], body: n.PrimExpr,
                 attrs: dict | None = None):
        self.name, self.tag, self.axis, self.body = name, tag, axis, body
        self.attrs = dict(attrs or {})
        self.reduce_axis = body.axis if isinstance(body, Reduce) else ()
        self.shape = tuple(a.dom.extent for a in axis)
        self.dtype = body.dtype
        self._tensor = Tensor(self, self.shape, self.dtype, name)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        found: dict[int, Tensor] = {}

        def fn(x):
            if isinstance(x, TensorRead):
                found.setdefault(id(x.tensor), x.tensor)
        post_order_visit(self.body, fn)
        return tuple(found.values())

    def with_body(self, body: n.PrimExpr, name: str | None = None) -> "ComputeOp":
        """A new op with the same axes and a new body (used by cache_read/cache_write)."""
        return ComputeOp(name or self.name, self.tag, self.axis, body, self.attrs)


def _static_extent(value, what: str):
    if isinstance(value, IterVar):
        value = value.var
    if isinstance(value, (bool, np.bool_)):
        raise ShapeError(f"{what}: extent {to_python(value)!r} is not an integer")
    if isinstance(value, (int, np.integer)):   # numpy integers too: extents often come from array shapes
        if value < 0:
            raise ShapeError(f"{what}: extent {int(value)} is negative")
        return int(value)
    if isinstance(value, n.IntImm):
        return value.value
    if isinstance(value, n.PrimExpr):
        return value  # symbolic extents: tensor intrinsic descriptions only
    raise ShapeError(f"{what}: extent {to_python(value)!r} is not an int or a te.var")


def placeholder(shape, dtype: str = "float32", name: str = "placeholder") -> Tensor:
    """An input tensor: `A = te.placeholder((64, 64), "float32", name="A")`."""
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
    dtype_of(dtype)
    shape = tuple(_static_extent(s, f"te.placeholder {name}") for s in shape)
    return PlaceholderOp(name, shape, dtype).output(0)


def reduce_axis(dom, name: str = "rv") -> IterVar:
    """A reduction axis over [lo, hi): `k = te.reduce_axis((0, 64), name="k")`."""
    lo, hi = _range_of(dom, f"te.reduce_axis {name}")
    if isinstance(hi, int) and isinstance(lo, int):
        extent = hi - lo
    elif isinstance(lo, int) and lo == 0:
        extent = hi
    else:
        extent = n.Sub(n.as_expr(hi), n.as_expr(lo))
    if isinstance(extent, int) and extent < 0:
        raise ShapeError(f"te.reduce_axis {name}: range ({lo}, {hi}) has a negative extent")
    # An empty range is legal: the reduction yields its identity (ONNX ReduceSum over an empty axis).
    return IterVar(name, n.Var(name), Range(lo, extent), "reduce")


def _range_of(dom, what):
    if isinstance(dom, Range):
        return dom.min, (dom.min + dom.extent)
    if isinstance(dom, (tuple, list)) and len(dom) == 2:
        return _static_extent(dom[0], what), _static_extent(dom[1], what)
    raise ShapeError(f"{what}: domain must be (lo, hi), got {to_python(dom)!r}")


def thread_axis(dom_or_tag=None, tag: str = "", name: str = "") -> IterVar:
    """A GPU index: `te.thread_axis("threadIdx.x")` or `te.thread_axis((0, 32), "threadIdx.x")`."""
    dom = None
    if isinstance(dom_or_tag, str):
        tag = dom_or_tag
    elif dom_or_tag is not None:
        lo, hi = _range_of(dom_or_tag, "te.thread_axis")
        dom = Range(lo, hi - lo)
    if not tag or tag.split(".")[0] not in ("blockIdx", "threadIdx", "vthread") and tag != "vthread":
        raise ShapeError(f"te.thread_axis: unknown tag {tag!r}; use blockIdx.x/y/z or threadIdx.x/y/z")
    return IterVar(name or tag, n.Var(name or tag), dom, "thread", tag)


def _axis_names(fcompute: Callable, ndim: int) -> list[str]:
    try:
        params = list(inspect.signature(fcompute).parameters.values())
    except (TypeError, ValueError):
        params = []
    if params and all(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params):
        if len(params) != ndim:
            raise ShapeError(f"te.compute: the lambda takes {len(params)} indices but the shape has {ndim} dims")
        return [p.name for p in params]
    return [f"i{d}" for d in range(ndim)]


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "", attrs: dict | None = None) -> Tensor:
    """`C = te.compute((M, N), lambda i, j: A[i, j] + 1.0, name="C")`.

    The body may be `te.sum(..., axis=k)` (or another reducer) as a whole; reductions
    nested inside other expressions are rejected.
    """
    shape = tuple(shape) if isinstance(shape, (list, tuple)) else (shape,)
    shape = tuple(_static_extent(s, f"te.compute {name}") for s in shape)
    names = _axis_names(fcompute, len(shape))
    axis = tuple(IterVar(nm, n.Var(nm), Range(0, extent), "data") for nm, extent in zip(names, shape))
    body = n.as_expr(fcompute(*(a.var for a in axis)), "float32")
    body = _normalize(body, name)
    return ComputeOp(name, tag, axis, body, attrs).output(0)


def _normalize(body: n.PrimExpr, name: str) -> n.PrimExpr:
    """Replace IterVars used as values by their Vars; check Reduce is only at the top."""
    def pre(x):
        if isinstance(x, IterVar):
            return x.var
        return None
    if isinstance(body, Reduce):
        source = rewrite(body.source, pre=pre)
        condition = None if body.condition is None else rewrite(body.condition, pre=pre)
        _reject_nested_reduce(source, name)
        return Reduce(body.combiner, source, body.axis, condition)
    body = rewrite(body, pre=pre)
    _reject_nested_reduce(body, name)
    return body


def _reject_nested_reduce(expr, name):
    def fn(x):
        if isinstance(x, Reduce):
            raise ShapeError(f"te.compute {name}: a reduction ({x}) must be the whole body of the compute, "
                             "not part of a larger expression; compute it in its own te.compute")
    post_order_visit(expr, fn)


def tensors_of(values: Sequence) -> list[Tensor]:
    out = []
    for v in values:
        if isinstance(v, Operation):
            v = v.output(0)
        out.append(v)
    return out
