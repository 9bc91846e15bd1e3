"""strategies/concat.py: `concatenate` as row-by-row contiguous copies (an extern stage), not a select per element.

The generic te compute of concatenate picks, for every output element, the input that holds it
through a tree of selects over clamped reads: vectorized along the concatenated axis that is a
gather of every input per vector. Seen as memory, a concatenation along `axis` is `rows` =
prod(shape[:axis]) rows, each the inputs' chunks of chunk_k = extent_k * inner elements laid end
to end (inner = prod(shape[axis + 1:])). The extern body copies exactly that:

    parallel for row in rows:                 (serial when the rows are few; one row: batch-1 NCHW)
      for k in inputs:
        copy(out + row * width + offset_k, in_k + row * chunk_k, chunk_k elements)   (emitter.COPY_CALL: memcpy)

Against the generic compute, squeezenet's NHWC fire-module concats (55x55x(64+64) and 27x27x(128+128),
1 thread, AVX-512 host) went from 0.72 and 0.43 ms to 0.13 and 0.12 ms (explicit vector copy loops then).
The memcpy calls that replaced those loops run as fast (alternating exports, 1 and 2 threads: 14x14x(672+32)
0.98x the loops' time, 55x55x(64+64) 1.00x) and cost LLVM less. An elementwise epilogue fused after the concatenation (shufflenet's concat + relu) runs as its own
stage over the result.
"""
from __future__ import annotations

import math

from tensorkiln import te, tir
from tensorkiln.sdk import OpImplementation
from tensorkiln.sdk.schedules import inline_injective, schedule_injective_stage

from ..emitter import COPY_CALL

__all__ = ["concat_strategies", "CONCAT_TAG"]

CONCAT_TAG = "concat_copy"
PARALLEL_MIN_ELEMENTS = 1 << 14
"""Below this many elements in all, the copy runs on one thread: a fork/join costs more."""


def _copy_body(parts, axis: int, out_shape: tuple):
    inner = math.prod(out_shape[axis + 1:])
    rows = math.prod(out_shape[:axis])
    width = out_shape[axis] * inner
    total = rows * width

    def copy(ib, out, source, out_start, source_start, count: int) -> None:
        # one memcpy per chunk (emitter.COPY_CALL): copy loops, even written as vector loops, cost LLVM
        # about 30 ms per concatenation kernel (densenet121 has 54)
        if count:
            ib.emit(tir.Evaluate(tir.Call("void", COPY_CALL, (tir.BufferPointer(source.buffer, tir.as_expr(source_start, "int32")),
                                                             tir.BufferPointer(out.buffer, tir.as_expr(out_start, "int32")),
                                                             tir.const(count, "int32")))))

    def body(ins, outs):
        ib = te.IRBuilder()
        out = ib.buffer(outs[0])
        sources = [ib.buffer(b) for b in ins]
        kind = "parallel" if rows > 1 and total >= PARALLEL_MIN_ELEMENTS else "serial"
        with ib.for_range(0, rows, name="row", kind=kind) as row:
            offset = 0
            for source, extent in zip(sources, parts):
                chunk = extent * inner
                copy(ib, out, source, row * width + offset, row * chunk, chunk)
                offset += chunk
        return ib.get()
    return body


def _compute(inputs, attrs, out_type, target, config):
    out_shape = tuple(int(d) for d in out_type.shape)
    axis = attrs.axis % len(out_shape)
    parts = [t for t in inputs if int(t.shape[axis]) > 0]
    extents = [int(t.shape[axis]) for t in parts]
    (result,) = te.extern([out_shape], parts, _copy_body(extents, axis, out_shape), dtypes=[out_type.dtype],
                          name="T_concatenate", tag=CONCAT_TAG)
    return result


def _schedule(outputs, target, config):
    s = te.create_schedule([t.op for t in outputs])
    inline_injective(s)
    for stage_output in outputs:
        if not isinstance(stage_output.op, te.ExternOp):
            schedule_injective_stage(s, stage_output, target)
    for stage in list(s.stages):
        op = stage.op
        if isinstance(op, te.ComputeOp) and stage.feeds_extern and not stage.is_output:
            schedule_injective_stage(s, op.output(0), target)
    return s


def concat_strategies(target) -> list[OpImplementation]:
    return [OpImplementation("cpu_llvm.concat_copy", ("concatenate",), _schedule, compute=_compute,
                             priority=10)]
