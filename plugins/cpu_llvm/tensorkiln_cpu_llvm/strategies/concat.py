"""strategies/concat.py: `concatenate` as row-by-row contiguous copies (an extern stage), not a select per element.

The generic te compute of concatenate picks, for every output element, the input that holds it
through a tree of selects over clamped reads: vectorized along the concatenated axis that is a
gather of every input per vector. Seen as memory, a concatenation along `axis` is `rows` =
prod(shape[:axis]) rows, each the inputs' chunks of chunk_k = extent_k * inner elements laid end
to end (inner = prod(shape[axis + 1:])). The extern body copies exactly that:

    parallel for row in rows:                 (serial when the rows are few; one row: batch-1 NCHW)
      for k in inputs:
        for v in chunk_k / lanes: (vector) out[row * width + offset_k + v * lanes ...] = in_k[...]
        for j in the rest:  out[row * width + offset_k + j] = in_k[row * chunk_k + j]

Each inner loop is a plain copy, written with vector stores (LLVM then has nothing to vectorize). Measured on squeezenet's NHWC fire-module
concats (55x55x(64+64) and 27x27x(128+128), 1 thread, AVX-512 host): see CONCAT_MEASURED. An
elementwise epilogue fused after the concatenation (shufflenet's concat + relu) runs as its own
stage over the result.
"""
from __future__ import annotations

import math

from tensorkiln import te
from tensorkiln.sdk import OpImplementation
from tensorkiln.sdk.schedules import inline_injective, schedule_injective_stage, vector_lanes

__all__ = ["concat_strategies", "CONCAT_TAG"]

CONCAT_TAG = "concat_copy"
PARALLEL_MIN_ELEMENTS = 1 << 14
"""Below this many elements in all, the copy runs on one thread: a fork/join costs more."""


def _copy_body(parts, axis: int, out_shape: tuple, lanes: int):
    inner = math.prod(out_shape[axis + 1:])
    rows = math.prod(out_shape[:axis])
    width = out_shape[axis] * inner
    total = rows * width

    def copy(ib, out, source, out_start, source_start, count: int) -> None:
        # whole vectors as vector loops (explicit vector stores: LLVM has nothing left to vectorize,
        # which cost densenet121's 55 concatenations ~1.8 s of compile), then the rest element by element
        vectors = count // lanes if lanes > 1 else 0
        if vectors:
            with ib.for_range(0, vectors, name="v") as v:
                with ib.for_range(0, lanes, name="lane", kind="vectorized") as lane:
                    out[out_start + v * lanes + lane] = source[source_start + v * lanes + lane]
        if count > vectors * lanes:
            with ib.for_range(vectors * lanes, count, name="j") as j:
                out[out_start + j] = source[source_start + j]

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
    lanes = vector_lanes(target, out_type.dtype)
    (result,) = te.extern([out_shape], parts, _copy_body(extents, axis, out_shape, lanes), dtypes=[out_type.dtype],
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
