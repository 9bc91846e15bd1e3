"""Readable text for loop IR (what `print(tk.lower(s, args))` shows)."""
from __future__ import annotations

from . import nodes as n

__all__ = ["format_expr", "format_stmt", "format_func"]


def format_expr(e: n.PrimExpr) -> str:
    if isinstance(e, n.IntImm):
        return str(bool(e.value)) if e.dtype == "bool" else str(e.value)
    if isinstance(e, n.FloatImm):
        return f"{e.value!r}f" if e.dtype == "float32" else f"{e.value!r}"
    if isinstance(e, n.StringImm):
        return repr(e.value)
    if isinstance(e, n.Var):
        return e.name
    if isinstance(e, (n.Min, n.Max)):
        return f"{e.symbol}({format_expr(e.a)}, {format_expr(e.b)})"
    if isinstance(e, n.BinaryOp):
        return f"({format_expr(e.a)} {e.symbol} {format_expr(e.b)})"
    if isinstance(e, n.Not):
        return f"!{format_expr(e.a)}"
    if isinstance(e, n.Select):
        return f"select({format_expr(e.condition)}, {format_expr(e.true_value)}, {format_expr(e.false_value)})"
    if isinstance(e, n.Cast):
        return f"{e.dtype}({format_expr(e.value)})"
    if isinstance(e, n.Reinterpret):
        return f"reinterpret<{e.dtype}>({format_expr(e.value)})"
    if isinstance(e, n.Ramp):
        return f"ramp({format_expr(e.base)}, {format_expr(e.stride)}, {e.lanes_count})"
    if isinstance(e, n.Broadcast):
        return f"broadcast({format_expr(e.value)}, {e.lanes_count})"
    if isinstance(e, n.Load):
        pred = "" if e.predicate is None else f" if {format_expr(e.predicate)}"
        return f"{e.buffer.name}[{format_expr(e.index)}{pred}]"
    if isinstance(e, n.BufferPointer):
        return f"&{e.buffer.name}[{format_expr(e.index)}]"
    if isinstance(e, n.Call):
        return f"{e.name}({', '.join(format_expr(a) for a in e.args)})"
    return object.__repr__(e)


def _lines(s: n.Stmt, depth: int, out: list[str]) -> None:
    pad = "  " * depth
    if isinstance(s, n.SeqStmt):
        for child in s.stmts:
            _lines(child, depth, out)
    elif isinstance(s, n.For):
        kind = "" if s.kind is n.ForKind.SERIAL else f"{s.kind.value} "
        tag = f" @{s.thread_tag}" if s.thread_tag else ""
        notes = "".join(f" #{k}={v}" for k, v in s.annotations)
        out.append(f"{pad}{kind}for {s.loop_var.name} in range({format_expr(s.min)}, "
                   f"{format_expr(s.min + s.extent) if not _is_zero(s.min) else format_expr(s.extent)}){tag}{notes}:")
        _lines(s.body, depth + 1, out)
    elif isinstance(s, n.Store):
        pred = "" if s.predicate is None else f" if {format_expr(s.predicate)}"
        out.append(f"{pad}{s.buffer.name}[{format_expr(s.index)}] = {format_expr(s.value)}{pred}")
    elif isinstance(s, n.IfThenElse):
        out.append(f"{pad}if {format_expr(s.condition)}:")
        _lines(s.then_case, depth + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _lines(s.else_case, depth + 1, out)
    elif isinstance(s, n.Allocate):
        shape = ", ".join(format_expr(x) for x in s.buffer.shape)
        out.append(f"{pad}allocate {s.buffer.name}: {s.buffer.dtype}[{shape}] in {s.buffer.scope}")
        _lines(s.body, depth, out)
    elif isinstance(s, n.LetStmt):
        out.append(f"{pad}let {s.var.name} = {format_expr(s.value)}")
        _lines(s.body, depth, out)
    elif isinstance(s, n.Evaluate):
        out.append(f"{pad}{format_expr(s.value)}")
    elif isinstance(s, n.Barrier):
        out.append(f"{pad}barrier({s.scope})")
    elif isinstance(s, n.ThreadAllReduce):
        values = ", ".join(format_expr(v) for v in s.values)
        results = ", ".join(f"{b.name}[0]" for b in s.results)
        out.append(f"{pad}{results} = thread_allreduce<{s.combiner.name}>({values}) "
                   f"over {', '.join(s.thread_tags)}")
    else:
        out.append(f"{pad}{object.__repr__(s)}")


def _is_zero(e: n.PrimExpr) -> bool:
    return isinstance(e, n.IntImm) and e.value == 0


def format_stmt(s: n.Stmt) -> str:
    out: list[str] = []
    _lines(s, 0, out)
    return "\n".join(out)


def format_func(f: n.PrimFunc) -> str:
    params = []
    for p in f.params:
        if isinstance(p, n.Buffer):
            shape = ", ".join(format_expr(x) for x in p.shape)
            params.append(f"{p.name}: {p.dtype}[{shape}]")
        else:
            params.append(f"{p.name}: {p.dtype}")
    out = [f"primfunc {f.name}({', '.join(params)}):"]
    _lines(f.body, 1, out)
    return "\n".join(out)
