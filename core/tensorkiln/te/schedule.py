"""te/schedule.py: Schedule and Stage, the loop-transformation primitives.

    s = te.create_schedule(C.op)
    io, ii = s[C].split(C.op.axis[0], factor=32)
    s[C].vectorize(ii)
    s.trace   # (Split(stage='C', axis='i', factor=32), Vectorize(stage='C', axis='i.inner'))

Every primitive validates its request and raises ScheduleError naming the stage, the
axis and why; then it appends a frozen record to `s.trace` (see te/trace.py).
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..ir.dtypes import to_python
from ..ir.errors import ScheduleError
from ..tir import nodes as n
from ..tir.visit import rewrite, substitute
from . import trace as tr
from .expr import IterVar, Range, Reduce, TensorRead
from .extern import ExternOp
from .tensor import ComputeOp, Operation, PlaceholderOp, Tensor, tensors_of

__all__ = ["Schedule", "Stage", "ExternStage", "create_schedule", "SplitRelation", "FuseRelation", "IterAttr"]

SCOPES = ("global", "shared", "local", "warp")
PARTITION_KINDS = ("complete", "cyclic", "block")


def _as_int(value) -> int | None:
    """`value` as an int when it is one (numpy integers included, bools not), else None."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        return None
    return int(value)


@dataclass(frozen=True, eq=False)
class SplitRelation:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(frozen=True, eq=False)
class FuseRelation:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass
class IterAttr:
    """What a leaf loop becomes: kind, thread binding, pragmas, tensorize, prefetches."""

    kind: n.ForKind = n.ForKind.SERIAL
    thread_tag: str | None = None
    pragmas: list = field(default_factory=list)
    tensorize: object = None
    prefetches: list = field(default_factory=list)   # (input tensor, offset in iterations)


class Stage:
    """The schedule of one compute op: its loop axes and where/how it is computed."""

    is_extern = False   # an ExternStage (te.extern): its body builds its own loops

    def __init__(self, op: ComputeOp, schedule: "Schedule", name: str):
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.name = name
        self.all_iter_vars: list[IterVar] = [*op.axis, *op.reduce_axis]
        self.leaf_iter_vars: list[IterVar] = list(self.all_iter_vars)
        self.relations: list = []
        self.iter_attrs: dict[IterVar, IterAttr] = {}
        self.attach_type = "root"
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.storage_aligns: dict[IterVar, tuple[int, int]] = {}
        self.partition_spec: tuple[str, int | None] | None = None   # (kind, factor) of its buffer
        self.stream_depth: int | None = None                          # its buffer is a FIFO of this depth
        self.parallel_threads: int | None = None   # an extern stage's parallel loop on GPU threads, per block
        self.is_output = False

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    @property
    def feeds_extern(self) -> bool:
        """Whether an extern stage reads this stage's output, which must then stay a whole buffer
        at the root (schedules leave such a stage there instead of inlining or attaching it)."""
        return self.schedule._extern_reader(self) is not None

    def _check_not_extern_input(self, primitive: str) -> None:
        reader = self.schedule._extern_reader(self)
        if reader is not None:
            raise self._error(primitive, f"extern stage {reader.name} reads it, and an extern body reads whole "
                              "buffers; compute it at the root")

    # ---- helpers --------------------------------------------------------------------

    def _error(self, primitive: str, why: str, axis=None) -> ScheduleError:
        where = f"stage {self.name}" + (f", axis {_axis_name(axis)}" if axis is not None else "")
        return ScheduleError(f"{primitive} on {where}: {why}")

    def _axis(self, axis, primitive: str, leaf: bool = True) -> IterVar:
        """Resolve an IterVar or an axis name to one of this stage's axes."""
        if isinstance(axis, str):
            matches = [iv for iv in self.all_iter_vars if iv.name == axis]
            if not matches:
                names = ", ".join(iv.name for iv in self.leaf_iter_vars)
                raise self._error(primitive, f"no axis named {axis!r}; current loop axes are [{names}]", axis)
            axis = matches[-1]
        if not isinstance(axis, IterVar):
            raise self._error(primitive, f"{axis!r} is not an axis (IterVar)")
        if axis not in self.all_iter_vars:
            owner = self.schedule._owner_of(axis)
            whose = f"it belongs to stage {owner.name}" if owner else "it belongs to no stage of this schedule"
            raise self._error(primitive, f"{whose}; use an axis of {self.name}", axis)
        if leaf and axis not in self.leaf_iter_vars:
            raise self._error(primitive, "the axis no longer exists as a loop (it was already split or fused); "
                              f"use one of [{', '.join(iv.name for iv in self.leaf_iter_vars)}]", axis)
        return axis

    def _new_axis(self, name: str, kind: str) -> IterVar:
        existing = {iv.name for iv in self.all_iter_vars}
        base, count = name, 1
        while name in existing:
            name = f"{base}.{count}"
            count += 1
        iv = IterVar(name, n.Var(name), None, kind)
        self.all_iter_vars.append(iv)
        self.schedule._owners[iv] = self
        return iv

    def _attr(self, iv: IterVar) -> IterAttr:
        return self.iter_attrs.setdefault(iv, IterAttr())

    def _record(self, record) -> None:
        self.schedule._record(record)

    # ---- loop structure -------------------------------------------------------------

    def split(self, axis, factor: int | None = None, nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split `axis` into (outer, inner): inner has `factor` iterations, or outer has `nparts`.

        A factor that does not divide the extent leaves a tail, guarded when lowered.
        """
        parent = self._axis(axis, "split")
        if (factor is None) == (nparts is None):
            raise self._error("split", "give exactly one of factor= or nparts=", parent)
        value = factor if factor is not None else nparts
        what = "factor" if factor is not None else "nparts"
        if _as_int(value) is None or value <= 0:
            raise self._error("split", f"{what}={to_python(value)!r} must be a positive integer", parent)
        factor, nparts = _as_int(factor), _as_int(nparts)   # numpy integers become ints (the trace is JSON)
        self._check_not_tensorized(parent, "split")
        outer = self._new_axis(f"{parent.name}.outer", parent.kind)
        inner = self._new_axis(f"{parent.name}.inner", parent.kind)
        self.relations.append(SplitRelation(parent, outer, inner, factor, nparts))
        pos = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        self._record(tr.Split(self.name, parent.name, factor, nparts))
        return outer, inner

    def fuse(self, *axes) -> IterVar:
        """Fuse adjacent loop axes (outer to inner) into one."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if len(axes) < 2:
            raise self._error("fuse", f"needs at least two axes, got {len(axes)}")
        ivs = [self._axis(a, "fuse") for a in axes]
        names = tuple(iv.name for iv in ivs)
        positions = [self.leaf_iter_vars.index(iv) for iv in ivs]
        if positions != list(range(positions[0], positions[0] + len(ivs))):
            order = ", ".join(iv.name for iv in self.leaf_iter_vars)
            raise self._error("fuse", f"axes {list(names)} are not adjacent loops from outer to inner "
                              f"(loop order is [{order}]); reorder them first", ivs[0])
        kinds = {iv.kind for iv in ivs}
        if len(kinds) > 1:
            raise self._error("fuse", f"cannot fuse a reduction axis with a data axis ({list(names)})", ivs[0])
        fused = ivs[0]
        for iv in ivs[1:]:
            new = self._new_axis(f"{fused.name}.{iv.name}.fused" if not fused.name.endswith(".fused")
                                 else f"{fused.name[:-6]}.{iv.name}.fused", iv.kind)
            self.relations.append(FuseRelation(fused, iv, new))
            pos = self.leaf_iter_vars.index(fused)
            self.leaf_iter_vars[pos:pos + 2] = [new]
            fused = new
        self._record(tr.Fuse(self.name, names))
        return fused

    def reorder(self, *axes) -> None:
        """Put the given loop axes, in this order, into the positions they occupy now."""
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        ivs = [self._axis(a, "reorder") for a in axes]
        if len(set(ivs)) != len(ivs):
            dup = next(iv for iv in ivs if ivs.count(iv) > 1)
            raise self._error("reorder", "the axis appears twice", dup)
        positions = sorted(self.leaf_iter_vars.index(iv) for iv in ivs)
        for pos, iv in zip(positions, ivs):
            self.leaf_iter_vars[pos] = iv
        self._record(tr.Reorder(self.name, tuple(iv.name for iv in ivs)))

    def tile(self, x, y, x_factor: int, y_factor: int):
        """split x and y and reorder to (x.outer, y.outer, x.inner, y.inner); returns those four."""
        with self.schedule._quiet():
            xo, xi = self.split(x, factor=x_factor)
            yo, yi = self.split(y, factor=y_factor)
            self.reorder(xo, yo, xi, yi)
        self._record(tr.Tile(self.name, _axis_name(x), _axis_name(y), x_factor, y_factor))
        return xo, yo, xi, yi

    # ---- loop annotations -----------------------------------------------------------

    def _annotate(self, axis, kind: n.ForKind, primitive: str, record_type):
        iv = self._axis(axis, primitive)
        if iv.kind == "reduce" and kind in (n.ForKind.VECTORIZED, n.ForKind.PARALLEL):
            raise self._error(primitive, f"it is a reduction axis; a {kind.value} loop over a reduction would "
                              "race on the output. Split the reduction and apply it to a data axis", iv)
        attr = self._attr(iv)
        if attr.thread_tag is not None:
            raise self._error(primitive, f"the axis is bound to {attr.thread_tag}", iv)
        attr.kind = kind
        self._record(record_type(self.name, iv.name))

    def unroll(self, axis, factor: int | None = None) -> None:
        """Unroll the loop (small constant extents are unrolled in the IR, larger ones are marked).

        With `factor`, unroll it partially: the loop stays a loop annotated ("unroll_factor",
        factor) for targets that replicate its body that many times (HLS `UNROLL factor=`).
        """
        if factor is None:
            self._annotate(axis, n.ForKind.UNROLLED, "unroll", tr.Unroll)
            return
        iv = self._axis(axis, "unroll")
        if _as_int(factor) is None or factor <= 0:
            raise self._error("unroll", f"factor={to_python(factor)!r} must be a positive integer", iv)
        self._attr(iv).pragmas.append(("unroll_factor", int(factor)))
        self._record(tr.Unroll(self.name, iv.name, int(factor)))

    def pipeline(self, axis, ii: int = 1) -> None:
        """Pipeline the loop: start one iteration every `ii` cycles (initiation interval).

        Lowers to the loop annotation ("pipeline", ii), which spatial targets (HLS `PIPELINE II=`)
        read; targets without pipelines ignore it.
        """
        iv = self._axis(axis, "pipeline")
        if _as_int(ii) is None or ii <= 0:
            raise self._error("pipeline", f"ii={to_python(ii)!r} must be a positive integer", iv)
        self._attr(iv).pragmas.append(("pipeline", int(ii)))
        self._record(tr.Pipeline(self.name, iv.name, int(ii)))

    def loop_tripcount(self, axis, min: int, max: int, avg: int | None = None) -> None:
        """Tell estimators how many iterations a loop of unknown extent runs (annotation
        ("loop_tripcount", (min, max, avg)); HLS `LOOP_TRIPCOUNT`). `avg` defaults to the midpoint."""
        iv = self._axis(axis, "loop_tripcount")
        avg = (min + max) // 2 if avg is None and _as_int(min) is not None and _as_int(max) is not None else avg
        values = tuple(_as_int(v) for v in (min, max, avg))
        if None in values or not 0 <= values[0] <= values[2] <= values[1]:
            raise self._error("loop_tripcount", f"min={to_python(min)!r}, max={to_python(max)!r}, "
                              f"avg={to_python(avg)!r} must be integers with 0 <= min <= avg <= max", iv)
        self._attr(iv).pragmas.append(("loop_tripcount", values))
        self._record(tr.LoopTripcount(self.name, iv.name, *values))

    def partition(self, kind: str = "complete", factor: int | None = None) -> None:
        """Split the stage's buffer into banks that are read in parallel (HLS `ARRAY_PARTITION`):
        "complete" (one register per element), or "cyclic" / "block" into `factor` banks.
        Lowers to the PrimFunc attribute ("array_partition", ((buffer, kind, factor), ...))."""
        if kind not in PARTITION_KINDS:
            raise self._error("partition", f"unknown kind {kind!r}; use one of {', '.join(PARTITION_KINDS)}")
        if kind == "complete" and factor is not None:
            raise self._error("partition", "a complete partition takes no factor; use cyclic or block for banks")
        if kind != "complete" and (_as_int(factor) is None or factor < 2):
            raise self._error("partition", f"a {kind} partition needs factor >= 2, got {to_python(factor)!r}")
        self.partition_spec = (kind, None if factor is None else int(factor))
        self._record(tr.Partition(self.name, kind, self.partition_spec[1]))

    def stream(self, depth: int = 2) -> None:
        """Pass the stage's buffer from producer to consumer as a FIFO of `depth` elements instead
        of an array (HLS `hls::stream` in a dataflow region); written and read once, in order.
        Lowers to the PrimFunc attribute ("stream", ((buffer, depth), ...))."""
        if self.is_output:
            raise self._error("stream", "it is an output of the schedule; only intermediate stages can stream")
        if _as_int(depth) is None or depth <= 0:
            raise self._error("stream", f"depth={to_python(depth)!r} must be a positive integer")
        self.stream_depth = int(depth)
        self._record(tr.Stream(self.name, self.stream_depth))

    def vectorize(self, axis) -> None:
        """Turn the loop into vector code (stays a VECTORIZED loop when accesses are not contiguous)."""
        self._annotate(axis, n.ForKind.VECTORIZED, "vectorize", tr.Vectorize)

    def parallel(self, axis) -> None:
        """Run the loop's iterations on several threads."""
        self._annotate(axis, n.ForKind.PARALLEL, "parallel", tr.Parallel)

    def bind(self, axis, thread_ivar: IterVar) -> None:
        """Map the loop onto a GPU index: `s[C].bind(bx, te.thread_axis("blockIdx.x"))`.

        A reduction axis may be bound to threadIdx.x/y/z: each thread reduces its share (the
        serial reduction loops) into a register, then the threads combine their partial results
        (a tir.ThreadAllReduce: a tree in shared memory, or warp shuffles), and one of them
        stores the result (every thread, when the stage is in "local" scope):

            ko, ki = s[B].split(B.op.reduce_axis[0], factor=128)
            s[B].bind(B.op.axis[0], te.thread_axis("blockIdx.x"))
            s[B].bind(ki, te.thread_axis("threadIdx.x"))
        """
        iv = self._axis(axis, "bind")
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind != "thread":
            raise self._error("bind", f"{thread_ivar!r} is not a te.thread_axis", iv)
        if iv.kind == "reduce" and not thread_ivar.thread_tag.startswith("threadIdx"):
            raise self._error("bind", f"it is a reduction axis; only threadIdx.x/y/z can share a reduction (the "
                              f"threads of a block combine their parts), not {thread_ivar.thread_tag}: blocks cannot "
                              "combine results within one kernel. Split the axis and bind the inner part to "
                              "threadIdx.x, or rfactor it into its own stage", iv)
        for other, attr in self.iter_attrs.items():
            if attr.thread_tag == thread_ivar.thread_tag and other is not iv and other in self.leaf_iter_vars:
                raise self._error("bind", f"{thread_ivar.thread_tag} is already bound to axis {other.name}", iv)
        attr = self._attr(iv)
        attr.kind = n.ForKind.THREAD_BINDING
        attr.thread_tag = thread_ivar.thread_tag
        self._record(tr.Bind(self.name, iv.name, thread_ivar.thread_tag))

    def bind_parallel_loops(self, threads: int) -> None:
        """Extern stages only: run the PARALLEL loop that is their body's outermost statement (its
        iterations are independent) on GPU threads, `threads` per block, one iteration each:

            s[values].bind_parallel_loops(64)   # topk: one thread per row

        The loop becomes blockIdx.x x threadIdx.x with a guard for the tail; a body without a
        parallel loop runs on one thread, and one whose parallel loops sit inside a serial loop or
        follow one another raises ScheduleError when lowered (threads have no barrier between them).
        """
        if not self.is_extern:
            raise self._error("bind_parallel_loops", "only an extern stage (te.extern) has loops its body marks "
                              "parallel; bind a compute stage's axes with bind()")
        if _as_int(threads) is None or threads <= 0:
            raise self._error("bind_parallel_loops", f"threads={to_python(threads)!r} must be a positive integer")
        self.parallel_threads = int(threads)
        self._record(tr.BindParallelLoops(self.name, self.parallel_threads))

    def pragma(self, axis, key: str, value=None) -> None:
        """Attach `(key, value)` to the loop's For.annotations for the code emitter."""
        iv = self._axis(axis, "pragma")
        if not isinstance(key, str) or not key:
            raise self._error("pragma", f"key {key!r} must be a non-empty string", iv)
        self._attr(iv).pragmas.append((key, value))
        self._record(tr.Pragma(self.name, iv.name, key, value))

    def prefetch(self, tensor, axis, offset: int = 1) -> None:
        """At the top of each iteration of loop `axis`, ask the memory system for the part of `tensor` this
        stage reads `offset` iterations later (TVM's Stage.prefetch), so it arrives while this iteration
        computes:

            ko, ki = s[C].split(k, factor=64)
            s[C].prefetch(A, ko, 1)     # A's rows and columns of the next ko block

        `tensor` is one of the stage's inputs, kept in global memory. The region is what the loops
        inside `axis` read of it (interval bounds of its indices, clamped to the tensor), issued as one
        prefetch per contiguous run of its last dimension; the target emits a cache-line prefetch
        instruction per line (cpu_llvm: llvm.prefetch, OpenCL: prefetch()). It is a hint: results do
        not change, and a target that does not claim the "prefetch" primitive builds the schedule
        without it."""
        iv = self._axis(axis, "prefetch")
        if self.is_extern:
            raise self._error("prefetch", "an extern stage's body builds its own loops; prefetch inside its "
                              "body instead", iv)
        if not isinstance(tensor, Tensor) or not any(t.op is tensor.op and t.value_index == tensor.value_index
                                                     for t in self.op.input_tensors):
            inputs = ", ".join(self.schedule.name_of(t) for t in self.op.input_tensors) or "none"
            raise self._error("prefetch", f"{tensor!r} is not an input tensor of the stage (its inputs: "
                              f"{inputs})", iv)
        if _as_int(offset) is None or offset == 0:
            raise self._error("prefetch", f"offset={to_python(offset)!r} must be a nonzero integer (iterations "
                              "ahead)", iv)
        self._attr(iv).prefetches.append((tensor, int(offset)))
        self._record(tr.Prefetch(self.name, self.schedule.name_of(tensor), iv.name, int(offset)))

    def storage_align(self, axis, factor: int, offset: int) -> None:
        """Pad the allocated buffer so the stride of `axis`'s dimension is k * factor + offset."""
        iv = self._axis(axis, "storage_align", leaf=False)
        if iv not in self.op.axis:
            raise self._error("storage_align", "it is not one of the stage's data axes (op.axis)", iv)
        if _as_int(factor) is None or factor <= 0:
            raise self._error("storage_align", f"factor={to_python(factor)!r} must be a positive integer", iv)
        if _as_int(offset) is None or not 0 <= offset < factor:
            raise self._error("storage_align", f"offset={to_python(offset)!r} must be in [0, factor={factor})", iv)
        factor, offset = _as_int(factor), _as_int(offset)
        self.storage_aligns[iv] = (factor, offset)
        self._record(tr.StorageAlign(self.name, iv.name, factor, offset))

    def tensorize(self, axis, intrin) -> None:
        """Replace the loop nest from `axis` inward with a call of the tensor intrinsic."""
        from .tensorize import match_tensorize
        from .tensor_intrin import TensorIntrin
        iv = self._axis(axis, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise self._error("tensorize", f"{intrin!r} is not a te.TensorIntrin; declare one with "
                              "te.decl_tensor_intrin", iv)
        match_tensorize(self, iv, intrin)
        self._attr(iv).tensorize = intrin
        self._record(tr.Tensorize(self.name, iv.name, intrin.name, intrin))

    def _check_not_tensorized(self, iv, primitive):
        for other, attr in self.iter_attrs.items():
            if attr.tensorize is not None and other in self.leaf_iter_vars:
                raise self._error(primitive, f"stage is already tensorized at axis {other.name}; "
                                  "apply loop transformations before tensorize", iv)

    # ---- where the stage is computed ------------------------------------------------

    def compute_at(self, parent: "Stage", axis) -> None:
        """Compute this stage inside loop `axis` of `parent`, only the region that loop needs."""
        if not isinstance(parent, Stage):
            parent = self.schedule[parent]
        if parent is self:
            raise self._error("compute_at", "a stage cannot be computed at its own axis")
        iv = parent._axis(axis, "compute_at")
        if self.is_output:
            raise self._error("compute_at", "it is an output of the schedule; only intermediate stages can move")
        if self in parent._attach_chain():
            raise self._error("compute_at", f"stage {parent.name} is already computed inside {self.name}")
        self._check_not_extern_input("compute_at")
        self.attach_type, self.attach_stage, self.attach_ivar = "scope", parent, iv
        self._record(tr.ComputeAt(self.name, parent.name, iv.name))

    def compute_inline(self) -> None:
        """Substitute this stage's expression into its consumers; it gets no loops or buffer."""
        if self.is_output:
            raise self._error("compute_inline", "it is an output of the schedule")
        if isinstance(self.op.body, Reduce):
            raise self._error("compute_inline", "a reduction cannot be inlined; compute it at a loop "
                              "of its consumer with compute_at instead")
        self._check_not_extern_input("compute_inline")
        self.attach_type, self.attach_stage, self.attach_ivar = "inline", None, None
        self._record(tr.ComputeInline(self.name))

    def compute_root(self) -> None:
        """Compute the whole stage at the top of the function (the default)."""
        self.attach_type, self.attach_stage, self.attach_ivar = "root", None, None
        self._record(tr.ComputeRoot(self.name))

    def set_scope(self, scope: str) -> None:
        """Memory scope of the stage's buffer: global, shared or local."""
        if scope not in SCOPES:
            raise self._error("set_scope", f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        self.scope = scope
        self._record(tr.SetScope(self.name, scope))

    def _attach_chain(self) -> list["Stage"]:
        chain, stage = [], self
        while stage.attach_type == "scope":
            stage = stage.attach_stage
            chain.append(stage)
        return chain


class ExternStage(Stage):
    """The stage of a te.extern op. Its body builds its own loops, so every primitive but
    compute_root (where it always is) and bind_parallel_loops (GPU threads for the loop its body
    marks parallel) is refused; the stages around it are scheduled as usual."""

    is_extern = True

    def _refuse(self, primitive: str):
        raise self._error(primitive, "it is an extern stage (te.extern), whose body builds its own loops; "
                          "schedule the stages that produce or consume it instead")

    def _axis(self, axis, primitive: str, leaf: bool = True) -> IterVar:
        self._refuse(primitive)


def _refusal(primitive: str):
    def refuse(self, *args, **kwargs):
        self._refuse(primitive)
    refuse.__name__ = primitive
    refuse.__doc__ = f"Refused on an extern stage: {primitive} needs loops that the schedule owns."
    return refuse


for _primitive in ("split", "fuse", "reorder", "tile", "unroll", "pipeline", "loop_tripcount", "partition",
                   "stream", "vectorize", "parallel", "bind", "pragma", "storage_align", "tensorize",
                   "compute_at", "compute_inline", "set_scope"):
    setattr(ExternStage, _primitive, _refusal(_primitive))


def _axis_name(axis) -> str:
    return axis if isinstance(axis, str) else getattr(axis, "name", repr(axis))


class Schedule:
    """All stages of a computation, producers before consumers, plus the trace."""

    def __init__(self, outputs: list[Operation]):
        self.outputs = outputs
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        self._owners: dict[IterVar, Stage] = {}
        self._tensors: dict[str, Tensor] = {}
        self._names: dict[Operation, str] = {}
        self._trace: list = []
        self._recording = True
        self.is_dataflow = False
        # Names are claimed in producer-to-consumer order, so the same compute built afresh
        # gets the same names and a trace replays onto it unambiguously.
        self._output_names: dict[tuple[Operation, int], str] = {}   # buffer names of extern outputs
        for op in _post_order(outputs):
            name = self._claim_name(op.output(0), op.name)
            if isinstance(op, ComputeOp):
                self._add_stage(op, len(self.stages), name)
            elif isinstance(op, ExternOp):
                self._add_extern_stage(op, name)
        for op in outputs:
            self.stage_map[op].is_output = True

    @property
    def trace(self) -> tuple:
        return tuple(self._trace)

    def dataflow(self) -> None:
        """Run the root stages as concurrent processes connected by their buffers (HLS `DATAFLOW`):
        the PrimFunc attribute ("dataflow", True). Pair it with `s[B].stream(depth)` on intermediates."""
        self.is_dataflow = True
        self._record(tr.Dataflow())

    def _record(self, record) -> None:
        if self._recording:
            self._trace.append(record)

    @contextmanager
    def _quiet(self):
        before, self._recording = self._recording, False
        try:
            yield
        finally:
            self._recording = before

    def _free_name(self, name: str) -> str:
        """`name`, or `name.1`, `name.2`, ...: the first that no tensor of the schedule has."""
        base, count = name, 1
        while name in self._tensors:
            name = f"{base}.{count}"
            count += 1
        return name

    def _claim_name(self, tensor: Tensor, name: str) -> str:
        """Register `tensor` under `name`, or under a free variant of it when that is taken."""
        name = self._free_name(name)
        self._tensors[name] = tensor
        self._names[tensor.op] = name
        return name

    def name_of(self, tensor: Tensor) -> str:
        """The tensor's name in this schedule: its own, or with a `.N` suffix if an earlier
        tensor of the schedule has the same name (two `T_add` become `T_add` and `T_add.1`).
        Stages, trace records and lowered buffers use this name."""
        if isinstance(tensor, Tensor) and (tensor.op, tensor.value_index) in self._output_names:
            return self._output_names[(tensor.op, tensor.value_index)]
        op = tensor.op if isinstance(tensor, Tensor) else tensor
        if op in self._names:
            return self._names[op]
        stage = self.stage_map.get(op)   # a stage's op after cache_read / cache_write rewrote it
        return stage.name if stage is not None else op.name

    def _add_stage(self, op: ComputeOp, position: int, name: str) -> Stage:
        stage = Stage(op, self, name)
        self.stages.insert(position, stage)
        self.stage_map[op] = stage
        for iv in stage.all_iter_vars:
            self._owners[iv] = stage
        return stage

    def _add_extern_stage(self, op: ExternOp, name: str) -> Stage:
        stage = ExternStage(op, self, name)
        self.stages.append(stage)
        self.stage_map[op] = stage
        if op.num_outputs > 1:
            # each output is a buffer of its own, named after the tensor (the stage has the op's name)
            for tensor in op.outputs:
                buffer_name = self._free_name(tensor.name)
                self._tensors[buffer_name] = tensor
                self._output_names[(op, tensor.value_index)] = buffer_name
        return stage

    def _extern_reader(self, stage: Stage) -> Stage | None:
        """The first extern stage that reads `stage`'s output, if any."""
        for other in self.stages:
            if other.is_extern and any(t.op is stage.op or t.op is stage.origin_op for t in other.op.input_tensors):
                return other
        return None

    def _owner_of(self, iv) -> Stage | None:
        return self._owners.get(iv)

    def __getitem__(self, key) -> Stage:
        if isinstance(key, Stage):
            return key
        if isinstance(key, str):
            for stage in self.stages:
                if stage.name == key:
                    return stage
            raise ScheduleError(f"schedule has no stage named {key!r}; stages are "
                                f"[{', '.join(st.name for st in self.stages)}]")
        op = key.op if isinstance(key, Tensor) else key
        stage = self.stage_map.get(op)
        if stage is None:
            what = "a placeholder (input), which has no loops to schedule" if isinstance(op, PlaceholderOp) \
                else "not part of this schedule"
            raise ScheduleError(f"{getattr(op, 'name', op)} is {what}")
        return stage

    def tensor_by_name(self, name: str) -> Tensor:
        if name not in self._tensors:
            raise ScheduleError(f"schedule has no tensor named {name!r}")
        return self._tensors[name]

    def stage_of_tensor(self, tensor: Tensor) -> Stage | None:
        return self.stage_map.get(tensor.op)

    def rfactor(self, tensor: Tensor, axis, factor_axis: int = 0) -> Tensor:
        """Split reduction loop `axis` of `tensor`'s stage out into a new stage of partial results
        (te/rfactor.py): `BF = s.rfactor(B, ki)` gives BF[ki, i] = sum over ko of A[i, ko*F + ki],
        and B[i] = sum over a fresh axis of BF; returns BF."""
        from .rfactor import rfactor
        stage = self[tensor]
        if stage.is_extern:
            stage._refuse("rfactor")
        with self._quiet():
            factored = rfactor(self, tensor, axis, factor_axis)
        self._record(tr.RFactor(stage.name, _axis_name(axis), factor_axis))
        return factored

    # ---- caches ---------------------------------------------------------------------

    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """Copy `tensor` into a `scope` buffer read by `readers` instead of `tensor`."""
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read of {tensor.name}: unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        readers = readers if isinstance(readers, (list, tuple)) else [readers]
        reader_stages = [self[r] for r in readers]
        for stage in reader_stages:
            if stage.is_extern:
                raise ScheduleError(f"cache_read of {self.name_of(tensor)}: stage {stage.name} is an extern stage "
                                    "(te.extern), whose body reads its input buffers directly")
            if not any(t is tensor for t in stage.op.input_tensors):
                raise ScheduleError(f"cache_read of {self.name_of(tensor)}: stage {stage.name} does not read it")
        name = self._free_name(f"{self.name_of(tensor)}.{scope}")
        axes = _fresh_axes(tensor.shape, tensor.ndim)
        cache_op = ComputeOp(name, "", axes, TensorRead(tensor, tuple(a.var for a in axes)))
        cache = cache_op.output(0)
        self._claim_name(cache, name)
        for stage in reader_stages:
            new_body = rewrite(stage.op.body, pre=lambda x: TensorRead(cache, x.indices)
                               if isinstance(x, TensorRead) and x.tensor is tensor else None)
            stage.op = stage.op.with_body(new_body)
            self.stage_map[stage.op] = stage
        producer = self.stage_map.get(tensor.op)
        position = self.stages.index(producer) + 1 if producer else 0
        stage = self._add_stage(cache_op, position, name)
        stage.scope = scope
        self._record(tr.CacheRead(self.name_of(tensor), scope, tuple(st.name for st in reader_stages)))
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute `tensor` into a `scope` buffer; the original stage then copies it out."""
        if scope not in SCOPES:
            raise ScheduleError(f"cache_write of {tensor.name}: unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        stage = self[tensor]
        if stage.is_extern:
            stage._refuse("cache_write")
        if stage.relations or stage.iter_attrs or stage.attach_type != "root":
            raise ScheduleError(f"cache_write of {tensor.name}: stage {stage.name} was already scheduled; "
                                "call cache_write before other primitives on it")
        op = stage.op
        name = self._free_name(f"{stage.name}.{scope}")
        axis = _fresh_axes(op.shape, len(op.shape), [a.name for a in op.axis])
        mapping = {old.var: new.var for old, new in zip(op.axis, axis)}
        body = op.body
        if isinstance(body, Reduce):
            raxes = tuple(IterVar(r.name, n.Var(r.name), r.dom, "reduce") for r in body.axis)
            mapping.update({old.var: new.var for old, new in zip(body.axis, raxes)})
            body = Reduce(body.combiner, substitute(body.source, mapping), raxes,
                          None if body.condition is None else substitute(body.condition, mapping))
        else:
            body = substitute(body, mapping)
        cache_op = ComputeOp(name, op.tag, axis, body, op.attrs)
        cache = cache_op.output(0)
        self._claim_name(cache, name)
        stage.op = ComputeOp(op.name, op.tag, op.axis, TensorRead(cache, tuple(a.var for a in op.axis)), op.attrs)
        self.stage_map[stage.op] = stage
        stage.all_iter_vars = list(op.axis)
        stage.leaf_iter_vars = list(op.axis)
        new_stage = self._add_stage(cache_op, self.stages.index(stage), name)
        new_stage.scope = scope
        self._record(tr.CacheWrite(stage.name, scope))
        return cache


def _fresh_axes(shape, ndim, names=None):
    names = names or [f"ax{d}" for d in range(ndim)]
    return tuple(IterVar(nm, n.Var(nm), Range(0, extent), "data") for nm, extent in zip(names, shape))


def _post_order(outputs: list[Operation]) -> list[Operation]:
    order, seen = [], set()
    stack = [(op, False) for op in reversed(outputs)]
    while stack:
        op, expanded = stack.pop()
        if expanded:
            if op not in seen:
                seen.add(op)
                order.append(op)
            continue
        if op in seen:
            continue
        stack.append((op, True))
        for t in reversed(op.input_tensors):
            if t.op not in seen:
                stack.append((t.op, False))
    return order


def create_schedule(ops) -> Schedule:
    """A default schedule (every stage at the root, loops in axis order) for the outputs."""
    ops = ops if isinstance(ops, (list, tuple)) else [ops]
    return Schedule([t.op for t in tensors_of(ops)])
