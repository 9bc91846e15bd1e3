"""lint.py: a pragma linter for HLS C++, because g++ (C-simulation) ignores every pragma silently.

`lint_source(text, spelling)` checks each `#pragma HLS` line of a source file:
- the name is one the linter knows (PIPELINE, UNROLL, LOOP_TRIPCOUNT, ARRAY_PARTITION,
  STREAM, DATAFLOW, INTERFACE, INLINE);
- every option is known for that pragma, in the tool's spelling (Vitis 2022+ `mode=` and
  `type=`, older tools the bare keyword), with a value of the right form;
- placement: PIPELINE / UNROLL / LOOP_TRIPCOUNT inside a loop body (PIPELINE also at the top
  of a function), DATAFLOW and INTERFACE at function scope, ARRAY_PARTITION / STREAM after the
  declaration of their variable, which must not be a function argument (an m_axi port lives
  in DRAM and cannot be split into registers);
`lint_module(funcs, text, spelling)` adds what needs the loop IR: a PIPELINE II below what the
memory ports allow (estimate.min_ii_for_ports) is refused.
Each problem is a `PragmaLintError` (a CompileError) naming the line, the pragma and the fix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from tensorkiln import tir
from tensorkiln.ir.errors import CompileError

from .estimate import min_ii_for_ports
from .pragmas import PragmaSpelling

__all__ = ["PragmaLintError", "lint_source", "lint_module", "pipeline_problems", "KNOWN_PRAGMAS", "Problem"]


class PragmaLintError(CompileError):
    """An HLS pragma that a synthesis tool would reject or misread."""


@dataclass(frozen=True)
class Problem:
    line: int
    pragma: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.pragma}: {self.message}"


_INT = r"\d+"
_IDENT = r"[A-Za-z_]\w*"
# pragma -> {option: value pattern (None: a flag without value)}
KNOWN_PRAGMAS: dict[str, dict[str, str | None]] = {
    "PIPELINE": {"II": _INT, "off": None, "rewind": None, "style": "stp|flp|frp"},
    "UNROLL": {"factor": _INT, "skip_exit_check": None, "off": "true|false"},
    "LOOP_TRIPCOUNT": {"min": _INT, "max": _INT, "avg": _INT},
    "ARRAY_PARTITION": {"variable": _IDENT, "type": "complete|cyclic|block", "factor": _INT, "dim": _INT,
                        "complete": None, "cyclic": None, "block": None, "off": "true|false"},
    "STREAM": {"variable": _IDENT, "depth": _INT, "type": "fifo|pipo|shared|unsync", "off": None},
    "DATAFLOW": {"disable_start_propagation": None},
    "INTERFACE": {"mode": "m_axi|s_axilite|axis|ap_none|ap_vld|ap_ack|ap_hs|ap_ovld|ap_fifo|ap_memory|bram|"
                  "ap_ctrl_none|ap_ctrl_hs|ap_ctrl_chain",
                  "port": _IDENT, "bundle": _IDENT, "depth": _INT, "offset": "slave|direct|off",
                  "max_read_burst_length": _INT, "max_write_burst_length": _INT, "latency": _INT,
                  "num_read_outstanding": _INT, "num_write_outstanding": _INT, "register": None,
                  **{mode: None for mode in ("m_axi", "s_axilite", "axis", "ap_none", "ap_fifo", "ap_memory", "bram",
                                             "ap_ctrl_none", "ap_ctrl_hs", "ap_ctrl_chain")}},
    "INLINE": {"off": None, "recursive": None},
}
_MODERN_ONLY = {("INTERFACE", "mode"), ("ARRAY_PARTITION", "type")}
_LEGACY_ONLY = {("INTERFACE", m) for m in ("m_axi", "s_axilite", "axis", "ap_none", "ap_fifo", "ap_memory", "bram",
                                           "ap_ctrl_none", "ap_ctrl_hs", "ap_ctrl_chain")} | \
    {("ARRAY_PARTITION", k) for k in ("complete", "cyclic", "block")}
_LOOP = re.compile(r"^\s*(?:\w+\s*:\s*)?for\s*\(")
_FUNCTION = re.compile(r"^\s*(?:extern\s+\"C\"\s+)?(?:static\s+)?(?:inline\s+)?[\w:<>,\s\*&]+?\b(\w+)\s*\((.*)\)\s*$")
_PRAGMA = re.compile(r"^\s*#pragma\s+HLS\s+(\w+)(.*)$", re.IGNORECASE)


def _options(text: str) -> list[tuple[str, str | None]]:
    found = []
    for word in text.split():
        key, sep, value = word.partition("=")
        found.append((key, value if sep else None))
    return found


class _Scopes:
    """Which block each line is in: the text that opened it, and the names declared in it."""

    def __init__(self) -> None:
        self.stack: list[tuple[str, set[str]]] = []   # (opener line, names declared in the block)
        self.pending = ""                               # a header continued over several lines

    def feed(self, line: str) -> None:
        code = line.split("//")[0]
        if code.strip().startswith("#"):
            return
        header = (self.pending + " " + code.strip()).strip()
        declared = re.match(r"^\s*(?:static\s+)?(?:const\s+)?[\w:<>,\s]+?[\s\*&]+(" + _IDENT + r")\s*(\[|\(\"|;|=)", code)
        if declared and self.stack and not code.strip().startswith(("return", "for", "if", "while")):
            self.stack[-1][1].add(declared.group(1))
        opens, closes = code.count("{"), code.count("}")
        for char in code:
            if char == "{":
                self.stack.append((header.split("{")[0], set()))
            elif char == "}" and self.stack:
                self.stack.pop()
        self.pending = header if (opens == 0 and closes == 0 and "(" in header and not header.endswith(";")) else ""

    @property
    def opener(self) -> str:
        return self.stack[-1][0] if self.stack else ""

    @property
    def function(self) -> str:
        return self.stack[0][0] if self.stack else ""

    def declared(self, name: str) -> bool:
        return any(name in names for _, names in self.stack)


def _parameters(header: str) -> set[str]:
    match = _FUNCTION.match(header)
    if not match:
        return set()
    return {re.findall(_IDENT, p)[-1] for p in match.group(2).split(",") if re.findall(_IDENT, p)}


def lint_source(text: str, spelling: PragmaSpelling) -> list[Problem]:
    """Every problem with the `#pragma HLS` lines of `text` (empty: all fine)."""
    problems: list[Problem] = []
    scopes = _Scopes()
    for number, line in enumerate(text.splitlines(), start=1):
        match = _PRAGMA.match(line)
        if match is None:
            scopes.feed(line)
            continue
        name, rest = match.group(1).upper(), match.group(2)

        def problem(message: str) -> None:
            problems.append(Problem(number, name, message))
        known = KNOWN_PRAGMAS.get(name)
        if known is None:
            problem(f"unknown pragma; known: {', '.join(KNOWN_PRAGMAS)}")
            continue
        options = _options(rest)
        values = {}
        for key, value in options:
            if key not in known:
                problem(f"unknown option {key!r}; {name} takes {', '.join(known)}")
                continue
            if spelling.modern and (name, key) in _LEGACY_ONLY:
                problem(f"{key!r} is the pre-2022 spelling; Vitis HLS 2022+ writes "
                        f"{'mode=' if name == 'INTERFACE' else 'type='}{key}")
            if not spelling.modern and (name, key) in _MODERN_ONLY:
                problem(f"{key}= is Vitis HLS 2022+ spelling; this tool writes the bare keyword ({value})")
            pattern = known[key]
            if pattern is None and value is not None:
                problem(f"option {key} takes no value")
            elif pattern is not None and (value is None or not re.fullmatch(pattern, value)):
                problem(f"option {key}={value} must match {pattern}")
            values[key] = value
        _check_pragma(name, values, scopes, problem)
        scopes.feed(line)
    return problems


def _check_pragma(name: str, values: dict, scopes: _Scopes, problem) -> None:
    in_loop = bool(_LOOP.match(scopes.opener))
    at_function = len(scopes.stack) == 1
    if name in ("UNROLL", "LOOP_TRIPCOUNT") and not in_loop:
        problem("must be the first statement of a loop body")
    if name == "PIPELINE":
        if not (in_loop or at_function):
            problem("must be inside a loop body (or at the top of a function)")
        if (values.get("II") or "").isdigit() and int(values["II"]) < 1:
            problem("II must be at least 1")
    if name in ("DATAFLOW", "INTERFACE") and not at_function:
        problem("must be at function scope, not inside a loop or block")
    if name == "LOOP_TRIPCOUNT":
        try:
            low, high = int(values["min"]), int(values["max"])
            avg = int(values.get("avg") or (low + high) // 2)
        except (KeyError, TypeError, ValueError):
            problem("needs min= and max=")
            return
        if not low <= avg <= high:
            problem(f"min={low} avg={avg} max={high} must satisfy min <= avg <= max")
    if name == "INTERFACE":
        port = values.get("port")
        if port is None:
            problem("needs port=")
        elif port != "return" and port not in _parameters(scopes.function):
            problem(f"port={port} is not an argument of the function")
    if name in ("ARRAY_PARTITION", "STREAM"):
        variable = values.get("variable")
        if variable is None:
            problem("needs variable=")
            return
        if variable in _parameters(scopes.function):
            problem(f"variable={variable} is a function argument (an m_axi port in DRAM); partition or stream "
                    "a local copy (cache_read / an intermediate stage) instead")
        elif not scopes.declared(variable):
            problem(f"variable={variable} is not declared before the pragma in an enclosing scope")
    if name == "ARRAY_PARTITION":
        kind = values.get("type") or next((k for k in ("complete", "cyclic", "block") if k in values), None)
        if kind is None:
            problem("needs a partition type: complete, cyclic or block")
        elif kind != "complete" and values.get("factor") is None:
            problem(f"a {kind} partition needs factor=")
        elif kind == "complete" and values.get("factor") is not None:
            problem("a complete partition takes no factor=")


def lint_module(funcs, source: str, spelling: PragmaSpelling) -> None:
    """Raise PragmaLintError for the pragma problems of `source` and the pipelines of `funcs` whose
    II is below what the memory ports allow."""
    problems = lint_source(source, spelling)
    for func in funcs:
        problems += pipeline_problems(func)
    if problems:
        raise PragmaLintError("HLS pragma lint failed:\n" + "\n".join(f"  {p}" for p in problems))


def pipeline_problems(func: tir.PrimFunc) -> list[Problem]:
    """The pipelined loops of `func` whose II is below what their memory ports allow."""
    problems: list[Problem] = []
    params = {p.name for p in func.params if isinstance(p, tir.Buffer)}
    partitioned = {name for name, kind, _ in (func.attr("array_partition") or ()) if kind == "complete"}

    def visit(node):
        if isinstance(node, tir.For):
            ii = dict(node.annotations).get("pipeline")
            if ii is not None:
                bound = min_ii_for_ports(node, params, partitioned)
                if int(ii) < bound:
                    problems.append(Problem(0, "PIPELINE", f"loop {node.loop_var.name} of kernel {func.name}: II={ii} "
                                            f"is below {bound}, what its memory ports allow (an m_axi port serves one "
                                            "read and one write per cycle, a BRAM two accesses); raise the II, or "
                                            "copy the data into a partitioned local array"))
    from tensorkiln.tir.visit import post_order_visit
    post_order_visit(func.body, visit)
    return problems
