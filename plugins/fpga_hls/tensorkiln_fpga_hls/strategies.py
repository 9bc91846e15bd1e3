"""strategies.py: how fpga_hls schedules fused groups: pipelined loop nests with declared knobs.

Every group starts from the core's naive schedule (injective stages inlined, so an
epilogue is computed in the anchor's loop body, as an HLS design would chain it) and then:
- the innermost loop of each root stage is pipelined with II = `reuse_factor` (hls4ml's
  name: how many cycles one multiplier is reused; 1 = fully parallel);
- a reduction loop is split by `unroll` and the inner part unrolled (that many
  multipliers side by side), the outer part pipelined with an II of at least `unroll`,
  since its operands arrive through one m_axi port each.
- an NHWC convolution reads its input through a line buffer (`line_buffer`): the rows of
  one output row's receptive field, copied into a local array at the output-row loop.
- a reduction with an epilogue (conv + bias + relu) runs as a dataflow of two processes, the
  reduction streaming each finished output to the epilogue (`stream_epilogue`).
- an NHWC max / avg pool is a line-buffer kernel (`line_buffer`): the kernel-height input rows of
  one output row (padding included) are copied into a local line buffer at the output-row loop,
  each output accumulates in a register with the whole window unrolled, so the loop over output
  channels is pipelined with II=1 (the line buffer is completely partitioned into registers when
  it holds at most LINE_BUFFER_REGISTERS elements, else it sits in BRAM and the II is what its
  two ports allow); an average streams each window sum through a FIFO to the division process.
These are tuning knobs, so the tuner can search them with the estimator (estimate.py) as
the cost (the C-simulation device's time_function returns the estimated FPGA time).
"""
from __future__ import annotations

from tensorkiln import te
from tensorkiln.ops import naive_schedule, tags
from tensorkiln.sdk import INJECTIVE, Knob, OpImplementation, TuningSpace

__all__ = ["fpga_strategies", "schedule_pipelined"]

REUSE_FACTORS = (1, 2, 4, 8)
UNROLL_FACTORS = (1, 2, 4, 8)


def _space(workload, target) -> TuningSpace:
    return TuningSpace((Knob("reuse_factor", REUSE_FACTORS, default=1), Knob("unroll", UNROLL_FACTORS, default=1),
                        Knob("line_buffer", (0, 1), default=1), Knob("stream_epilogue", (0, 1), default=1)))


def _extent(iv) -> int | None:
    extent = getattr(iv.dom, "extent", None) if iv.dom is not None else None
    return getattr(extent, "value", extent) if isinstance(getattr(extent, "value", extent), int) else None


def _line_buffer(s: te.Schedule) -> None:
    """NHWC convolutions read their input through a line buffer: the input rows one output row
    needs (kernel height x width x channels, padding included) are copied into a local array at
    the output-row loop, so the pipelined reduction reads BRAM instead of the m_axi port."""
    for stage in list(s.stages):
        if stage.op.tag != tags.CONV2D_NHWC or stage.attach_type != "root" or len(stage.op.axis) != 4:
            continue
        data = stage.op.input_tensors[0]
        rows = s.cache_read(data, "local", [stage])
        s[rows].compute_at(stage, stage.op.axis[1])


LINE_BUFFER_FILL = "tk_line_buffer_fill"
"""Loop annotation of a line buffer's fill loop: pipelined at II=1 by construction (one m_axi read,
one local write per iteration), so the II search over the compute loops leaves it out."""
LINE_BUFFER_REGISTERS = 4096
"""Largest line buffer partitioned completely (one register per element, FF in the estimate)."""


def _nhwc_pool(stage) -> bool:
    return (stage.op.tag == tags.POOL and len(stage.op.axis) == 4
            and (getattr(stage.op, "attrs", None) or {}).get("layout") == "NHWC")


def _window_rows(s: te.Schedule, reader, anchor) -> None:
    """The line buffer of `reader` (an NHWC conv or pool, or its accumulator): the input rows one
    output row of `anchor` needs, copied at `anchor`'s output-row loop; a pool's is partitioned so
    its unrolled window is read in one cycle."""
    rows = s.cache_read(reader.op.input_tensors[0], "local", [reader])
    s[rows].compute_at(anchor, anchor.op.axis[1])
    if len(rows.op.axis) == 4:   # the fill: one element per cycle, columns x channels of each row
        fill = s[rows].fuse(rows.op.axis[2], rows.op.axis[3])
        s[rows].pipeline(fill, 1)
        s[rows].pragma(fill, LINE_BUFFER_FILL, 1)
    if _nhwc_pool(anchor):
        size = 1
        for extent in rows.shape:
            size *= int(getattr(extent, "value", extent)) if isinstance(getattr(extent, "value", extent), int) else 0
        if 0 < size <= LINE_BUFFER_REGISTERS:
            s[rows].partition("complete")


def _pool_line_buffer(s: te.Schedule) -> None:
    """A lone NHWC max pool (no epilogue to stream to): each output accumulates in a register
    (cache_write at the channel loop, the window unrolled inside it) over a line buffer."""
    for stage in list(s.stages):
        if not _nhwc_pool(stage) or stage.attach_type != "root":
            continue
        if not all(isinstance(_extent(iv), int) for iv in stage.op.axis):
            continue
        accumulator = s.cache_write(stage.op.output(0), "local")
        s[accumulator].compute_at(stage, stage.op.axis[-1])
        _window_rows(s, s[accumulator], stage)


def _stream_epilogue(s: te.Schedule) -> bool:
    """A reduction followed by its epilogue (conv -> relu) becomes two dataflow processes joined by a
    FIFO: the reduction accumulates each output in a register (cache_write, computed at the
    innermost data loop) and writes it once, in order, into the stream the epilogue reads.
    Returns whether it applied (one reduction stage feeding one root epilogue stage)."""
    roots = [st for st in s.stages if st.attach_type == "root"]
    if len(roots) != 2 or not isinstance(roots[0].op.body, te.Reduce) or roots[0].is_output:
        return False
    anchor = roots[0]
    if not anchor.op.axis:   # a reduction to a scalar (mean over every axis): one value, nothing to stream
        return False
    if not all(isinstance(_extent(iv), int) for iv in anchor.op.axis) or not _reads_in_order(roots[1], anchor):
        return False
    accumulator = s.cache_write(anchor.op.output(0), "local")
    s[accumulator].compute_at(anchor, anchor.op.axis[-1])
    anchor.stream(2)
    s.dataflow()
    if anchor.op.tag == tags.CONV2D_NHWC or _nhwc_pool(anchor):   # the line buffer: at the output-row loop
        _window_rows(s, s[accumulator], anchor)
    return True


def _reads_in_order(consumer, producer) -> bool:
    """Whether `consumer` reads `producer` once per element, at its own loop indices, in its order:
    what a FIFO between them allows (a transpose or `x * sigmoid(x)` epilogue does not)."""
    from .estimate import count_nodes
    if getattr(consumer.op, "reduce_axis", ()):   # argmax's index pass reads the max once per tap
        return False
    reads = []

    def producer_read(node) -> bool:
        if isinstance(node, te.TensorRead) and node.tensor.op is producer.op:
            reads.append(node)
            return True
        return False
    count_nodes(consumer.op.body, producer_read)
    axes = [iv.var for iv in consumer.op.axis]
    return (len(reads) == 1 and tuple(iv.dom.extent for iv in consumer.op.axis) ==
            tuple(iv.dom.extent for iv in producer.op.axis) and len(reads[0].indices) == len(axes)
            and all(index is var for index, var in zip(reads[0].indices, axes)))


def schedule_pipelined(outputs, target, config) -> te.Schedule:
    """The naive schedule with the innermost loop of each root stage pipelined (see module docstring).

    The requested II (reuse_factor) is raised to what the memory ports allow, found by lowering
    the schedule once: a default that the pragma linter would refuse is no default."""
    first, requested = _pipelined(outputs, target, config)
    func = _lowered(first, outputs)
    if first.is_dataflow and not _streams_once(func):
        # lowering duplicated a read of the stream (pow(x, 0.75) -> sqrt(x) * sqrt(sqrt(x))): keep the array
        config = {**config, "stream_epilogue": 0}
        first, requested = _pipelined(outputs, target, config)
        func = _lowered(first, outputs)
    bounds = _port_bounds(func)
    if len(bounds) != len(requested) or all(b <= ii for b, ii in zip(bounds, requested)):
        return first
    return _pipelined(outputs, target, config, [max(b, ii) for b, ii in zip(bounds, requested)])[0]


def _pipelined(outputs, target, config, iis=None) -> tuple[te.Schedule, list[int]]:
    s = naive_schedule(outputs, target)
    streamed = bool(config.get("stream_epilogue", 1)) and _stream_epilogue(s)
    if config.get("line_buffer", 1) and not streamed:
        _line_buffer(s)
        _pool_line_buffer(s)
    reuse, unroll = int(config.get("reuse_factor", 1)), int(config.get("unroll", 1))
    requested = []
    for stage in s.stages:
        if stage.attach_type != "root" or not stage.leaf_iter_vars:
            continue
        ii = reuse
        innermost = stage.leaf_iter_vars[-1]
        extent = _extent(innermost)
        if innermost.kind == "reduce" and unroll > 1 and extent and extent % unroll == 0 and extent > unroll:
            outer, inner = stage.split(innermost, factor=unroll)
            stage.unroll(inner)
            innermost = outer
            ii = max(ii, unroll)   # each m_axi operand is read `unroll` times per iteration through one port
        if iis is not None:
            ii = iis[len(requested)]
        requested.append(ii)
        stage.pipeline(innermost, ii)
    return s, requested


def _lowered(s: te.Schedule, outputs):
    """`s` lowered with the group's placeholders and outputs as parameters."""
    outputs = [outputs] if isinstance(outputs, te.Tensor) else list(outputs)
    placeholders, seen, stack = [], set(), list(outputs)
    while stack:
        tensor = stack.pop()
        for source in tensor.op.input_tensors:
            if source.op not in seen:
                seen.add(source.op)
                (placeholders.append(source) if isinstance(source.op, te.PlaceholderOp) else stack.append(source))
    return te.lower(s, [*placeholders, *outputs])


def _streams_once(func) -> bool:
    """Whether each stream of the lowered `func` is written by one store and read by one load."""
    from tensorkiln import tir

    from .estimate import count_nodes
    for name, _ in func.attr("stream") or ():
        for kind in (tir.Load, tir.Store):
            if count_nodes(func.body, lambda x, kind=kind: isinstance(x, kind) and x.buffer.name == name) != 1:
                return False
    return True


def _port_bounds(func) -> list[int]:
    """The memory-port II bound of each pipelined loop of the lowered `func`, in lowering order."""
    from tensorkiln import tir
    from tensorkiln.tir.visit import post_order_visit

    from .estimate import min_ii_for_ports
    params = {p.name for p in func.params if isinstance(p, tir.Buffer)}
    partitioned = {name for name, kind, _ in (func.attr("array_partition") or ()) if kind == "complete"}
    loops: list = []
    post_order_visit(func.body, lambda x: loops.append(x) if isinstance(x, tir.For)
                     and "pipeline" in dict(x.annotations) and LINE_BUFFER_FILL not in dict(x.annotations) else None)
    # post-order lists inner loops first; pipelined loops do not nest, so this is lowering order
    return [min_ii_for_ports(loop, params, partitioned) for loop in loops]


def fpga_strategies(target) -> list[OpImplementation]:
    """The implementations of the fpga_hls target (called by its tensorkiln_strategies hook)."""
    return [OpImplementation("fpga_hls.pipelined", (*tags.ANCHOR_TAGS, INJECTIVE), schedule_pipelined,
                             space=_space, priority=1)]
