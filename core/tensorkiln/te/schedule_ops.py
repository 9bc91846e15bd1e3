"""te/schedule_ops.py: turn a te Schedule into one loop-nest statement.

Steps, in order:
  1. buffers: one parameter Buffer per argument tensor, one Allocate per other stage;
  2. inline: substitute compute_inline stages into their readers;
  3. bounds: from consumers to producers, the region each stage must compute
     (the whole tensor at the root, the part read below the attach loop otherwise);
  4. nests: each stage's loops from its leaf axes (splits, fuses, reorder), with
     guards for tails, init + update for reductions, attached stages inside their
     attach loops, tensorized tiles replaced by intrinsic calls.
Indices are emitted flat (row-major over each buffer; allocated buffers are 1-D).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..ir.errors import ScheduleError
from ..tir import nodes as n
from ..tir.arith import as_int, const_bounds, simplify_expr
from ..tir.bound import interval
from ..tir.visit import collect_vars, post_order_visit, rewrite, substitute
from .cross_thread import cross_thread_nest, loop_order, thread_reduce_leaves
from .expr import IterVar, Reduce, TensorRead
from .extern import ExternOp
from .schedule import FuseRelation, Schedule, Stage
from .tensor import ComputeOp, PlaceholderOp, Tensor
from .tensorize import leaf_extents, match_tensorize

__all__ = ["ScheduleLowering", "effective_body", "predicate_select_loads"]


@dataclass(eq=False)
class _StageInfo:
    stage: Stage
    body: n.PrimExpr
    buffer: n.Buffer | None = None
    is_param: bool = False
    shape: tuple = ()
    mins: list = field(default_factory=list)
    extents: list = field(default_factory=list)
    strides: list = field(default_factory=list)
    iv_extent: dict = field(default_factory=dict)
    iv_value: dict = field(default_factory=dict)
    guards: list = field(default_factory=list)
    buffers: list = field(default_factory=list)     # an extern stage's: one per output
    are_params: list = field(default_factory=list)  # an extern stage's: which buffers are kernel parameters

    def root_value(self, iv: IterVar) -> n.PrimExpr:
        op = self.stage.op
        if iv in op.axis:
            d = op.axis.index(iv)
            return _add(self.mins[d], self.iv_value[iv])
        return _add(n.IntImm("int32", iv.dom.min), self.iv_value[iv])


def _add(a, b):
    if as_int(a) == 0:
        return b
    return n.Add(a, b)


def _row_major(shape) -> list[int]:
    strides, acc = [], 1
    for extent in reversed(shape):
        strides.append(acc)
        acc *= extent
    return list(reversed(strides))


def effective_body(schedule: Schedule, stage: Stage) -> n.PrimExpr:
    """The stage's body with compute_inline producers substituted."""
    memo: dict = {}
    if stage.is_extern:
        return None   # its body is loop IR, built when lowered

    def body_of(st: Stage):
        if st not in memo:
            memo[st] = _inline(st.op.body)
        return memo[st]

    def _inline(expr):
        def pre(x):
            if isinstance(x, TensorRead):
                st = schedule.stage_map.get(x.tensor.op)
                indices = tuple(_inline(i) for i in x.indices)
                if st is not None and st.attach_type == "inline":
                    mapping = {a.var: i for a, i in zip(st.op.axis, indices)}
                    return substitute(body_of(st), mapping)
                if any(a is not b for a, b in zip(indices, x.indices)):
                    return TensorRead(x.tensor, indices)
                return x
            return None
        return rewrite(expr, pre=pre)
    return body_of(stage)


class ScheduleLowering:
    """Holds the per-stage facts while one schedule is lowered (single use)."""

    def __init__(self, schedule: Schedule, args):
        self.schedule = schedule
        self.params: list[n.Buffer] = []
        self.placeholder_buffers: dict = {}
        self.extern_params: dict = {}     # (ExternOp, output index) -> parameter Buffer
        self.infos: dict[Stage, _StageInfo] = {}
        self.var_bounds: dict = {}
        self.intrinsics: list = []
        self._make_params(args)
        self._make_infos()
        for stage in reversed(self.schedule.stages):
            if stage in self.infos:
                self._infer_region(self.infos[stage])
                self._make_structure(self.infos[stage])

    # ---- 1. buffers -----------------------------------------------------------------

    def _make_params(self, args):
        seen, seen_ops = set(), set()
        for t in args:
            if isinstance(t, n.Buffer):
                raise ScheduleError(f"lower: args must be te tensors, got buffer {t.name}")
            if (t.op, t.value_index) in seen:
                raise ScheduleError(f"lower: tensor {t.name} appears twice in args")
            seen.add((t.op, t.value_index))
            seen_ops.add(t.op)
            if any(not isinstance(s, int) for s in t.shape):
                raise ScheduleError(f"lower: tensor {t.name} has a symbolic shape {t.shape}; shapes must be static ints")
            buf = n.Buffer(self.schedule.name_of(t), tuple(n.IntImm("int32", s) for s in t.shape), t.dtype)
            self.params.append(buf)
            if isinstance(t.op, PlaceholderOp):
                self.placeholder_buffers[t.op] = buf
            else:
                stage = self.schedule.stage_map.get(t.op)
                if stage is None:
                    raise ScheduleError(f"lower: tensor {t.name} in args is not part of the schedule")
                if stage.attach_type == "inline":
                    raise ScheduleError(f"lower: stage {stage.name} is in args but was compute_inline'd; "
                                        "an argument must be materialized")
                if stage.is_extern:
                    self.extern_params[(t.op, t.value_index)] = buf
                else:
                    self.placeholder_buffers[t.op] = buf
        for op in self.schedule.outputs:
            if op not in seen_ops and self.schedule.stage_map[op].op not in seen_ops:
                raise ScheduleError(f"lower: output {op.name} is not in args; pass every output tensor")

    def _make_infos(self):
        for stage in self.schedule.stages:
            if stage.attach_type == "inline":
                continue
            info = _StageInfo(stage, effective_body(self.schedule, stage))
            info.shape = tuple(stage.op.shape)
            param = self.placeholder_buffers.get(stage.origin_op) or self.placeholder_buffers.get(stage.op)
            if param is not None:
                info.buffer, info.is_param = param, True
            self.infos[stage] = info
        for info in self.infos.values():
            if info.stage.is_extern:
                for tensor in info.stage.op.input_tensors:
                    if isinstance(tensor.op, PlaceholderOp) and tensor.op not in self.placeholder_buffers:
                        raise ScheduleError(f"lower: placeholder {tensor.name} is read by extern stage "
                                            f"{info.stage.name} but not in args; pass it as an argument")
                continue
            post_order_visit(info.body, self._check_read)

    def _check_read(self, x):
        if isinstance(x, TensorRead) and isinstance(x.tensor.op, PlaceholderOp):
            if x.tensor.op not in self.placeholder_buffers:
                raise ScheduleError(f"lower: placeholder {x.tensor.name} is read but not in args; "
                                    "pass it as an argument")

    def info_of(self, tensor: Tensor) -> _StageInfo | None:
        stage = self.schedule.stage_map.get(tensor.op)
        return self.infos.get(stage) if stage is not None else None

    # ---- 3. bound inference -----------------------------------------------------------

    def _enclosing(self, stage: Stage, iv: IterVar) -> list[tuple[Stage, IterVar]]:
        """Loops (stage, leaf) around the body of `iv` in `stage`, outermost first."""
        outer = self._enclosing(stage.attach_stage, stage.attach_ivar) if stage.attach_type == "scope" else []
        leaves = loop_order(stage)
        return outer + [(stage, leaf) for leaf in leaves[:leaves.index(iv) + 1]]

    def _infer_region(self, info: _StageInfo):
        stage = info.stage
        full_mins = [n.IntImm("int32", 0) for _ in info.shape]
        if stage.attach_type != "scope":
            info.mins, info.extents = full_mins, list(info.shape)
            return
        reader = self.schedule._extern_reader(stage)
        if reader is not None:   # attached before the extern stage existed, or by a replayed trace
            raise ScheduleError(f"compute_at of stage {stage.name}: extern stage {reader.name} reads it, and an "
                                "extern body reads whole buffers; compute it at the root")
        target, iv = stage.attach_stage, stage.attach_ivar
        where = f"compute_at of stage {stage.name} at {target.name}.{iv.name}"
        if target.attach_type == "inline":
            raise ScheduleError(f"{where}: stage {target.name} was compute_inline'd and has no loops")
        if iv not in target.leaf_iter_vars:
            raise ScheduleError(f"{where}: axis {iv.name} is no longer a loop of {target.name} (it was split or "
                                f"fused after compute_at); attach to one of "
                                f"[{', '.join(v.name for v in target.leaf_iter_vars)}]")
        target_info = self.infos.get(target)
        if target_info is None or not target_info.iv_extent:
            raise ScheduleError(f"{where}: {target.name} does not read {stage.name} (directly or through "
                                "stages computed inside it); compute_at must target a consumer")
        # an enclosing loop is one point of the region unless it is a GPU index whose other
        # values share the buffer: those are relaxed to their whole range (_is_relaxed)
        fixed = {leaf.var for st, leaf in self._enclosing(target, iv)
                 if not _is_relaxed(_thread_tag(st, leaf), stage.scope)}
        env = {v: (n.IntImm("int32", lo), n.IntImm("int32", hi)) for v, (lo, hi) in self.var_bounds.items()
               if v not in fixed}
        reads = []
        for consumer in self.infos.values():
            found = _reads_of(consumer.body, stage)
            if not found:
                continue
            if consumer.stage is not target and target not in consumer.stage._attach_chain():
                raise ScheduleError(f"{where}: stage {consumer.stage.name} also reads {stage.name} but is not "
                                    f"computed inside {target.name}; compute {stage.name} at root or at a loop "
                                    "enclosing all its consumers")
            roots = [*consumer.stage.op.axis, *consumer.stage.op.reduce_axis]
            root_env = {}
            for root in roots:
                root_env[root.var] = interval(consumer.root_value(root), env)
            reads += [(idx, root_env) for idx in found]
        if not reads:
            raise ScheduleError(f"{where}: {target.name} does not read {stage.name}")
        bounds = self.var_bounds
        mins, extents = [], []
        for d, full in enumerate(info.shape):
            los, his, known = [], [], True
            for indices, root_env in reads:
                if any(r is None for r in root_env.values()):
                    known = False
                    break
                r = interval(indices[d], root_env)
                if r is None:
                    known = False
                    break
                los.append(r[0])
                his.append(r[1])
            if not known:
                mins.append(n.IntImm("int32", 0))
                extents.append(full)
                continue
            lo, hi = los[0], his[0]
            for x in los[1:]:
                lo = n.Min(lo, x)
            for x in his[1:]:
                hi = n.Max(hi, x)
            lo, hi = simplify_expr(lo, bounds), simplify_expr(hi, bounds)
            extent = simplify_expr(n.Sub(n.Add(hi, n.IntImm("int32", 1)), lo), bounds)
            value = as_int(extent)
            if value is None:
                b = const_bounds(extent, bounds)
                value = b[1] if b is not None else full
            lo_bounds = const_bounds(lo, bounds)
            if value >= full or lo_bounds is None:
                mins.append(n.IntImm("int32", 0))
                extents.append(full)
            else:
                mins.append(lo)
                extents.append(max(value, 1))
        info.mins, info.extents = mins, extents

    def _make_structure(self, info: _StageInfo):
        stage = info.stage
        op = stage.op
        if stage.is_extern:
            self._make_extern_buffers(info)
            return
        root_extents = {iv: e for iv, e in zip(op.axis, info.extents)}
        root_extents.update({iv: iv.dom.extent for iv in op.reduce_axis})
        ext = leaf_extents(stage, root_extents)
        value = {leaf: leaf.var for leaf in stage.leaf_iter_vars}
        for rel in reversed(stage.relations):
            if isinstance(rel, FuseRelation):
                inner = n.IntImm("int32", ext[rel.inner])
                value[rel.outer] = n.FloorDiv(value[rel.fused], inner)
                value[rel.inner] = n.FloorMod(value[rel.fused], inner)
            else:
                value[rel.parent] = n.Add(n.Mul(value[rel.outer], n.IntImm("int32", ext[rel.inner])), value[rel.inner])
                if ext[rel.outer] * ext[rel.inner] > ext[rel.parent]:
                    info.guards.append(n.LT(value[rel.parent], n.IntImm("int32", ext[rel.parent])))
        for leaf in stage.leaf_iter_vars:
            self.var_bounds[leaf.var] = (0, ext[leaf] - 1)
        info.iv_extent, info.iv_value = ext, value
        for d, root in enumerate(op.axis):
            if stage.attach_type != "scope" or info.extents[d] == info.shape[d] and as_int(info.mins[d]) == 0:
                continue
            lo_b = const_bounds(info.mins[d], self.var_bounds)
            absolute = info.root_value(root)
            if lo_b is None or lo_b[0] < 0:
                info.guards.append(n.GE(absolute, n.IntImm("int32", 0)))
            if lo_b is None or lo_b[1] + info.extents[d] > info.shape[d]:
                info.guards.append(n.LT(absolute, n.IntImm("int32", info.shape[d])))
        if info.is_param:
            info.strides = _row_major(info.shape)
        else:
            info.strides = self._aligned_strides(info)
            size = info.strides[0] * info.extents[0] if info.extents else 1
            info.buffer = n.Buffer(stage.name, (n.IntImm("int32", max(size, 1)),), op.dtype, None, stage.scope)
            info.mins = [simplify_expr(m, self.var_bounds) for m in info.mins]

    def _make_extern_buffers(self, info: _StageInfo):
        """An extern stage's outputs: whole, row-major buffers (parameters, or allocated here)."""
        op = info.stage.op
        for tensor in op.outputs:
            param = self.extern_params.get((op, tensor.value_index))
            info.are_params.append(param is not None)
            if param is None:
                shape = tuple(n.IntImm("int32", s) for s in tensor.shape)
                param = n.Buffer(self.schedule.name_of(tensor), shape, tensor.dtype)
            info.buffers.append(param)
        info.buffer, info.is_param = info.buffers[0], info.are_params[0]
        info.strides = _row_major(info.shape)

    def _extern_nest(self, info: _StageInfo) -> n.Stmt:
        """The extern body over its buffers; each input must be a whole row-major buffer."""
        stage = info.stage
        inputs = []
        for tensor in stage.op.inputs:
            source = self.info_of(tensor)
            if source is None:
                inputs.append(self.placeholder_buffers[tensor.op])
                continue
            if source.stage.is_extern:
                inputs.append(source.buffers[tensor.value_index])
                continue
            if source.strides != _row_major(source.shape) or any(as_int(m) != 0 for m in source.mins) \
                    or list(source.extents) != list(source.shape):
                raise ScheduleError(f"extern stage {stage.name} reads stage {source.stage.name}, which is not a whole "
                                    "row-major buffer (storage_align or compute_at changed it); an extern body "
                                    "reads whole buffers, so leave its producers at the root without storage_align")
            inputs.append(source.buffer)
        body = stage.op.build_body(inputs, info.buffers)
        if stage.parallel_threads is not None:
            body = _bind_parallel_loop(stage, body, stage.parallel_threads)
        return body

    def _aligned_strides(self, info: _StageInfo) -> list[int]:
        strides, acc = [], 1
        axes = info.stage.op.axis
        for d in reversed(range(len(info.extents))):
            align = info.stage.storage_aligns.get(axes[d])
            if align is not None:
                factor, offset = align
                acc = acc + (offset - acc) % factor
            strides.append(acc)
            acc *= info.extents[d]
        return list(reversed(strides))

    # ---- 4. loop nests -------------------------------------------------------------

    def build(self) -> n.Stmt:
        roots = [info for info in self.infos.values() if info.stage.attach_type == "root"]
        stmt = n.SeqStmt(tuple(self._stage_nest(info) for info in roots))
        for info in reversed(roots):
            if info.stage.is_extern:
                for buffer, is_param in reversed(list(zip(info.buffers, info.are_params))):
                    if not is_param:
                        stmt = n.Allocate(buffer, stmt)
            elif not info.is_param:
                stmt = n.Allocate(info.buffer, stmt)
        return stmt

    def _flat_index(self, info_or_buffer, indices, mins=None) -> n.PrimExpr:
        if isinstance(info_or_buffer, _StageInfo):
            strides, mins = info_or_buffer.strides, info_or_buffer.mins
        else:
            strides, mins = _row_major([s.value for s in info_or_buffer.shape]), None
        total = None
        for d, (index, stride) in enumerate(zip(indices, strides)):
            if mins is not None and as_int(mins[d]) != 0:
                index = n.Sub(index, mins[d])
            term = index if stride == 1 else n.Mul(index, n.IntImm("int32", stride))
            total = term if total is None else n.Add(total, term)
        return total if total is not None else n.IntImm("int32", 0)

    def lower_expr(self, expr: n.PrimExpr, root_map: dict) -> n.PrimExpr:
        """A te expression as loop IR: roots substituted, reads turned into (guarded) Loads."""
        return predicate_select_loads(self._lower_reads(expr, root_map), self.var_bounds)

    def _lower_reads(self, expr: n.PrimExpr, root_map: dict) -> n.PrimExpr:
        expr = substitute(expr, root_map)

        def pre(x):
            if isinstance(x, TensorRead):
                indices = tuple(self._lower_reads(i, {}) for i in x.indices)
                return n.Load(*self.address(x.tensor, indices))
            return None
        return rewrite(expr, pre=pre)

    def address(self, tensor: Tensor, indices) -> tuple[n.Buffer, n.PrimExpr]:
        info = self.info_of(tensor)
        if info is None:
            buf = self.placeholder_buffers[tensor.op]
            return buf, self._flat_index(buf, indices)
        if info.stage.is_extern:
            buf = info.buffers[tensor.value_index]
            return buf, self._flat_index(buf, indices)
        return info.buffer, self._flat_index(info, indices)

    def _root_map(self, info: _StageInfo, overrides: dict | None = None) -> dict:
        roots = [*info.stage.op.axis, *info.stage.op.reduce_axis]
        values = {root.var: info.root_value(root) for root in roots}
        if overrides:
            values = {k: substitute(v, overrides) for k, v in values.items()}
        return values

    def _loop(self, stage: Stage, iv: IterVar, extent: int, body: n.Stmt) -> n.For:
        attr = stage.iter_attrs.get(iv)
        kind = attr.kind if attr else n.ForKind.SERIAL
        tag = attr.thread_tag if attr else None
        notes = tuple(attr.pragmas) if attr else ()
        return n.For(iv.var, n.IntImm("int32", 0), n.IntImm("int32", extent), kind, body, tag, notes)

    def _stage_nest(self, info: _StageInfo) -> n.Stmt:
        stage = info.stage
        if stage.is_extern:
            return self._extern_nest(info)
        if self._is_cooperative(info):
            return self._cooperative_nest(info)
        if thread_reduce_leaves(stage) and isinstance(info.body, Reduce):
            return cross_thread_nest(self, info)
        leaves = stage.leaf_iter_vars
        position = {leaf.var: p for p, leaf in enumerate(leaves)}
        tensorize_at = next((p for p, leaf in enumerate(leaves)
                             if stage.iter_attrs.get(leaf) and stage.iter_attrs[leaf].tensorize is not None), None)
        limit = len(leaves) if tensorize_at is None else tensorize_at
        is_reduce = isinstance(info.body, Reduce)
        # a tensorized reduction needs no init: its call overwrites on the first chunk
        needs_init = is_reduce and tensorize_at is None
        reduce_at = next((p for p in range(limit) if leaves[p].kind == "reduce"), None) if needs_init else None
        guards_at: dict[int, list] = {}
        for guard in info.guards:
            level = max((position[v] for v in collect_vars(guard) if v in position), default=-1)
            if tensorize_at is not None and level >= tensorize_at:
                raise ScheduleError(f"tensorize on stage {stage.name}: the tile at axis {leaves[tensorize_at].name} "
                                    f"needs a bounds check ({guard}); choose splits that divide the extents")
            guards_at.setdefault(level, []).append(guard)
        root_map = self._root_map(info)
        output_index = self._flat_index(info, [root_map[a.var] for a in stage.op.axis])

        def innermost() -> n.Stmt:
            if tensorize_at is not None:
                return self._tensorize_call(info, leaves[tensorize_at])
            if not is_reduce:
                return n.Store(info.buffer, self.lower_expr(info.body, root_map), output_index)
            body = info.body
            current = n.Load(info.buffer, output_index)
            value = body.combiner.combine(current, self.lower_expr(body.source, root_map))
            stmt = n.Store(info.buffer, value, output_index)
            if body.condition is not None:
                stmt = n.IfThenElse(self.lower_expr(body.condition, root_map), stmt)
            return stmt

        def build(p: int) -> n.Stmt:
            if p == limit:
                return innermost()
            iv = leaves[p]
            inner = self._attach_producers(stage, iv, build(p + 1))
            attr = stage.iter_attrs.get(iv)
            if attr is not None and attr.prefetches:
                inner = n.SeqStmt((*self._prefetches(info, root_map, leaves, p, attr), inner))
            for guard in guards_at.get(p, ()):
                inner = n.IfThenElse(guard, inner)
            loop = self._loop(stage, iv, info.iv_extent[iv], inner)
            if p == reduce_at:
                return n.SeqStmt((self._init_nest(info, reduce_at, limit, guards_at, output_index), loop))
            return loop

        stmt = build(0)
        if needs_init and reduce_at is None:
            stmt = n.SeqStmt((n.Store(info.buffer, info.body.combiner.identity(info.body.dtype), output_index), stmt))
        for guard in guards_at.get(-1, ()):
            stmt = n.IfThenElse(guard, stmt)
        return stmt

    def _prefetches(self, info: _StageInfo, root_map: dict, leaves, p: int, attr) -> list[n.Stmt]:
        """Stage.prefetch at loop leaves[p]: for each (tensor, offset), what the loops inside it read of the
        tensor in iteration (leaf + offset), as interval bounds per dimension (every read of the stage's body
        together), clamped to the tensor; one `prefetch(address, elements)` call per contiguous run of its
        last dimension, in loops over the others."""
        iv = leaves[p]
        if attr.kind is n.ForKind.VECTORIZED:
            raise ScheduleError(f"prefetch on stage {info.stage.name}, axis {iv.name}: the axis is vectorized; "
                                "prefetch at a loop outside the vectorized one")
        body = info.body
        exprs = [body.source, *([body.condition] if body.condition is not None else [])] \
            if isinstance(body, Reduce) else [body]
        inner = {leaf.var: (n.IntImm("int32", 0), n.IntImm("int32", info.iv_extent[leaf] - 1))
                 for leaf in leaves[p + 1:]}
        stmts = []
        for tensor, offset in attr.prefetches:
            producer = self.schedule.stage_map.get(tensor.op)
            if producer is not None and (producer.attach_type != "root" or producer.scope != "global"):
                where = "inlined" if producer.attach_type == "inline" else \
                    f"in {producer.scope} memory" if producer.attach_type == "root" else "inside another loop nest"
                raise ScheduleError(f"prefetch on stage {info.stage.name}, axis {iv.name}: {tensor.op.name} is "
                                    f"computed {where}; prefetch a placeholder or a stage computed at the root in "
                                    "global memory")
            reads: list[TensorRead] = []

            def find(x, tensor=tensor, reads=reads):
                if isinstance(x, TensorRead) and x.tensor.op is tensor.op \
                        and x.tensor.value_index == tensor.value_index:
                    reads.append(x)
                return None
            for expr in exprs:
                rewrite(expr, pre=find)
            if not reads:   # read only by stages attached inside the loop: nothing of this stage's to ask for
                continue
            ahead = n.Add(iv.var, n.IntImm("int32", offset))
            env = {**inner, iv.var: (ahead, ahead)}
            bounds = []
            for d, extent in enumerate(tensor.shape):
                last = n.IntImm("int32", int(extent) - 1)
                spans = [interval(self._lower_reads(read.indices[d], root_map), env) for read in reads]
                if any(span is None for span in spans):   # data-dependent: the whole dimension
                    spans = [(n.IntImm("int32", 0), last)]
                lo, hi = spans[0]
                for other in spans[1:]:
                    lo, hi = n.Min(lo, other[0]), n.Max(hi, other[1])
                bounds.append((simplify_expr(n.Max(lo, n.IntImm("int32", 0))), simplify_expr(n.Min(hi, last))))
            buffer, _ = self.address(tensor, [n.IntImm("int32", 0)] * len(bounds))
            counters = [n.Var(f"{info.stage.name}.prefetch{d}", "int32") for d in range(len(bounds) - 1)]
            first = [n.Add(lo, v) for (lo, _), v in zip(bounds, counters)] + [bounds[-1][0]]
            (lo, hi) = bounds[-1]
            count = simplify_expr(n.Add(n.Sub(hi, lo), n.IntImm("int32", 1)))
            call = n.Evaluate(n.Call("void", n.PREFETCH_CALL,
                                     (n.BufferPointer(buffer, self.address(tensor, first)[1]), count)))
            stmt: n.Stmt = n.IfThenElse(n.LT(n.IntImm("int32", 0), count), call)
            for v, (lo, hi) in reversed(list(zip(counters, bounds))):
                stmt = n.For(v, n.IntImm("int32", 0), simplify_expr(n.Add(n.Sub(hi, lo), n.IntImm("int32", 1))),
                             n.ForKind.SERIAL, stmt)
            stmts.append(stmt)
        return stmts

    def _init_nest(self, info, reduce_at, limit, guards_at, output_index) -> n.Stmt:
        stage = info.stage
        leaves = [leaf for leaf in stage.leaf_iter_vars[reduce_at:limit] if leaf.kind != "reduce"]
        body: n.Stmt = n.Store(info.buffer, info.body.combiner.identity(info.body.dtype), output_index)
        data_positions = {stage.leaf_iter_vars.index(leaf) for leaf in leaves}
        for level, guards in guards_at.items():
            if level in data_positions:
                for guard in guards:
                    body = n.IfThenElse(guard, body)
        for leaf in reversed(leaves):
            body = self._loop(stage, leaf, info.iv_extent[leaf], body)
        return body

    def _attach_producers(self, stage: Stage, iv: IterVar, inner: n.Stmt) -> n.Stmt:
        producers = [info for info in self.infos.values()
                     if info.stage.attach_type == "scope" and info.stage.attach_stage is stage
                     and info.stage.attach_ivar is iv]
        if not producers:
            return inner
        parts = [self._stage_nest(info) for info in producers]
        if any(info.stage.scope == "shared" for info in producers):
            # every thread must see the whole tile before use, and finish using it
            # before a later iteration of an enclosing serial loop overwrites it
            parts.append(n.Barrier("shared"))
            parts.append(inner)
            if any(st.iter_attrs.get(leaf) is None or st.iter_attrs[leaf].kind is not n.ForKind.THREAD_BINDING
                   for st, leaf in self._enclosing(stage, iv)):
                parts.append(n.Barrier("shared"))
        else:
            parts.append(inner)
        stmt: n.Stmt = n.SeqStmt(tuple(parts))
        for info in reversed(producers):
            if not info.is_param:
                stmt = n.Allocate(info.buffer, stmt)
        return stmt

    # ---- cooperative fetch into shared memory ------------------------------------------

    def _thread_extents(self, info: _StageInfo) -> list[tuple[str, int]]:
        chain = [info.stage.attach_stage, *info.stage.attach_stage._attach_chain()]
        found: dict[str, int] = {}
        for st in chain:
            for leaf in st.leaf_iter_vars:
                attr = st.iter_attrs.get(leaf)
                if attr and attr.thread_tag and attr.thread_tag.startswith("threadIdx"):
                    found[attr.thread_tag] = max(found.get(attr.thread_tag, 0), self.infos[st].iv_extent[leaf])
        return sorted(found.items(), reverse=True)  # z, y, x: outer to inner

    def _is_cooperative(self, info: _StageInfo) -> bool:
        stage = info.stage
        return (stage.scope == "shared" and stage.attach_type == "scope" and not stage.relations
                and not stage.iter_attrs and not isinstance(info.body, Reduce)
                and bool(self._thread_extents(info)))

    def _cooperative_nest(self, info: _StageInfo) -> n.Stmt:
        """Every thread of the block copies a strided share of the shared tile."""
        threads = self._thread_extents(info)
        total = math.prod(info.extents)
        count = math.prod(e for _, e in threads)
        thread_vars = [n.Var(tag) for tag, _ in threads]
        tid = None
        for var, (_, extent) in zip(thread_vars, threads):
            tid = var if tid is None else n.Add(n.Mul(tid, n.IntImm("int32", extent)), var)
        step = n.Var(f"{info.stage.name}.fetch")
        steps = -(-total // count)
        self.var_bounds[step] = (0, steps - 1)
        for var, (_, extent) in zip(thread_vars, threads):
            self.var_bounds[var] = (0, extent - 1)
        linear = n.Add(n.Mul(step, n.IntImm("int32", count)), tid)
        overrides, acc = {}, 1
        op = info.stage.op
        for d in reversed(range(len(info.extents))):
            overrides[op.axis[d].var] = n.FloorMod(n.FloorDiv(linear, n.IntImm("int32", acc)),
                                                   n.IntImm("int32", info.extents[d]))
            acc *= info.extents[d]
        root_map = self._root_map(info, overrides)
        index = self._flat_index(info, [root_map[a.var] for a in op.axis])
        body: n.Stmt = n.Store(info.buffer, self.lower_expr(info.body, root_map), index)
        for guard in info.guards:
            body = n.IfThenElse(substitute(guard, overrides), body)
        if total % count:
            body = n.IfThenElse(n.LT(linear, n.IntImm("int32", total)), body)
        body = n.For(step, n.IntImm("int32", 0), n.IntImm("int32", steps), n.ForKind.SERIAL, body)
        for var, (tag, extent) in reversed(list(zip(thread_vars, threads))):
            body = n.For(var, n.IntImm("int32", 0), n.IntImm("int32", extent), n.ForKind.THREAD_BINDING, body, tag)
        return body

    # ---- tensorize -------------------------------------------------------------------

    def _tensorize_call(self, info: _StageInfo, axis: IterVar) -> n.Stmt:
        stage = info.stage
        intrin = stage.iter_attrs[axis].tensorize
        root_extents = {iv: e for iv, e in zip(stage.op.axis, info.extents)}
        root_extents.update({iv: iv.dom.extent for iv in stage.op.reduce_axis})
        match = match_tensorize(stage, axis, intrin, info.body, root_extents)
        if intrin not in self.intrinsics:
            self.intrinsics.append(intrin)
        origin = {leaf.var: n.IntImm("int32", 0) for leaf in match.below}
        root_map = self._root_map(info, origin)
        pointers, strides = [], []
        where = f"tensorize on stage {stage.name}, axis {axis.name} with {intrin.name!r}"
        for desc_tensor in intrin.inputs:
            tensor, indices = match.tensor_map[desc_tensor]
            target = self.info_of(tensor)
            if target is None and tensor.op not in self.placeholder_buffers:
                raise ScheduleError(f"{where}: input {tensor.name} is inlined; it needs a buffer")
            indices = [self.lower_expr(substitute(i, root_map), {}) for i in indices]
            buf, index = self.address(tensor, indices)
            tensor_strides = target.strides if target is not None else _row_major(tensor.shape)
            pointers.append(n.BufferPointer(buf, index))
            strides.append((tensor.name, tensor_strides[len(tensor_strides) - desc_tensor.ndim:]))
        out_index = self._flat_index(info, [root_map[a.var] for a in stage.op.axis])
        pointers.append(n.BufferPointer(info.buffer, out_index))
        strides.append((stage.name, info.strides[len(info.strides) - intrin.output.ndim:]))
        args = list(pointers)
        for name, tile_strides in strides:
            if tile_strides and tile_strides[-1] != 1:
                raise ScheduleError(f"{where}: the last tile dimension of {name} has stride {tile_strides[-1]}, "
                                    "but intrinsics need stride 1 there; change the layout or the storage_align")
            args += [n.IntImm("int64", s) for s in tile_strides[:-1]]
        args += [n.IntImm("int64", match.bindings[v]) for v in intrin.extent_vars]
        if not match.outer_reduce_leaves or not isinstance(info.body, Reduce):
            accumulate: n.PrimExpr = n.IntImm("int32", 0)
        else:
            first = None
            for leaf in match.outer_reduce_leaves:
                cond = n.EQ(leaf.var, n.IntImm("int32", 0))
                first = cond if first is None else n.And(first, cond)
            accumulate = n.Select(first, n.IntImm("int32", 0), n.IntImm("int32", 1))
        args.append(accumulate)
        return n.Evaluate(n.Call("void", intrin.name, tuple(args)))


# Storage scopes and GPU indices ranked from widest to narrowest sharing, as in TVM's
# StorageRank / ThreadScope: a buffer of scope rank r is shared by every index of rank >= r.
_SCOPE_RANK = {"global": 0, "shared": 1, "warp": 2, "local": 3}


def _thread_tag(stage: Stage, leaf: IterVar) -> str | None:
    attr = stage.iter_attrs.get(leaf)
    return attr.thread_tag if attr is not None else None


def _is_relaxed(thread_tag: str | None, scope: str) -> bool:
    """Whether a loop bound to `thread_tag` spans all its values in a `scope` buffer's region.

    TVM's NeedRelax: a "shared" tile serves the whole block, so it covers every threadIdx
    (and vthread) of its consumers; a "global" buffer also covers every blockIdx; a
    "local" one belongs to one thread and relaxes nothing; "warp" memory is indexed by
    lane, so threadIdx.x is relaxed. Serial loops are never relaxed.
    """
    if thread_tag is None:
        return False
    scope_rank = _SCOPE_RANK.get(scope, 0)
    if scope == "warp" and thread_tag == "threadIdx.x":
        return True
    thread_rank = 0 if thread_tag.startswith("blockIdx") else 1
    return scope_rank <= thread_rank


def predicate_select_loads(expr: n.PrimExpr, bounds: dict) -> n.PrimExpr:
    """Give every Load in a Select branch that may be out of bounds the branch's condition
    as its predicate: `Select(c, A[i - 1], 0)` -> `Select(c, A[i - 1] if c, 0)`.

    tir.Select evaluates both branches (emitters may compute both and pick per lane, as
    cpu_llvm and vector code do), while te.if_then_else means "read only when c holds":
    padded reads rely on it. A predicated Load reads nothing where its predicate is false,
    and stays vectorizable (a masked vector load). Loads whose index `bounds` proves in
    range are left alone.
    """
    def is_safe(load: n.Load) -> bool:
        index = const_bounds(load.index, bounds)
        size = math.prod(as_int(s) or 0 for s in load.buffer.shape)
        return index is not None and index[0] >= 0 and index[1] < size

    def guard(branch: n.PrimExpr, condition: n.PrimExpr) -> n.PrimExpr:
        def post(x):
            if isinstance(x, n.Load) and not is_safe(x):
                predicate = condition if x.predicate is None else n.And(condition, x.predicate)
                return n.Load(x.buffer, x.index, predicate)
            return None
        return rewrite(branch, post=post)

    def post(x):
        if isinstance(x, n.Select):
            true_value = guard(x.true_value, x.condition)
            false_value = guard(x.false_value, n.Not(x.condition))
            if true_value is not x.true_value or false_value is not x.false_value:
                return n.Select(x.condition, true_value, false_value)
        return None
    return rewrite(expr, post=post)


def _bind_parallel_loop(stage: Stage, body: n.Stmt, threads: int) -> n.Stmt:
    """An extern body's outermost PARALLEL loop (under its LetStmts) as blockIdx.x x threadIdx.x."""
    def bind(stmt):
        if isinstance(stmt, n.LetStmt):
            inner = bind(stmt.body)
            return None if inner is None else n.LetStmt(stmt.var, stmt.value, inner)
        if not isinstance(stmt, n.For) or stmt.kind is not n.ForKind.PARALLEL:
            return None
        extent = as_int(stmt.extent)
        if extent is None:
            raise ScheduleError(f"bind_parallel_loops on stage {stage.name}: the parallel loop {stmt.loop_var.name} "
                                f"has a symbolic extent {stmt.extent}; GPU launches need a static one")
        per_block = max(1, min(threads, extent))
        blocks = -(-extent // per_block)
        block, thread = n.Var(f"{stmt.loop_var.name}.block"), n.Var(f"{stmt.loop_var.name}.thread")
        index = n.Add(n.Mul(block, n.IntImm("int32", per_block)), thread)
        inner: n.Stmt = n.LetStmt(stmt.loop_var, index if as_int(stmt.min) == 0 else n.Add(stmt.min, index),
                                  stmt.body)
        if blocks * per_block > extent:
            inner = n.IfThenElse(n.LT(index, n.IntImm("int32", extent)), inner)
        inner = n.For(thread, n.IntImm("int32", 0), n.IntImm("int32", per_block), n.ForKind.THREAD_BINDING, inner,
                      "threadIdx.x")
        return n.For(block, n.IntImm("int32", 0), n.IntImm("int32", blocks), n.ForKind.THREAD_BINDING, inner,
                     "blockIdx.x")

    bound = bind(body)
    if bound is not None:
        return bound
    parallel = []
    post_order_visit(body, lambda x: parallel.append(x) if isinstance(x, n.For) and x.kind is n.ForKind.PARALLEL
                     else None)
    if parallel:
        raise ScheduleError(f"bind_parallel_loops on stage {stage.name}: its parallel loop "
                            f"{parallel[0].loop_var.name} is not the body's outermost statement, so threads could "
                            "not run it alone; make it the outermost loop, or leave the stage on one thread")
    return body   # nothing parallel (one row): one thread runs it


def _reads_of(body, stage: Stage) -> list[tuple]:
    found = []

    def fn(x):
        if isinstance(x, TensorRead) and (x.tensor.op is stage.op or x.tensor.op is stage.origin_op):
            found.append(x.indices)
    post_order_visit(body, fn)
    return found
