"""stmts.py: tir statements -> LLVM control flow: stores, loops (serial, unrolled, vectorized, parallel),
guards, allocations, lets and intrinsic calls.

Parallel loops are outlined into a function `void body(void* closure)` run on the
thread pool (thread_pool.c): `tk_parallel(body, closure, threads)`, or called directly
when `tensorkiln_num_threads` is 1 (no fork/join at all). Iterations are scheduled
dynamically and guided (OpenMP's schedule(guided)): each thread takes, from an
atomic counter in the closure, a chunk of the iterations left divided by
GUIDED_DIVISOR x threads, until none are left. A thread that other processes slow
down takes fewer chunks, and one that has not started when the work is done never
starts (the pool does not wait for it), so the region is not as slow as its slowest
thread (a static split was: 2 threads slower than 1 on a loaded machine), and the chunks
shrink towards the end, so the threads finish within an iteration or two of each
other (fixed chunks of an eighth of the loop left a thread idle for up to an
eighth of each region at 2 threads). The claiming is one function per module
(`_claim_function`), called once per chunk.
The closure holds every variable and buffer pointer in scope, so the body sees
what it saw before outlining; allocations inside the body are per thread.
"""
from __future__ import annotations

import contextlib
import itertools
import math

import llvmlite.ir as ir

from tensorkiln import tir
from tensorkiln.ir.dtypes import dtype_of
from tensorkiln.ir.errors import CompileError

from .cgutils import (I32, I64, PTR, VOID, alloca_in_entry, declare, for_range, lanes_of, memory_type,
                      reused_heap_block, run_parallel, splat, team_size, value_type)
from .exprs import ExprCodegen

__all__ = ["FunctionCodegen", "STACK_BYTES_LIMIT", "UNROLL_INLINE_LIMIT", "UNROLL_PARTIAL_COUNT", "NUM_THREADS_GLOBAL"]

STACK_BYTES_LIMIT = 64 * 1024
"""Constant-size allocations up to this size live on the stack; larger ones on the heap."""
UNROLL_INLINE_LIMIT = 16
"""UNROLLED loops with a constant extent up to this are emitted unrolled; longer ones get unroll metadata."""
UNROLL_PARTIAL_COUNT = 8
"""Unroll factor asked of LLVM for longer UNROLLED loops: full unrolling of nested 1024-loops (the seed's
example) would take LLVM minutes and blow the instruction cache."""
HEAP_ALIGNMENT = 64
NUM_THREADS_GLOBAL = "tensorkiln_num_threads"
GUIDED_DIVISOR = 2
"""A thread claims (iterations left) / (GUIDED_DIVISOR x threads) of a parallel loop at a time (at least one)."""


class FunctionCodegen(ExprCodegen, tir.StmtFunctor):
    """Emit the body of one LLVM function from tir statements (one `visit_<Stmt>` method each)."""

    def __init__(self, module: ir.Module, function: ir.Function, call_intrinsic, in_parallel: bool = False) -> None:
        builder = ir.IRBuilder(function.append_basic_block("entry"))
        super().__init__(module, builder, call_intrinsic)
        self.function = function
        self.in_parallel = in_parallel
        self._outlined = itertools.count()

    def stmt(self, node: tir.Stmt) -> None:
        self.visit_stmt(node)

    # -- simple statements --------------------------------------------------------------------

    def visit_SeqStmt(self, node: tir.SeqStmt) -> None:
        for child in node.stmts:
            self.stmt(child)

    def visit_Evaluate(self, node: tir.Evaluate) -> None:
        if not isinstance(node.value, (tir.IntImm, tir.FloatImm)):
            self.expr(node.value)

    def visit_Barrier(self, node: tir.Barrier) -> None:
        # one CPU thread runs each work item to completion: nothing to wait for
        return None

    def visit_LetStmt(self, node: tir.LetStmt) -> None:
        self.vars[node.var] = self.expr(node.value)
        self.forget_emitted()
        with self._sign_known(node.var, node.value):
            try:
                self.stmt(node.body)
            finally:
                del self.vars[node.var]

    @contextlib.contextmanager
    def _sign_known(self, var: tir.Var, first: tir.PrimExpr):
        """While a loop from `first` (or a let of value `first`) is emitted, `var` counts as non-negative
        when `first` is (tir.non_negative: unsigned division of the indices that read it)."""
        known = tir.non_negative(first, self.non_negative_vars)
        if known:
            self.non_negative_vars.add(id(var))
        try:
            yield
        finally:
            if known:
                self.non_negative_vars.discard(id(var))

    def visit_IfThenElse(self, node: tir.IfThenElse) -> None:
        condition = self._as_bool(node.condition)
        if lanes_of(condition.type) != 1:
            raise CompileError(f"cpu_llvm: IfThenElse needs a scalar condition, got {node.condition.dtype}:\n{node}")
        if node.else_case is None:
            with self.builder.if_then(condition):
                self.stmt(node.then_case)
            return
        with self.builder.if_else(condition) as (then, otherwise):
            with then:
                self.stmt(node.then_case)
            with otherwise:
                self.stmt(node.else_case)

    # -- stores -------------------------------------------------------------------------------

    def visit_Store(self, node: tir.Store) -> None:
        buffer = node.buffer
        lanes = node.index.lanes
        element_bytes = max(1, dtype_of(buffer.dtype).bits // 8)
        value = self.cast(self.expr(node.value), node.value.dtype,
                          f"{dtype_of(buffer.dtype).element}x{lanes}" if lanes > 1 else buffer.dtype)
        value = self.to_memory(value, buffer.dtype)
        mask = self._as_bool(node.predicate) if node.predicate is not None else None
        builder = self.builder
        base = self.contiguous_base(node.index)
        if lanes == 1:
            pointer = self.element_pointer(buffer, self.index_value(node.index))
            if mask is None:
                builder.store(value, pointer, align=element_bytes)
            else:
                with builder.if_then(mask):
                    builder.store(value, pointer, align=element_bytes)
            return
        if base is not None:
            pointer = builder.bitcast(self.element_pointer(buffer, self.index_value(base)), value.type.as_pointer())
            if mask is None:
                builder.store(value, pointer, align=element_bytes)
            else:
                if lanes_of(mask.type) == 1:
                    mask = splat(builder, mask, lanes)
                builder.call(self._masked_intrinsic("store", value.type), [value, pointer, I32(element_bytes), mask])
            return
        self._scatter(node, value, mask, lanes, element_bytes)

    def _scatter(self, node: tir.Store, value: ir.Value, mask, lanes: int, element_bytes: int) -> None:
        builder = self.builder
        indices = self.expr(node.index)
        for lane in range(lanes):
            index = builder.extract_element(indices, I32(lane))
            index = builder.sext(index, I64) if index.type != I64 else index
            lane_value = builder.extract_element(value, I32(lane))
            pointer = self.element_pointer(node.buffer, index)
            if mask is None:
                builder.store(lane_value, pointer, align=element_bytes)
                continue
            lane_mask = mask if lanes_of(mask.type) == 1 else builder.extract_element(mask, I32(lane))
            with builder.if_then(lane_mask):
                builder.store(lane_value, pointer, align=element_bytes)

    # -- allocations --------------------------------------------------------------------------

    def visit_Allocate(self, node: tir.Allocate) -> None:
        # every scope ("global", "local", and a GPU schedule's "shared") is ordinary memory on a CPU
        buffer = node.buffer
        element_type = memory_type(buffer.dtype)
        element_bytes = max(1, dtype_of(buffer.dtype).bits // 8)
        sizes = [dim.value if isinstance(dim, tir.IntImm) else None for dim in buffer.shape]
        if all(size is not None for size in sizes) and math.prod(sizes) * element_bytes <= STACK_BYTES_LIMIT:
            pointer = alloca_in_entry(self.builder, element_type, max(1, math.prod(sizes)), name=buffer.name,
                                      align=HEAP_ALIGNMENT)
            self.buffers[buffer] = pointer
            self.stmt(node.body)
            del self.buffers[buffer]
            return
        count = I64(1)
        for dim in buffer.shape:
            count = self.builder.mul(count, self.index_value(dim))
        nbytes = self.builder.mul(count, I64(element_bytes))
        # aligned_alloc wants a multiple of the alignment
        rounded = self.builder.and_(self.builder.add(nbytes, I64(HEAP_ALIGNMENT - 1)), I64(-HEAP_ALIGNMENT))
        raw, release = reused_heap_block(self.builder, rounded, f"{self.function.name}.{buffer.name}")
        self.buffers[buffer] = self.builder.bitcast(raw, element_type.as_pointer())
        self.stmt(node.body)
        del self.buffers[buffer]
        release()

    # -- loops --------------------------------------------------------------------------------

    def visit_For(self, node: tir.For) -> None:
        kind = node.kind
        if kind == tir.ForKind.THREAD_BINDING:
            raise CompileError(f"cpu_llvm cannot run loop {node.loop_var.name!r} bound to {node.thread_tag!r}: "
                               "thread binding is for GPU targets; use parallel() on CPUs")
        if kind == tir.ForKind.PARALLEL and not self.in_parallel:
            self._parallel_for(node)
            return
        if kind == tir.ForKind.UNROLLED and isinstance(node.extent, tir.IntImm) \
                and node.extent.value <= UNROLL_INLINE_LIMIT:
            start = self.expr(node.min)
            with self._sign_known(node.loop_var, node.min):
                for step in range(node.extent.value):
                    self.vars[node.loop_var] = self.builder.add(start, ir.Constant(start.type, step))
                    self.forget_emitted()
                    self.stmt(node.body)
            del self.vars[node.loop_var]
            return
        # A VECTORIZED loop reaching here is one tir's vectorize_loops could not turn into vector
        # code; it is left to LLVM's loop vectorizer and its cost model. Forcing it
        # ("llvm.loop.vectorize.enable") changed no measured kernel and made LLVM print "loop not
        # vectorized" warnings on every compile where it could not.
        metadata = {tir.ForKind.UNROLLED: {"llvm.loop.unroll.count": UNROLL_PARTIAL_COUNT}}.get(kind)
        self._serial_for(node, self.expr(node.min), self.expr(node.extent), metadata)

    def _serial_for(self, node: tir.For, start: ir.Value, extent: ir.Value, metadata=None) -> None:
        loop_type = value_type(node.loop_var.dtype)
        start = self.cast(start, node.min.dtype, node.loop_var.dtype) if start.type != loop_type else start
        extent = self.cast(extent, node.extent.dtype, node.loop_var.dtype) if extent.type != loop_type else extent
        with self._sign_known(node.loop_var, node.min), \
                for_range(self.builder, start, self.builder.add(start, extent), metadata, name=node.loop_var.name) as i:
            self.vars[node.loop_var] = i
            self.forget_emitted()
            self.stmt(node.body)
        del self.vars[node.loop_var]

    def _parallel_for(self, node: tir.For) -> None:
        builder = self.builder
        loop_type = value_type(node.loop_var.dtype)
        start = self.cast(self.expr(node.min), node.min.dtype, node.loop_var.dtype)
        extent = self.cast(self.expr(node.extent), node.extent.dtype, node.loop_var.dtype)
        captured_vars = list(self.vars.items())
        captured_buffers = list(self.buffers.items())
        # slot 0: the next unclaimed iteration, shared by the team (atomic)
        values = [ir.Constant(loop_type, 0), start, extent, *(v for _, v in captured_vars),
                  *(p for _, p in captured_buffers)]
        closure_type = ir.LiteralStructType([v.type for v in values])
        closure = alloca_in_entry(builder, closure_type, name="closure")
        for slot, value in enumerate(values):
            builder.store(value, builder.gep(closure, [I32(0), I32(slot)], inbounds=True))

        name = f"{self.function.name}.parallel{next(self._outlined)}"
        body = self._outline(node, name, closure_type, captured_vars, captured_buffers, loop_type)

        num_threads = builder.load(self.module.get_global(NUM_THREADS_GLOBAL))
        with builder.if_else(builder.icmp_signed("==", num_threads, I32(1))) as (alone, team):
            with alone:
                builder.call(body, [builder.bitcast(closure, PTR)])
            with team:   # 0: every core (OpenMP's count: OMP_NUM_THREADS, else the cores)
                max_threads = builder.call(declare(self.module, "omp_get_max_threads", I32, []), [])
                threads = builder.select(builder.icmp_signed(">", num_threads, I32(0)), num_threads, max_threads)
                run_parallel(builder, body, closure, threads)

    def _outline(self, node: tir.For, name: str, closure_type, captured_vars, captured_buffers,
                 loop_type) -> ir.Function:
        """`void name(void* closure)`, which unpacks the closure and calls `name.body(counter, start, extent,
        vars..., buffers...)`, where the loop runs. Buffers reach the body as noalias parameters, as they
        are in the kernel: read from a closure they would be pointers of unknown provenance, and LLVM
        would reload and re-store across every store (no register accumulation, no hoisting)."""
        pointers = [p for _, p in captured_buffers]
        distinct = [sum(q is p for q in pointers) == 1 for p in pointers]
        inner_type = ir.FunctionType(VOID, [closure_type.elements[0].as_pointer(), *closure_type.elements[1:]])
        inner = ir.Function(self.module, inner_type, f"{name}.body")
        inner.linkage = "internal"
        inner.attributes.add("nounwind")
        inner.attributes.add("alwaysinline")   # into its one caller, the outlined wrapper: as NAME.impl (abi.py)
        first_buffer = 3 + len(captured_vars)
        for argument, unique in zip(inner.args[first_buffer:], distinct):
            if unique:
                argument.add_attribute("noalias")
        child = FunctionCodegen(self.module, inner, self.call_intrinsic, in_parallel=True)
        child._outlined = self._outlined
        counter, child_start, child_extent = inner.args[:3]
        child.vars = {var: value for (var, _), value in zip(captured_vars, inner.args[3:first_buffer])}
        child.non_negative_vars = {id(var) for var, _ in captured_vars if id(var) in self.non_negative_vars}
        child.buffers = {buf: value for (buf, _), value in zip(captured_buffers, inner.args[first_buffer:])}
        with child._dynamic_chunks(counter, child_extent, loop_type) as (first, count):
            child._serial_for(node, child.builder.add(child_start, first), count)
        child.builder.ret_void()

        body = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), name)
        body.linkage = "internal"
        # called twice, by tk_parallel and directly when one thread runs the loop: inlined into that
        # direct call, the loop nest was optimised and compiled twice (densenet121: 12% of LLVM's time)
        body.attributes.add("noinline")
        builder = ir.IRBuilder(body.append_basic_block("entry"))
        closure = builder.bitcast(body.args[0], closure_type.as_pointer())
        slots = [builder.gep(closure, [I32(0), I32(slot)], inbounds=True) for slot in range(len(closure_type.elements))]
        builder.call(inner, [slots[0], *(builder.load(slot) for slot in slots[1:])])
        builder.ret_void()
        return body

    @contextlib.contextmanager
    def _dynamic_chunks(self, counter: ir.Value, extent: ir.Value, loop_type: ir.Type):
        """Yields (first iteration, count) of each chunk this thread claims from the shared `counter` (guided),
        through the module's one `_claim_function`."""
        builder = self.builder
        claim = _claim_function(self.module, loop_type)
        count_slot = alloca_in_entry(builder, loop_type, name="chunk.count")
        function = builder.function
        take = function.append_basic_block("chunk.take")
        run = function.append_basic_block("chunk.run")
        done = function.append_basic_block("chunk.done")
        builder.branch(take)
        builder.position_at_end(take)
        first = builder.call(claim, [counter, extent, count_slot])
        builder.cbranch(builder.icmp_signed("<", first, extent), run, done)
        builder.position_at_end(run)
        yield first, builder.load(count_slot)
        builder.branch(take)
        builder.position_at_end(done)


def _claim_function(module: ir.Module, loop_type: ir.Type) -> ir.Function:
    """`T tk_claim_chunk_iN(T* counter, T extent, T* count)`: the first iteration of the next chunk of a parallel
    loop the calling thread claims (`extent` or more: none is left), its size in `*count`. One per module
    and index width, not inlined: written into each parallel loop, the claiming code made LLVM optimise and
    compile a loop nest around every parallel loop's own (about 15 ms per kernel on the 2-core host, most of
    a concatenation's or an elementwise kernel's compile)."""
    name = f"tk_claim_chunk_i{loop_type.width}"
    if name in module.globals:
        return module.globals[name]
    function = ir.Function(module, ir.FunctionType(loop_type, [loop_type.as_pointer(), loop_type,
                                                               loop_type.as_pointer()]), name)
    function.linkage = "internal"
    function.attributes.add("nounwind")
    function.attributes.add("noinline")
    counter, extent, count_slot = function.args
    builder = ir.IRBuilder(function.append_basic_block("entry"))
    threads = team_size(builder)
    if loop_type != I32:
        threads = builder.sext(threads, loop_type)
    one = ir.Constant(loop_type, 1)
    pieces = builder.mul(threads, ir.Constant(loop_type, GUIDED_DIVISOR))
    if_one = builder.icmp_signed("==", threads, one)   # one thread: the whole range at once
    whole = builder.select(builder.icmp_signed("<", extent, one), one, extent)
    # the size comes from a plain read of the counter: a stale read only sizes one chunk from an older
    # count; the atomic add decides which iterations this thread gets, and the count is clamped below
    claimed = builder.load_atomic(counter, "monotonic", align=loop_type.width // 8)
    chunk = builder.sdiv(builder.sub(extent, claimed), pieces)
    chunk = builder.select(builder.icmp_signed("<", chunk, one), one, chunk)
    chunk = builder.select(if_one, whole, chunk)
    first = builder.atomic_rmw("add", counter, chunk, "monotonic")
    remaining = builder.sub(extent, first)
    builder.store(builder.select(builder.icmp_signed("<", chunk, remaining), chunk, remaining), count_slot)
    builder.ret(first)
    return function
