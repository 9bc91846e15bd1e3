"""estimate.py: latency and resource estimates of HLS kernels, keyed as hls4ml reads Vitis reports.

`estimate_kernel(func, target)` walks a lowered kernel the way Vitis HLS schedules it:
- a loop pipelined with II runs trip x II + depth cycles, where the depth is the body's
  longest chain of operator latencies (loops inside a pipelined loop are unrolled);
- other loops run trip x (body + 1) cycles (one cycle of loop control), nesting multiplies;
  an unrolled loop runs its copies side by side;
- a dataflow kernel's stages overlap: its interval is its slowest stage's latency;
- a call of gemm_accelerator costs its systolic array's K + R + C - 1 cycles plus the
  pipelined fill and drain of its R x C accumulators.
Resources (DSP, LUT, FF, BRAM_18K) count the operators of each loop body, shared by the
II of a pipelined loop (hls4ml's reuse factor) and multiplied by unrolled copies, plus
arrays (BRAM_18K unless completely partitioned into registers) and m_axi adapters.
The result uses hls4ml's key names (BestLatency, WorstLatency, IntervalMin, IntervalMax,
TargetClockPeriod, DSP, LUT, FF, BRAM_18K), so a real csynth report can be set beside it.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of

__all__ = ["estimate_kernel", "systolic_resources", "min_ii_for_ports", "count_nodes", "Cost", "OPERATORS",
           "M_AXI_ADAPTER"]


@dataclass(frozen=True)
class Operator:
    """One operator core: cycles of latency and its resources."""

    latency: int
    dsp: int = 0
    lut: int = 0
    ff: int = 0


# Vitis HLS operator cores at 300 MHz on UltraScale+ (fadd/fmul from the floating-point IP's
# full-DSP configurations; integer cores from their widths)
OPERATORS: dict[str, Operator] = {
    "fadd": Operator(4, dsp=2, lut=200, ff=330),
    "fmul": Operator(3, dsp=3, lut=80, ff=140),
    "fdiv": Operator(12, lut=800, ff=1300),
    "fcmp": Operator(1, lut=70, ff=0),
    "fmath": Operator(20, dsp=7, lut=1500, ff=1800),   # exp, log, sqrt, tanh ...
    "imul": Operator(1, dsp=1, lut=0, ff=0),           # <= 27 x 18 bits: one DSP
    "iadd": Operator(0, lut=32, ff=0),                  # chained in the same cycle
    "cmp": Operator(0, lut=16, ff=0),
    "load": Operator(2, lut=0, ff=0),                   # BRAM read latency
    "axi_load": Operator(2, lut=0, ff=0),
}
M_AXI_ADAPTER = {"LUT": 1200, "FF": 1600, "BRAM_18K": 2}
"""Per m_axi port: the read/write burst adapter Vitis instantiates (with its FIFOs)."""
LOOP_CONTROL = {"LUT": 30, "FF": 40}
BRAM_BITS = 18 * 1024
REGISTER_BITS = 1024
"""Local arrays of at most this many bits are registers (FF), not BRAM."""


@dataclass
class Cost:
    """Latency (cycles) and resources of a piece of a kernel."""

    latency: int = 0
    interval: int | None = None
    depth: int = 0          # longest operator chain (for pipelines)
    DSP: float = 0
    LUT: float = 0
    FF: float = 0
    BRAM_18K: float = 0
    ops: dict = field(default_factory=dict)   # operator -> count in one iteration

    def add_resources(self, other: "Cost", times: float = 1.0) -> None:
        self.DSP += other.DSP * times
        self.LUT += other.LUT * times
        self.FF += other.FF * times
        self.BRAM_18K += other.BRAM_18K * times


def _const(e) -> int | None:
    return e.value if isinstance(e, tir.IntImm) else None


class _Estimator:
    def __init__(self, func: tir.PrimFunc, partitioned: set[str]) -> None:
        self.func = func
        self.params = {p.name for p in func.params if isinstance(p, tir.Buffer)}
        self.partitioned = partitioned

    # --- expressions: (depth, {operator: count}) ---------------------------------------
    def expr(self, e) -> tuple[int, dict[str, int]]:
        counts: dict[str, int] = {}
        depth = self._expr(e, counts)
        return depth, counts

    def _expr(self, e, counts) -> int:
        if isinstance(e, (tir.IntImm, tir.FloatImm, tir.StringImm, tir.Var)):
            return 0
        if isinstance(e, tir.Load):
            kind = "axi_load" if e.buffer.name in self.params else "load"
            counts[kind] = counts.get(kind, 0) + 1
            return OPERATORS[kind].latency + self._expr(e.index, counts)
        if isinstance(e, tir.BinaryOp) or isinstance(e, tir.CompareOp):
            is_float = dtype_of(e.a.dtype).is_float
            name = type(e).__name__
            if isinstance(e, tir.CompareOp) or name in ("Min", "Max"):
                kind = "fcmp" if is_float else "cmp"
            elif name == "Mul":
                kind = "fmul" if is_float else "imul"
            elif name in ("Div", "FloorDiv", "FloorMod", "Mod"):
                kind = "fdiv" if is_float else "iadd"
            else:
                kind = "fadd" if is_float else "iadd"
            if kind in ("imul", "iadd") and (_const(e.a) is not None or _const(e.b) is not None):
                kind = "iadd"   # by a constant: shifts and adds, no DSP
            counts[kind] = counts.get(kind, 0) + 1
            return OPERATORS[kind].latency + max(self._expr(e.a, counts), self._expr(e.b, counts))
        if isinstance(e, tir.Call):
            depth = max((self._expr(a, counts) for a in e.args), default=0)
            if e.name == "fma":   # a multiplier feeding an adder
                counts["fmul"] = counts.get("fmul", 0) + 1
                counts["fadd"] = counts.get("fadd", 0) + 1
                return depth + OPERATORS["fmul"].latency + OPERATORS["fadd"].latency
            if e.name in ("isnan", "isinf", "fabs", "floor", "ceil", "trunc", "round"):
                counts["cmp"] = counts.get("cmp", 0) + 1
                return depth
            counts["fmath"] = counts.get("fmath", 0) + 1
            return depth + OPERATORS["fmath"].latency
        children = [getattr(e, name) for name in ("value", "a", "condition", "true_value", "false_value", "base")
                    if isinstance(getattr(e, name, None), tir.PrimExpr)]
        return max((self._expr(c, counts) for c in children), default=0)

    # --- statements ----------------------------------------------------------------------
    def stmt(self, s, pipelined: bool = False) -> Cost:
        if isinstance(s, tir.SeqStmt):
            total = Cost()
            for child in s.stmts:
                part = self.stmt(child, pipelined)
                total.latency += part.latency
                total.depth += part.depth if pipelined else 0
                total.add_resources(part)
                for k, v in part.ops.items():
                    total.ops[k] = total.ops.get(k, 0) + v
            return total
        if isinstance(s, tir.For):
            return self.loop(s, pipelined)
        if isinstance(s, tir.Allocate):
            inner = self.stmt(s.body, pipelined)
            inner.add_resources(self.array(s.buffer))
            return inner
        if isinstance(s, (tir.LetStmt,)):
            depth, ops = self.expr(s.value)
            inner = self.stmt(s.body, pipelined)
            return self._with_ops(inner, depth, ops)
        if isinstance(s, tir.IfThenElse):
            depth, ops = self.expr(s.condition)
            then = self.stmt(s.then_case, pipelined)
            other = self.stmt(s.else_case, pipelined) if s.else_case is not None else Cost()
            cost = Cost(latency=max(then.latency, other.latency) + 1, depth=max(then.depth, other.depth) + depth)
            cost.add_resources(then)
            cost.add_resources(other)
            return self._with_ops(cost, 0, ops)
        if isinstance(s, tir.Store):
            d1, ops = self.expr(s.value)
            d2, more = self.expr(s.index)
            for k, v in more.items():
                ops[k] = ops.get(k, 0) + v
            depth = max(d1, d2) + 1
            return self._with_ops(Cost(latency=depth, depth=depth), 0, ops)
        if isinstance(s, tir.Evaluate) and isinstance(s.value, tir.Call):
            return self.call(s.value)
        return Cost()

    def _with_ops(self, cost: Cost, depth: int, ops: dict) -> Cost:
        cost.depth += depth
        cost.latency += depth
        for k, v in ops.items():
            cost.ops[k] = cost.ops.get(k, 0) + v
            op = OPERATORS[k]
            cost.DSP += op.dsp * v
            cost.LUT += op.lut * v
            cost.FF += op.ff * v
        return cost

    def loop(self, s: tir.For, pipelined: bool) -> Cost:
        notes = dict(s.annotations)
        trip = _const(s.extent)
        if trip is None:
            low, high, avg = notes.get("loop_tripcount", (1, 1, 1))
            trip = avg
        if pipelined or s.kind in (tir.ForKind.UNROLLED, tir.ForKind.VECTORIZED):
            body = self.stmt(s.body, pipelined)   # unrolled: copies side by side
            cost = Cost(latency=body.latency, depth=body.depth)
            cost.add_resources(body, trip)
            cost.ops = {k: v * trip for k, v in body.ops.items()}
            return cost
        if "pipeline" in notes:
            ii = int(notes["pipeline"])
            body = self.stmt(s.body, pipelined=True)
            ii = max(ii, self.port_bound(s), recurrence_bound(s, body.depth))
            depth = max(body.depth, 1)
            cost = Cost(latency=(trip - 1) * ii + depth + 1)
            cost.add_resources(body, 1.0 / ii)   # operators shared across the II cycles
            cost.LUT += LOOP_CONTROL["LUT"]
            cost.FF += LOOP_CONTROL["FF"] + depth * 32   # pipeline registers
            return cost
        factor = int(notes.get("unroll_factor", 1))
        body = self.stmt(s.body)
        cost = Cost(latency=math.ceil(trip / factor) * (body.latency + 1))
        cost.add_resources(body, factor)
        cost.LUT += LOOP_CONTROL["LUT"]
        cost.FF += LOOP_CONTROL["FF"]
        return cost

    def port_bound(self, s: tir.For) -> int:
        """The smallest II the memory ports allow: an m_axi port or a BRAM port serves one access
        per cycle (BRAM: two ports); a completely partitioned array serves any number."""
        return min_ii_for_ports(s, self.params, self.partitioned)

    def array(self, buffer: tir.Buffer) -> Cost:
        size = 1
        for extent in buffer.shape:
            size *= _const(extent) or 1
        bits = size * dtype_of(buffer.dtype).bits
        cost = Cost()
        if buffer.name in self.partitioned or bits <= REGISTER_BITS:
            cost.FF += bits
        else:
            cost.BRAM_18K += math.ceil(bits / BRAM_BITS)
        return cost

    def call(self, call: tir.Call) -> Cost:
        intrin = self.func.tensor_intrinsics().get(call.name)
        attrs = getattr(intrin, "attrs", {}) or {}
        if attrs.get("kind") != "systolic":
            return Cost(latency=1)
        rows, cols = attrs["rows"], attrs["cols"]
        k = _const(call.args[-2]) or 1
        cost = Cost(latency=k + rows + cols - 1 + 2 * rows * cols)
        for key, value in systolic_resources(rows, cols, attrs.get("dtype", "float32")).items():
            setattr(cost, key, getattr(cost, key) + value)
        return cost


def recurrence_bound(loop: tir.For, depth: int) -> int:
    """The II a loop-carried dependency through memory allows: when an iteration reads an element
    the previous one wrote (an accumulation `C[i] = C[i] + ...` pipelined over the reduction), the
    next iteration starts only after that read-modify-write chain, `depth` cycles. Vitis raises the
    II to it by itself (with a warning); the estimate follows."""
    from tensorkiln.tir.visit import collect_vars

    carried = False
    # an array allocated inside the body is fresh each iteration (an accumulator register): not carried
    fresh: set[str] = set()
    count_nodes(loop.body, lambda x: fresh.add(x.buffer.name) if isinstance(x, tir.Allocate) else False)

    def visit(node) -> bool:
        nonlocal carried
        if isinstance(node, tir.Store) and node.buffer.name not in fresh and \
                not any(v is loop.loop_var for v in collect_vars(node.index)):
            index = str(node.index)
            carried = carried or count_nodes(node.value, lambda x: isinstance(x, tir.Load) and
                                             x.buffer.name == node.buffer.name and str(x.index) == index) > 0
        return False
    count_nodes(loop.body, visit)
    return max(depth, 1) if carried else 1


def min_ii_for_ports(loop: tir.For, params: set[str], partitioned: set[str]) -> int:
    """The II the memory ports of `loop`'s body allow: accesses per iteration per port, where
    loops inside the pipelined loop are unrolled, so their accesses count once per iteration."""
    reads: dict[str, int] = {}
    writes: dict[str, int] = {}

    registers: set[str] = set()   # small local arrays are registers (as `array` costs them): no ports

    def count(node, times: int) -> None:
        if isinstance(node, tir.For):
            count(node.body, times * (_const(node.extent) or 1))
            return
        if isinstance(node, (tir.Load, tir.Store)) and node.buffer.name not in params and _is_register(node.buffer):
            registers.add(node.buffer.name)
        if isinstance(node, tir.Load):
            reads[node.buffer.name] = reads.get(node.buffer.name, 0) + times
        elif isinstance(node, tir.Store):
            writes[node.buffer.name] = writes.get(node.buffer.name, 0) + times
        for child in _children(node):
            count(child, times)
    count(loop.body, 1)
    bound = 1
    for name in set(reads) | set(writes):
        if name in partitioned or name in registers:
            continue
        if name in params:   # m_axi: one read channel and one write channel
            bound = max(bound, reads.get(name, 0), writes.get(name, 0))
        else:                # BRAM: two ports shared by reads and writes
            bound = max(bound, math.ceil((reads.get(name, 0) + writes.get(name, 0)) / 2))
    return bound


def _is_register(buffer: tir.Buffer) -> bool:
    """Whether a local array is small enough to be registers (FF), not a BRAM."""
    size = 1
    for extent in buffer.shape:
        value = _const(extent)
        if value is None:
            return False
        size *= value
    return size * dtype_of(buffer.dtype).bits <= REGISTER_BITS


def count_nodes(root, predicate) -> int:
    """How many nodes under `root` satisfy `predicate`, counting a shared subexpression once per
    place it is used (visitors that remember visited nodes count it once; C text repeats it)."""
    return int(bool(predicate(root))) + sum(count_nodes(child, predicate) for child in _children(root))


def _children(node) -> list:
    """The statements and expressions directly inside `node`."""
    if isinstance(node, tir.SeqStmt):
        return list(node.stmts)
    found = []
    for name in getattr(node, "__dataclass_fields__", {}):
        value = getattr(node, name)
        if isinstance(value, (tir.Stmt, tir.PrimExpr)):
            found.append(value)
        elif isinstance(value, tuple):
            found.extend(v for v in value if isinstance(v, (tir.Stmt, tir.PrimExpr)))
    return found


def systolic_resources(rows: int, cols: int, dtype: str = "int8") -> dict[str, int]:
    """Resources of the R x C systolic array (rtl.py / systolic.py).

    int8: one DSP48 per PE holds the multiply and its 32-bit accumulator (the P register);
    registers are the operand pipeline between PEs (8 bits each way, except where a PE
    has no right / lower neighbour) and the skew delay lines (8 x (1 + ... + R-1) for A, the
    same for B), less the two input-register stages (A1/A2, B1/B2) of the DSP48 at the head
    of each of the R + C operand lines, which synthesis absorbs; no LUTs (the clear maps onto
    the DSP's synchronous reset). Measured with yosys synth_xilinx: exact for 2x2, 3x3, 4x4
    and 8x8, one byte over for 2x4.
    float32: 5 DSP per PE (fmul 3 + fadd 2) with their LUT/FF cores.
    """
    pes = rows * cols
    if dtype == "int8":
        operand_bytes = rows * (cols - 1) + cols * (rows - 1)
        skew_bytes = rows * (rows - 1) // 2 + cols * (cols - 1) // 2
        absorbed_bytes = 2 * (rows + cols)
        return {"DSP": pes, "LUT": 0, "FF": 8 * max(operand_bytes + skew_bytes - absorbed_bytes, 0), "BRAM_18K": 0}
    fadd, fmul = OPERATORS["fadd"], OPERATORS["fmul"]
    return {"DSP": pes * (fadd.dsp + fmul.dsp), "LUT": pes * (fadd.lut + fmul.lut),
            "FF": pes * (fadd.ff + fmul.ff + 64), "BRAM_18K": 0}


def estimate_kernel(func: tir.PrimFunc, target: Any = None) -> dict[str, Any]:
    """The kernel's estimate with hls4ml's report keys (see the module docstring)."""
    options = getattr(target, "options", {}) or {}
    clock_mhz = float(options.get("clock_mhz") or 300)
    partitioned = {name for name, kind, _ in (func.attr("array_partition") or ()) if kind == "complete"}
    estimator = _Estimator(func, partitioned)
    body = func.body
    if func.attr("dataflow"):
        stages = _dataflow_stages(body)
        costs = [estimator.stmt(stage) for stage in stages]
        total = Cost(latency=max((c.latency for c in costs), default=0) + len(costs))
        total.interval = max((c.latency for c in costs), default=0)
        for c in costs:
            total.add_resources(c)
        for allocation in _allocations(body):
            total.add_resources(estimator.array(allocation))
    else:
        total = estimator.stmt(body)
        total.interval = total.latency
    ports = sum(1 for p in func.params if isinstance(p, tir.Buffer))
    return {
        "TargetClockPeriod": round(1000.0 / clock_mhz, 3),
        "BestLatency": int(total.latency), "WorstLatency": int(total.latency),
        "IntervalMin": int(total.interval), "IntervalMax": int(total.interval),
        "LatencySeconds": total.latency / (clock_mhz * 1e6),
        "DSP": int(math.ceil(total.DSP)),
        "LUT": int(math.ceil(total.LUT + ports * M_AXI_ADAPTER["LUT"])),
        "FF": int(math.ceil(total.FF + ports * M_AXI_ADAPTER["FF"])),
        "BRAM_18K": int(math.ceil(total.BRAM_18K + ports * M_AXI_ADAPTER["BRAM_18K"])),
    }


def _allocations(stmt) -> list[tir.Buffer]:
    found = []
    while isinstance(stmt, tir.Allocate):
        found.append(stmt.buffer)
        stmt = stmt.body
    return found


def _dataflow_stages(stmt) -> list:
    while isinstance(stmt, tir.Allocate):
        stmt = stmt.body
    return list(stmt.stmts) if isinstance(stmt, tir.SeqStmt) else [stmt]
