"""te/extern.py: `te.extern`, a stage whose loop IR its author writes, and `IRBuilder` to write it.

A te compute defines each output element as an expression of its inputs; it cannot carry a
value from one element to the next, so sequential algorithms (a heap, a running state) do not
fit. An extern stage does, as TVM's te.extern + tir.ir_builder: its body is a tir statement
built by a function of the stage's buffers.

    def prefix_max(ins, outs):
        ib = te.IRBuilder()
        x, y = ib.buffer(ins[0]), ib.buffer(outs[0])
        best = ib.scalar("float32", "best", x[0])
        with ib.for_range(0, 64, name="i") as i:
            best[0] = te.max(best[0], x[i])
            y[i] = best[0]
        return ib.get()
    (Y,) = te.extern([(64,)], [X], prefix_max, dtypes=["float32"], name="Y")

Contract of `fbody(input_buffers, output_buffers) -> tir.Stmt`: one tir.Buffer per input and per
output, in order, each holding its whole tensor flat and row-major (index 0 .. size - 1); the
body writes every element of every output. A loop the body marks "parallel" must have
independent iterations: CPUs run it on threads, and `s[Y].bind_parallel_loops(threads)` maps
it onto GPU threads when it is the body's outermost statement. Schedules cannot otherwise
change an extern stage (every other primitive on it raises ScheduleError); the stages around it
keep their schedules. Its outputs are always stored, never inlined, and its inputs are read
from whole buffers (a producer of an extern stage is computed at the root).
"""
from __future__ import annotations

from contextlib import contextmanager
from typing import Callable, Sequence

from ..ir.dtypes import dtype_of
from ..ir.errors import ScheduleError, ShapeError
from ..tir import nodes as n
from .tensor import Operation, Tensor, _static_extent, tensors_of

__all__ = ["ExternOp", "extern", "IRBuilder", "BufferProxy"]


class ExternOp(Operation):
    """An operation computed by a hand-written loop body (`te.extern`); it may have several outputs."""

    def __init__(self, name: str, tag: str, inputs: Sequence[Tensor], fbody: Callable,
                 shapes: Sequence[tuple], dtypes: Sequence[str], output_names: Sequence[str],
                 attrs: dict | None = None):
        self.name, self.tag, self.fbody = name, tag, fbody
        self.inputs = tuple(inputs)
        self.attrs = dict(attrs or {})
        self.outputs = tuple(Tensor(self, shape, dtype, out_name, index)
                             for index, (shape, dtype, out_name) in enumerate(zip(shapes, dtypes, output_names)))
        # what code written for ComputeOp reads: no loop axes, no expression body
        self.axis, self.reduce_axis, self.body = (), (), None
        self.shape, self.dtype = self.outputs[0].shape, self.outputs[0].dtype
        self._tensor = self.outputs[0]

    def output(self, index: int = 0) -> Tensor:
        if not 0 <= index < len(self.outputs):
            raise ShapeError(f"extern operation {self.name} has {len(self.outputs)} outputs, not {index + 1}")
        return self.outputs[index]

    @property
    def num_outputs(self) -> int:
        return len(self.outputs)

    @property
    def input_tensors(self) -> tuple[Tensor, ...]:
        found: dict[int, Tensor] = {}
        for tensor in self.inputs:
            found.setdefault(id(tensor), tensor)
        return tuple(found.values())

    def build_body(self, input_buffers: Sequence[n.Buffer], output_buffers: Sequence[n.Buffer]) -> n.Stmt:
        """The stage's loop IR over these buffers (called by lowering)."""
        body = self.fbody(list(input_buffers), list(output_buffers))
        if not isinstance(body, n.Stmt):
            raise ScheduleError(f"extern stage {self.name}: its body function returned {type(body).__name__}, "
                                "not a tir statement; return ib.get() (te.IRBuilder) or a tir.Stmt")
        return body


def extern(shapes, inputs: Sequence[Tensor], fbody: Callable, dtypes=None, name: str = "extern",
           tag: str = "", output_names: Sequence[str] | None = None, attrs: dict | None = None) -> list[Tensor]:
    """Output tensors of a stage whose loop IR `fbody(input_buffers, output_buffers)` builds.

    `shapes` is one shape or a list of shapes (one per output); `dtypes` one dtype or a list
    (default: the first input's dtype); `output_names` names the outputs' buffers (default:
    `name` for a single output, `name.v0`, `name.v1`, ... otherwise). See the module docstring
    for the body's contract.
    """
    if not shapes or not isinstance(shapes[0], (list, tuple)):
        shapes = [shapes]
    shapes = [tuple(_static_extent(s, f"te.extern {name}") for s in shape) for shape in shapes]
    inputs = tensors_of(inputs)
    for tensor in inputs:
        if not isinstance(tensor, Tensor):
            raise ShapeError(f"te.extern {name}: inputs must be te tensors, got {type(tensor).__name__}")
    if dtypes is None:
        if not inputs:
            raise ShapeError(f"te.extern {name}: give dtypes= (there is no input to take the dtype from)")
        dtypes = inputs[0].dtype
    dtypes = [dtypes] * len(shapes) if isinstance(dtypes, str) else list(dtypes)
    if len(dtypes) != len(shapes):
        raise ShapeError(f"te.extern {name}: {len(shapes)} output shapes but {len(dtypes)} dtypes")
    for dtype in dtypes:
        dtype_of(dtype)
    if output_names is None:
        output_names = [name] if len(shapes) == 1 else [f"{name}.v{i}" for i in range(len(shapes))]
    if len(output_names) != len(shapes) or len(set(output_names)) != len(output_names):
        raise ShapeError(f"te.extern {name}: output_names {list(output_names)} must be {len(shapes)} distinct names")
    if not callable(fbody):
        raise ShapeError(f"te.extern {name}: fbody must be a function (input_buffers, output_buffers) -> tir.Stmt")
    return list(ExternOp(name, tag, inputs, fbody, shapes, dtypes, output_names, attrs).outputs)


# ---- IRBuilder -----------------------------------------------------------------------------


class BufferProxy:
    """Index a buffer as in numpy: `y[i] = x[i] + 1` builds a Store of a Load (flat indices)."""

    def __init__(self, builder: "IRBuilder", buffer: n.Buffer):
        self._builder, self.buffer = builder, buffer

    @property
    def dtype(self) -> str:
        return self.buffer.dtype

    def __getitem__(self, index) -> n.PrimExpr:
        return n.Load(self.buffer, n.as_expr(index, "int32"))

    def __setitem__(self, index, value) -> None:
        value = n.as_expr(value, self.buffer.dtype)
        if value.dtype != self.buffer.dtype:
            value = n.Cast(self.buffer.dtype, value)
        self._builder.emit(n.Store(self.buffer, value, n.as_expr(index, "int32")))


class IRBuilder:
    """Build a tir statement imperatively (TVM's tir.ir_builder):

        ib = IRBuilder()
        with ib.for_range(0, n, name="i") as i:
            with ib.if_scope(x[i] > 0):
                y[i] = x[i]
            with ib.else_scope():
                y[i] = 0.0
        stmt = ib.get()

    `scalar` declares a mutable local variable (a one-element "local" buffer, `v[0]`), `allocate`
    a scratch buffer, `let` binds an immutable value; each holds for the rest of the enclosing scope.
    """

    def __init__(self):
        self._scopes: list[list] = [[]]
        self._names: dict[str, int] = {}

    def _fresh(self, name: str) -> str:
        count = self._names.get(name, 0)
        self._names[name] = count + 1
        return name if count == 0 else f"{name}_{count}"

    def emit(self, stmt) -> None:
        """Append a statement (or a function wrapping the rest of the scope: Allocate, LetStmt)."""
        self._scopes[-1].append(stmt)

    def _pop(self) -> n.Stmt:
        items = self._scopes.pop()
        body: n.Stmt | None = None
        for item in reversed(items):
            if callable(item):
                body = item(body if body is not None else n.Evaluate(n.IntImm("int32", 0)))
            elif body is None:
                body = item
            elif isinstance(body, n.SeqStmt):
                body = n.SeqStmt((item, *body.stmts))
            else:
                body = n.SeqStmt((item, body))
        return body if body is not None else n.Evaluate(n.IntImm("int32", 0))

    def get(self) -> n.Stmt:
        """The statement built so far (call once, at the end)."""
        if len(self._scopes) != 1:
            raise ScheduleError("IRBuilder.get: a with-scope is still open")
        return self._pop()

    def buffer(self, buffer: n.Buffer) -> BufferProxy:
        return BufferProxy(self, buffer)

    @contextmanager
    def for_range(self, begin, end, name: str = "i", kind: n.ForKind | str = n.ForKind.SERIAL):
        """`with ib.for_range(0, n, name="i") as i:` a loop over [begin, end); kind "parallel" etc."""
        kind = kind if isinstance(kind, n.ForKind) else n.ForKind(kind)
        var = n.Var(self._fresh(name), "int32")
        begin, end = n.as_expr(begin, "int32"), n.as_expr(end, "int32")
        extent = end if isinstance(begin, n.IntImm) and begin.value == 0 else end - begin
        self._scopes.append([])
        yield var
        self.emit(n.For(var, begin, extent, kind, self._pop()))

    @contextmanager
    def if_scope(self, condition):
        """`with ib.if_scope(cond):` statements run when `cond` holds."""
        self._scopes.append([])
        yield
        self.emit(n.IfThenElse(condition, self._pop()))

    @contextmanager
    def else_scope(self):
        """Right after an if_scope: statements run when its condition does not hold."""
        scope = self._scopes[-1]
        if not scope or not isinstance(scope[-1], n.IfThenElse) or scope[-1].else_case is not None:
            raise ScheduleError("IRBuilder.else_scope must follow an if_scope directly")
        self._scopes.append([])
        yield
        body = self._pop()
        last = scope.pop()
        scope.append(n.IfThenElse(last.condition, last.then_case, body))

    def scalar(self, dtype: str, name: str, init=None) -> BufferProxy:
        """A mutable local `v` (`v[0]` reads it, `v[0] = x` writes it), set to `init` when given."""
        buffer = n.Buffer(self._fresh(name), (n.IntImm("int32", 1),), dtype, None, "local")
        self.emit(lambda body: n.Allocate(buffer, body))
        proxy = BufferProxy(self, buffer)
        if init is not None:
            proxy[0] = init
        return proxy

    def allocate(self, dtype: str, size: int, name: str, scope: str = "global") -> BufferProxy:
        """A scratch buffer of `size` elements for the rest of the scope (emitters put large ones
        on the heap)."""
        buffer = n.Buffer(self._fresh(name), (n.IntImm("int32", int(size)),), dtype, None, scope)
        self.emit(lambda body: n.Allocate(buffer, body))
        return BufferProxy(self, buffer)

    def let(self, name: str, value) -> n.Var:
        """An immutable name for `value` over the rest of the scope (evaluated once)."""
        value = n.as_expr(value)
        var = n.Var(self._fresh(name), value.dtype)
        self.emit(lambda body: n.LetStmt(var, value, body))
        return var
